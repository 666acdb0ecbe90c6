"""Enum values, exceptions, devices and contexts (docs/mooncake-verbs.md §4.1-§4.3, §4.6, §5.2)."""

from __future__ import annotations

import errno

import pytest

from kvreg.fakes.verbs import Fabric, NicProfile, get_nic_profile
from kvreg.fakes.verbs.enums import (
    ENUM_CLASSES,
    ibv_access_flags,
    ibv_send_flags,
    ibv_wc_opcode,
    ibv_wc_status,
    ibv_wr_opcode,
    new_generation_module,
    old_generation_module,
)
from kvreg.fakes.verbs.errors import (
    PyverbsError,
    PyverbsRDMAError,
    PyverbsUserError,
    wc_status_str,
)
from kvreg.fakes.verbs.profiles import DEVICE_ATTR_FIELDS

GiB = 1 << 30


def test_access_flag_values() -> None:
    # §4.6 ibv_access_flags
    A = ibv_access_flags
    assert [int(A[n]) for n in (
        "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ",
        "IBV_ACCESS_REMOTE_ATOMIC", "IBV_ACCESS_MW_BIND", "IBV_ACCESS_ZERO_BASED",
        "IBV_ACCESS_ON_DEMAND", "IBV_ACCESS_HUGETLB", "IBV_ACCESS_FLUSH_GLOBAL",
        "IBV_ACCESS_FLUSH_PERSISTENT")] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    # verbs.h: RELAXED_ORDERING = IBV_ACCESS_OPTIONAL_FIRST, a #define (verbs_api.h), 1 << 20
    assert A.IBV_ACCESS_RELAXED_ORDERING == 1 << 20
    assert "IBV_ACCESS_OPTIONAL_FIRST" not in A.__members__


def test_wc_status_values_cover_0_to_23() -> None:
    # §4.6 ibv_wc_status: LOC_PROT_ERR 4, WR_FLUSH_ERR 5, REM_ACCESS_ERR 10, ... TM 23
    assert [s.value for s in ibv_wc_status] == list(range(24))
    assert ibv_wc_status.IBV_WC_LOC_PROT_ERR == 4
    assert ibv_wc_status.IBV_WC_WR_FLUSH_ERR == 5
    assert ibv_wc_status.IBV_WC_REM_ACCESS_ERR == 10
    assert ibv_wc_status.IBV_WC_RNR_RETRY_EXC_ERR == 13


def test_opcodes_and_send_flags() -> None:
    # §4.6 ibv_wr_opcode / ibv_wc_opcode / ibv_send_flags
    assert (ibv_wr_opcode.IBV_WR_RDMA_WRITE, ibv_wr_opcode.IBV_WR_SEND,
            ibv_wr_opcode.IBV_WR_RDMA_READ, ibv_wr_opcode.IBV_WR_FLUSH,
            ibv_wr_opcode.IBV_WR_ATOMIC_WRITE) == (0, 2, 4, 14, 15)
    assert (ibv_wc_opcode.IBV_WC_SEND, ibv_wc_opcode.IBV_WC_RDMA_WRITE,
            ibv_wc_opcode.IBV_WC_RDMA_READ, ibv_wc_opcode.IBV_WC_RECV,
            ibv_wc_opcode.IBV_WC_RECV_RDMA_WITH_IMM) == (0, 1, 2, 128, 129)
    assert [int(f) for f in ibv_send_flags] == [1, 2, 4, 8, 16]


def test_two_enum_generations_agree() -> None:
    # §4.1: both layouts hold the enum classes and every member at module level; rdma-core
    # v44's pyverbs.enums (Cython cpdef enums) gives IntEnum members, and OR-ing two of
    # them gives a plain int
    old = old_generation_module()
    new = new_generation_module()
    for cls in ENUM_CLASSES:
        assert getattr(new, cls.__name__) is cls is getattr(old, cls.__name__)
        assert issubclass(cls, __import__("enum").IntEnum)
        for name, member in cls.__members__.items():
            assert getattr(old, name) == member.value
            assert getattr(old, name) is getattr(new, name)
    both = old.IBV_ACCESS_LOCAL_WRITE | old.IBV_ACCESS_REMOTE_WRITE
    assert both == 3 and type(both) is int
    assert new.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE == old.IBV_ACCESS_LOCAL_WRITE == 1
    assert old.IBV_LINK_LAYER_ETHERNET == new.IBV_LINK_LAYER_ETHERNET == 2


def test_exception_messages_and_error_code() -> None:
    # §4.2: an errno other than -1 is appended as ". Errno: <n>, <strerror>"
    e = PyverbsRDMAError("Failed to register a MR. length: 0, access flags: 1", 22)
    assert str(e).endswith(". Errno: 22, Invalid argument")
    assert e.error_code == 22 and isinstance(e, PyverbsError)
    assert PyverbsRDMAError("Failed to find device x").error_code == -1
    assert str(PyverbsRDMAError("Failed to find device x")) == "Failed to find device x"
    assert issubclass(PyverbsUserError, PyverbsError)
    # as in pyverbs (checked against rdma-core 44): only PyverbsRDMAError has error_code,
    # and PyverbsUserError takes the message only
    assert not hasattr(PyverbsError("x", 5), "error_code")
    with pytest.raises(TypeError):
        PyverbsUserError("x", 5)  # type: ignore[call-arg]
    # §4.6: the strings rdma-core's wc_status_to_str uses
    assert wc_status_str(4) == "Local protection error"
    assert wc_status_str(10) == "Remote access error"


def test_device_list_names_are_bytes_and_context_errors() -> None:
    # §4.3: Device.name is bytes; Context(name=) errors
    f = Fabric(devices={"mlx5_0": "mlx5", "rxe0": "rxe"})
    d = f.node().modules["pyverbs.device"]
    devs = d.get_device_list()
    assert [x.name for x in devs] == [b"mlx5_0", b"rxe0"]
    assert [x.index for x in devs] == [0, 1]
    assert devs[0].node_type == 1 and devs[0].transport_type == 0
    with pytest.raises(PyverbsUserError, match="Device name must be provided"):
        d.Context()
    with pytest.raises(PyverbsRDMAError, match="Failed to find device mlx5_9") as info:
        d.Context(name="mlx5_9")
    assert info.value.error_code == -1
    with d.Context(name=devs[1].name.decode()) as ctx:
        assert ctx.name == "rxe0"
    assert ctx.closed


def test_query_device_has_every_field_read_only() -> None:
    # §4.3: the DeviceAttr property list
    f = Fabric(devices={"mlx5_0": "mlx5"})
    ctx = f.node().modules["pyverbs.device"].Context(name="mlx5_0")
    attr = ctx.query_device()
    for name in DEVICE_ATTR_FIELDS:
        getattr(attr, name)
    assert attr.max_mr_size == (1 << 64) - 1        # §5.2: mlx5 advertises ~0ull
    with pytest.raises(AttributeError, match="not writable"):
        attr.max_mr_size = 5
    with pytest.raises(AttributeError):
        attr.no_such_field  # noqa: B018
    port = ctx.query_port(1)
    assert port.state == 4 and port.link_layer == 2    # ACTIVE, Ethernet (§4.7)
    with pytest.raises(PyverbsRDMAError) as info:
        ctx.query_port(2)
    assert info.value.error_code == errno.EINVAL
    assert ctx.query_gid(1, 0).gid.startswith("fe80:0000:0000:0000:")
    assert ctx.query_device_ex().orig_attr.max_mr == attr.max_mr


@pytest.mark.parametrize(("profile", "max_mr_size", "enforced"), [
    ("mlx5", (1 << 64) - 1, False),   # §5.2 / §6.4
    ("rxe", (1 << 64) - 1, False),    # RXE_MAX_MR_SIZE = -1ull
    ("ionic", 2 * GiB, True),         # §1.6: 2 GiB advertised; [uncertain] enforcement
    ("erdma", 64 * GiB, True),        # §1.9: "max 68719476736"
])
def test_profiles_advertise_the_spec_limits(profile: str, max_mr_size: int,
                                            enforced: bool) -> None:
    p = get_nic_profile(profile)
    assert p.device_attrs()["max_mr_size"] == max_mr_size
    assert p.enforce_max_mr_size is enforced
    assert p.oversize_errno == errno.EINVAL


def test_rxe_page_size_cap_and_mlx5_mkey_errno() -> None:
    # §5.2: rxe page_size_cap 0xfffff000; MR exhaustion EAGAIN (mlx5) vs ENOMEM (erdma)
    assert get_nic_profile("rxe").device_attrs()["page_size_cap"] == 0xFFFFF000
    assert get_nic_profile("mlx5").mr_exhausted_errno == errno.EAGAIN
    assert get_nic_profile("erdma").mr_exhausted_errno == errno.ENOMEM


def test_add_device_overrides_attrs_and_rejects_unknown_fields() -> None:
    f = Fabric(devices={"mlx5_0": "mlx5"})
    f.add_device("mlx5_0", max_mr_size=4 * GiB, max_mr=3)
    ctx = f.node().modules["pyverbs.device"].Context(name="mlx5_0")
    assert (ctx.query_device().max_mr_size, ctx.query_device().max_mr) == (4 * GiB, 3)
    with pytest.raises(TypeError, match="max_mr_sz"):
        f.add_device("mlx5_0", max_mr_sz=1)
    with pytest.raises(ValueError, match="already exists with profile"):
        f.add_device("mlx5_0", "rxe")
    with pytest.raises(ValueError, match="known"):
        get_nic_profile("cx9")
    custom = get_nic_profile("ionic").replace(enforce_max_mr_size=False)
    assert isinstance(custom, NicProfile) and not custom.enforce_max_mr_size
    with pytest.raises(TypeError, match="nonsense"):
        custom.replace(nonsense=1)


def test_nodes_see_only_their_own_devices() -> None:
    f = Fabric(("a", "b"))
    f.add_device("mlx5_0", node="a")
    f.add_device("rxe0", "rxe", node="b")
    assert [d.name for d in f.node("a").modules["pyverbs.device"].get_device_list()] == \
        [b"mlx5_0"]
    with pytest.raises(PyverbsRDMAError, match="Failed to find device mlx5_0"):
        f.node("b").modules["pyverbs.device"].Context(name="mlx5_0")
    with pytest.raises(ValueError, match="unknown node"):
        f.node("c")


def test_no_rdma_stack_raises_from_get_device_list() -> None:
    # §4.3: a NULL C list raises PyverbsRDMAError (seen on rdma-core 44 without the kernel
    # stack: 'Failed to get devices list', no errno); a stack without NICs gives []
    f = Fabric()
    d = f.node().modules["pyverbs.device"]
    assert d.get_device_list() == []
    f.node().rdma_stack = False
    with pytest.raises(PyverbsRDMAError, match=r"^Failed to get devices list$"):
        d.get_device_list()
