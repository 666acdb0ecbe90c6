"""``fabric.patch()`` and the ``fake_verbs`` fixture (ARCHITECTURE.md#public-contract;
docs/mooncake-verbs.md §4.1)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

# pytester's in-process runs restore sys.modules; torch cannot be imported twice
import torch  # noqa: F401

from kvreg.fakes.verbs import Fabric, NotModelledError


def test_every_import_form_reaches_the_fake_and_is_restored() -> None:
    f = Fabric(devices={"mlx5_0": "mlx5"})
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "pyverbs"}
    with f.patch() as node:
        import pyverbs
        import pyverbs.device as d
        from pyverbs import enums as e
        from pyverbs.libibverbs_enums import ibv_access_flags
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.pyverbs_error import PyverbsRDMAError

        assert pyverbs.__kvreg_node__ is node
        assert [x.name for x in d.get_device_list()] == [b"mlx5_0"]
        pd = PD(d.Context(name="mlx5_0"))
        mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        assert ibv_access_flags.IBV_ACCESS_LOCAL_WRITE == e.IBV_ACCESS_LOCAL_WRITE
        assert isinstance(mr, importlib.import_module("pyverbs.mr").MR)
        with pytest.raises(PyverbsRDMAError):
            d.Context(name="nope")
        mr.close()
    after = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "pyverbs"}
    assert after == before


def test_real_or_stand_in_modules_are_put_back() -> None:
    sentinel = types.ModuleType("pyverbs")
    sentinel_dev = types.ModuleType("pyverbs.device")
    sys.modules["pyverbs"] = sentinel
    sys.modules["pyverbs.device"] = sentinel_dev
    try:
        with Fabric(devices={"mlx5_0": "mlx5"}).patch():
            import pyverbs.device

            assert pyverbs.device is not sentinel_dev
            assert hasattr(pyverbs.device, "get_device_list")
        assert sys.modules["pyverbs"] is sentinel
        assert sys.modules["pyverbs.device"] is sentinel_dev
    finally:
        sys.modules.pop("pyverbs", None)
        sys.modules.pop("pyverbs.device", None)


def test_unmodelled_submodule_and_name_fail_loudly() -> None:
    with Fabric().patch():
        with pytest.raises(ModuleNotFoundError, match=r"does not model pyverbs\.cmid"):
            importlib.import_module("pyverbs.cmid")
        # (pyverbs.dmabuf and DmaBufMR are modelled since docs/mooncake-verbs.md §5.6)
        # an unmodelled name exists, as on the real module, and refuses to be used,
        # naming the coverage
        ns: dict[str, object] = {}
        exec("from pyverbs.mr import MREx", ns)
        import pyverbs.mr

        assert hasattr(pyverbs.mr, "MREx") and ns["MREx"] is pyverbs.mr.MREx
        with pytest.raises(NotModelledError,
                           match=r"does not model pyverbs\.mr\.MREx .*COVERAGE"):
            pyverbs.mr.MREx(None, 4096, 1)
        assert not hasattr(pyverbs.mr, "NoSuchThing")
        with pytest.raises(AttributeError):
            pyverbs.mr.NoSuchThing  # noqa: B018
    assert not any(type(f).__name__ == "_Refuser" for f in sys.meta_path)


def test_patch_per_node_and_nesting() -> None:
    f = Fabric(("a", "b"))
    f.add_device("mlx5_0", node="a")
    f.add_device("rxe0", "rxe", node="b")
    with f.patch("b"):
        import pyverbs.device as d

        assert [x.name for x in d.get_device_list()] == [b"rxe0"]
    with f.patch("a"):
        import pyverbs.device as d

        assert [x.name for x in d.get_device_list()] == [b"mlx5_0"]


FIXTURE_TESTS = '''
import errno
import pytest


@pytest.fixture(autouse=True)
def _pyverbs(request):
    # code under test imports pyverbs at call time, once the fixture has patched it
    if "fake_verbs" in request.fixturenames:
        request.getfixturevalue("fake_verbs")
        global d, e, MR, PD, PyverbsRDMAError
        import pyverbs.device as d
        from pyverbs import enums as e
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.pyverbs_error import PyverbsRDMAError


def _pd():
    return PD(d.Context(name=d.get_device_list()[0].name.decode()))


def test_reaches_fake(fake_verbs):
    pd = _pd()
    with MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE) as mr:
        assert len(fake_verbs.live_mrs()) == 1
    assert fake_verbs.live_mrs() == []


def test_add_device_overrides_and_adds(fake_verbs):
    fake_verbs.add_device("mlx5_0", max_mr_size=1 << 20)
    fake_verbs.add_device("erdma_0", "erdma", max_mr_size=1 << 20)
    assert [x.name for x in d.get_device_list()] == [b"mlx5_0", b"erdma_0"]
    ctx = d.Context(name="erdma_0")
    assert ctx.query_device().max_mr_size == 1 << 20
    buf = fake_verbs.node().virtual(4 << 20)
    with pytest.raises(PyverbsRDMAError) as info:
        MR(PD(ctx), 2 << 20, e.IBV_ACCESS_LOCAL_WRITE, address=buf.data_ptr())
    assert info.value.error_code == errno.EINVAL


def test_inject(fake_verbs):
    fake_verbs.inject("reg_mr", nth=1, error="ENOMEM")
    with pytest.raises(PyverbsRDMAError) as info:
        MR(_pd(), 4096, e.IBV_ACCESS_LOCAL_WRITE)
    assert info.value.error_code == errno.ENOMEM


def test_leaky(fake_verbs):
    pool = fake_verbs.node().virtual(1 << 30, name="kv_pool")
    keep = [MR(_pd(), 1 << 20, e.IBV_ACCESS_LOCAL_WRITE, address=pool.data_ptr() + (1 << 20))]
    test_leaky.keep = keep


@pytest.mark.kvreg_allow_leaks
def test_leaky_allowed(fake_verbs):
    test_leaky_allowed.keep = MR(_pd(), 4096, e.IBV_ACCESS_LOCAL_WRITE)
'''


def test_fake_verbs_fixture_through_pytester(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXTURE_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*test_leaky *", "*1 MR(s) still registered*",
                                 "*node0/mlx5_0*kv_pool + 0x100000*", "*kvreg_allow_leaks*"])
    assert "pyverbs" not in sys.modules
