"""``FakeMooncake.patch()`` and the ``fake_mooncake`` fixture (ARCHITECTURE.md#public-contract)."""

from __future__ import annotations

import sys
import types

import pytest

# pytester's in-process runs restore sys.modules; torch cannot be imported twice
import torch  # noqa: F401

from kvreg.fakes.mooncake import FakeMooncake, MooncakeDistributedStore


@pytest.fixture
def no_mooncake_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from an interpreter where no ``mooncake`` module is loaded (an earlier test may
    have imported the installed wheel); the test's end puts back whatever was there."""
    for name in [m for m in sys.modules if m == "mooncake" or m.startswith("mooncake.")]:
        monkeypatch.delitem(sys.modules, name)


def test_import_reaches_the_fake_and_is_restored(no_mooncake_loaded: None) -> None:
    fake = FakeMooncake(env={})
    assert "mooncake" not in sys.modules
    with fake.patch():
        import mooncake.store
        from mooncake.store import MooncakeDistributedStore as Store
        from mooncake.store import MooncakeHostMemAllocator, ReplicateConfig

        store = Store()
        assert isinstance(store, MooncakeDistributedStore)
        assert store in fake.stores
        assert mooncake.store.MooncakeDistributedStore is Store
        assert ReplicateConfig().replica_num == 1
        ptr = MooncakeHostMemAllocator().alloc(4096)
        assert fake.node().space.owner(ptr) is not None
    assert "mooncake" not in sys.modules and "mooncake.store" not in sys.modules


def test_existing_modules_are_put_back() -> None:
    real_pkg, real_store = types.ModuleType("mooncake"), types.ModuleType("mooncake.store")
    sys.modules.update({"mooncake": real_pkg, "mooncake.store": real_store})
    try:
        with FakeMooncake().patch():
            from mooncake.store import MooncakeDistributedStore as Store

            assert Store.__module__ == "mooncake.store" and Store._fake is not None
        assert sys.modules["mooncake"] is real_pkg
        assert sys.modules["mooncake.store"] is real_store
    finally:
        sys.modules.pop("mooncake", None)
        sys.modules.pop("mooncake.store", None)


def test_unbound_class_refuses_to_build() -> None:
    with pytest.raises(RuntimeError, match="belongs to no FakeMooncake"):
        MooncakeDistributedStore()


FIXTURE_TESTS = '''
import numpy as np
import pytest


def _store():
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("h", "P2PHANDSHAKE", 1 << 20, 1 << 20, "rdma", "", "m:1") == 0
    return s


def test_round_trip(fake_mooncake):
    s = _store()
    a = fake_mooncake.track(np.arange(4096, dtype=np.uint8) % 251)
    b = fake_mooncake.track(np.zeros(4096, np.uint8))
    for x in (a, b):
        assert s.register_buffer(x.ctypes.data, 4096) == 0
    assert s.put_from("k", a.ctypes.data, 4096) == 0
    assert s.get_into("k", b.ctypes.data, 4096) == 4096
    assert (a == b).all()
    for x in (a, b):
        assert s.unregister_buffer(x.ctypes.data) == 0


def test_released_by_default(fake_mooncake, monkeypatch):
    monkeypatch.setenv("MC_MAX_MR_SIZE", str(1 << 20))
    s = _store()
    pool = fake_mooncake.virtual(4 << 20)
    assert s.register_buffer(pool.data_ptr(), 2 << 20) == -600


@pytest.mark.kvreg_mooncake("head")
def test_head_marker(fake_mooncake, monkeypatch):
    monkeypatch.setenv("MC_MAX_MR_SIZE", str(1 << 20))
    s = _store()
    pool = fake_mooncake.virtual(4 << 20)
    assert s.register_buffer(pool.data_ptr(), 2 << 20) == 0
    assert s.unregister_buffer(pool.data_ptr()) == 0


def test_leaky(fake_mooncake):
    s = _store()
    pool = fake_mooncake.virtual(3 << 20, name="kv_pool")
    s.register_buffer(pool.data_ptr() + (1 << 20), 1 << 20)


@pytest.mark.kvreg_allow_leaks
def test_leaky_allowed(fake_mooncake):
    s = _store()
    s.register_buffer(fake_mooncake.virtual(1 << 20).data_ptr(), 1 << 20)
'''


def test_fake_mooncake_fixture_through_pytester(pytester: pytest.Pytester,
                                                no_mooncake_loaded: None) -> None:
    pytester.makepyfile(FIXTURE_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*test_leaky *",
                                 "*1 Mooncake buffer(s) still registered*",
                                 "*kv_pool + 0x100000*", "*kvreg_allow_leaks*"])
    assert "mooncake" not in sys.modules
