"""The fake pyverbs against the real one, when it is importable (mooncake-verbs.md §4).

Debian's ``python3-pyverbs`` installs pyverbs for the system Python only, so in a
virtualenv this module is skipped. Where it runs, it checks that every name the fake
models exists in the real module, that enum values agree in whichever generation is
installed (§4.1), that parameter names of the constructors the fake models match, and
that the exception classes format errno the same way (§4.2). It needs no RDMA device.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

from kvreg.fakes.verbs import Fabric
from kvreg.fakes.verbs.enums import ENUM_CLASSES, MODULE_CONSTANTS

real_pyverbs = pytest.importorskip(
    "pyverbs", reason="pyverbs is not importable (Debian's python3-pyverbs installs it for "
                      "the system python only)")


def _real(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


FAKE = Fabric(devices={"mlx5_0": "mlx5"}).node().modules
SKIP_GENERATION = {"pyverbs.enums", "pyverbs.libibverbs_enums"}


@pytest.mark.parametrize("module", sorted(set(FAKE) - {"pyverbs"}))
def test_modelled_names_exist_in_the_real_module(module: str) -> None:
    real = _real(module)
    if real is None:
        if module in SKIP_GENERATION:
            pytest.skip(f"{module} belongs to the other enum generation (§4.1)")
        pytest.fail(f"real pyverbs has no module {module}")
    fake = FAKE[module]
    names = [n for n in vars(fake) if not n.startswith("_")]
    missing = [n for n in names if not hasattr(real, n)]
    if module in SKIP_GENERATION:
        # enum names grow with rdma-core versions (e.g. IBV_WR_FLUSH); values are compared
        # below, here most names must be there
        assert len(missing) <= len(names) // 10, missing
    else:
        assert missing == [], f"{module}: names the fake has but the real module lacks"


def test_enum_values_agree_with_the_installed_generation() -> None:
    old, new = _real("pyverbs.enums"), _real("pyverbs.libibverbs_enums")
    assert old is not None or new is not None
    checked = 0
    for cls in ENUM_CLASSES:
        real_cls = getattr(new, cls.__name__, None) if new is not None else None
        for name, member in cls.__members__.items():
            for source in (old, new, real_cls):
                value = getattr(source, name, None) if source is not None else None
                if value is not None:
                    assert int(value) == member.value, f"{cls.__name__}.{name}"
                    checked += 1
    for name, value in MODULE_CONSTANTS.items():
        for source in (old, new):
            if source is not None and hasattr(source, name):
                assert int(getattr(source, name)) == value
    assert checked > 50


def _kwargs(module: str, cls: str) -> dict[str, object]:
    """Every keyword the fake's constructor takes, with values the real one accepts."""
    mod = FAKE[module]
    values: dict[str, object] = {
        "SGE": {"addr": 0x1000, "length": 8, "lkey": 1},
        "SendWR": {"wr_id": 1, "opcode": 0, "num_sge": 1, "imm_data": 0, "send_flags": 2,
                   "next_wr": None},
        "RecvWR": {"wr_id": 1, "num_sge": 1, "next_wr": None},
        "QPCap": {"max_send_wr": 2, "max_recv_wr": 2, "max_send_sge": 1, "max_recv_sge": 1,
                  "max_inline_data": 0},
        "QPInitAttr": {"qp_type": 2, "qp_context": None, "scq": None, "rcq": None,
                       "srq": None, "cap": None, "sq_sig_all": 1},
        "QPAttr": {"qp_state": 1, "cur_qp_state": 0, "port_num": 1, "path_mtu": 3},
        "AHAttr": {"dlid": 1, "sl": 0, "src_path_bits": 0, "static_rate": 0, "is_global": 0,
                   "port_num": 1, "gr": None},
        "GlobalRoute": {"flow_label": 0, "sgid_index": 0, "hop_limit": 1,
                        "traffic_class": 0},
    }[cls]
    assert set(values) <= set(inspect.signature(getattr(mod, cls)).parameters)
    return values


@pytest.mark.parametrize(("module", "cls"), [
    ("pyverbs.wr", "SGE"), ("pyverbs.wr", "SendWR"), ("pyverbs.wr", "RecvWR"),
    ("pyverbs.qp", "QPCap"), ("pyverbs.qp", "QPInitAttr"), ("pyverbs.qp", "QPAttr"),
    ("pyverbs.addr", "AHAttr"), ("pyverbs.addr", "GlobalRoute"),
])
def test_constructor_keywords_are_the_real_ones(module: str, cls: str) -> None:
    # §4.5 signatures: the real class accepts every keyword the fake's does
    real = _real(module)
    assert real is not None
    kwargs = _kwargs(module, cls)
    if cls in ("SendWR", "RecvWR"):
        kwargs["sg"] = [real.SGE(0x1000, 8, 1)]
    if cls == "GlobalRoute":
        kwargs["dgid"] = _real("pyverbs.addr").GID("fe80:0000:0000:0000:0000:0000:0000:0001")
    getattr(real, cls)(**kwargs)


def test_exceptions_format_errno_like_pyverbs() -> None:
    err = importlib.import_module("pyverbs.pyverbs_error")
    fake = FAKE["pyverbs.pyverbs_error"]
    for name in ("PyverbsError", "PyverbsRDMAError"):
        assert str(getattr(err, name)("msg", 22)) == str(getattr(fake, name)("msg", 22))
        assert str(getattr(err, name)("msg")) == str(getattr(fake, name)("msg"))
    assert str(err.PyverbsUserError("msg")) == str(fake.PyverbsUserError("msg"))
    assert err.PyverbsRDMAError("msg", 12).error_code == fake.PyverbsRDMAError("m", 12).error_code
    assert hasattr(err.PyverbsError("m"), "error_code") == hasattr(fake.PyverbsError("m"),
                                                                    "error_code")


def test_struct_defaults_and_checks_agree() -> None:
    # objects that need no device: defaults and argument checks of §4.5
    real_wr, fake_wr = _real("pyverbs.wr"), FAKE["pyverbs.wr"]
    real_qp, fake_qp = _real("pyverbs.qp"), FAKE["pyverbs.qp"]
    real_addr, fake_addr = _real("pyverbs.addr"), FAKE["pyverbs.addr"]
    assert real_wr is not None and real_qp is not None and real_addr is not None
    for mod in (real_wr, fake_wr):
        with pytest.raises(OverflowError):
            mod.SGE(0x1000, 1 << 32, 1)
        with pytest.raises(Exception, match="A WR needs at least one SGE") as info:
            mod.SendWR(opcode=0)
        assert type(info.value).__name__ == "PyverbsUserError"
    r, f = real_qp.QPCap(), fake_qp.QPCap()
    for field in ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge",
                  "max_inline_data"):
        assert getattr(r, field) == getattr(f, field), field
    r, f = real_qp.QPAttr(), fake_qp.QPAttr()
    for field in ("qp_state", "cur_qp_state", "port_num", "path_mtu", "dest_qp_num",
                  "qp_access_flags"):
        assert getattr(r, field) == getattr(f, field), field
    assert real_qp.QPInitAttr().qp_type == fake_qp.QPInitAttr().qp_type
    gid = "fe80:0000:0000:0000:0002:c903:00a0:b001"
    assert real_addr.GID(gid).gid == fake_addr.GID(gid).gid
    for mod in (real_addr, fake_addr):
        with pytest.raises(Exception, match="Global AH Attr is created but gr"):
            mod.AHAttr(is_global=1)
        assert mod.AHAttr(dlid=5).dgid is None
