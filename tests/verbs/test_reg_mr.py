"""``MR(pd, length, access, address)``: the ibv_reg_mr rules (docs/mooncake-verbs.md §4.4, §5.2)."""

from __future__ import annotations

import errno
import gc
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.verbs import PAGE_SIZE, Fabric, PyverbsRDMAError, PyverbsUserError
from kvreg.fakes.verbs.enums import ibv_access_flags as A

GiB = 1 << 30
LW = int(A.IBV_ACCESS_LOCAL_WRITE)
RW = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)


def _setup(profile: str = "mlx5", *, memlock: int | None = None, **attrs: Any) -> Any:
    f = Fabric(())
    f.add_node("n", memlock_limit=memlock)
    f.add_device("dev0", profile, node="n", **attrs)
    m = f.node("n").modules
    ctx = m["pyverbs.device"].Context(name="dev0")
    pd = m["pyverbs.pd"].PD(ctx)
    return f, m["pyverbs.mr"].MR, pd


def _errno(fn: Any, *args: Any, **kwargs: Any) -> int:
    with pytest.raises(PyverbsRDMAError) as info:
        fn(*args, **kwargs)
    return info.value.error_code


@pytest.mark.parametrize("access", [
    int(A.IBV_ACCESS_REMOTE_WRITE),
    int(A.IBV_ACCESS_REMOTE_ATOMIC),
    int(A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ),
])
def test_remote_write_or_atomic_without_local_write_is_einval(access: int) -> None:
    # §5.2 row 1 (ib_check_mr_access)
    f, MR, pd = _setup()
    buf = f.node("n").virtual(1 << 20)
    assert _errno(MR, pd, 4096, access, address=buf.data_ptr()) == errno.EINVAL
    assert f.live_mrs() == []
    # REMOTE_READ alone needs no LOCAL_WRITE
    MR(pd, 4096, int(A.IBV_ACCESS_REMOTE_READ), address=buf.data_ptr()).close()


def test_failure_message_names_length_and_access() -> None:
    # §4.4: 'Failed to register a MR. length: <len>, access flags: <acc>' with the errno
    f, MR, pd = _setup()
    buf = f.node("n").virtual(1 << 20)
    with pytest.raises(PyverbsRDMAError, match=r"^Failed to register a MR\. length: 0, "
                                               r"access flags: 1\. Errno: 22, Invalid"):
        MR(pd, 0, LW, address=buf.data_ptr())


def test_zero_length_is_einval_with_and_without_address() -> None:
    # §5.2 row "length 0" (also unaligned address + 0 length: EINVAL in the fake)
    f, MR, pd = _setup()
    buf = f.node("n").virtual(1 << 20)
    assert _errno(MR, pd, 0, LW, address=buf.data_ptr() + 3) == errno.EINVAL
    assert _errno(MR, pd, 0, LW) == errno.EINVAL   # pyverbs: no address, length 0 -> NULL/0


def test_address_zero_means_not_given() -> None:
    # §4.4: address=0 is treated as "not given": pyverbs allocates the buffer
    _f, MR, pd = _setup()
    mr = MR(pd, 8192, LW, address=0)
    assert mr.buf != 0 and mr.buf % PAGE_SIZE == 0
    assert mr.read(8, 0) == b"\0" * 8          # zeroed
    mr.write("abc", 3, 10)
    assert mr.read(3, 10) == b"abc"
    mr.close()


def test_read_offset_is_a_c_int() -> None:
    # §4.4: read(length, offset): the offset is a C int, so >= 2 GiB overflows
    _f, MR, pd = _setup()
    mr = MR(pd, 4096, LW)
    with pytest.raises(OverflowError):
        mr.read(1, 2 * GiB)
    with pytest.raises(PyverbsUserError, match="outside the MR"):
        mr.read(2, 4095)
    mr.close()


def test_any_byte_address_is_accepted_and_whole_pages_are_pinned() -> None:
    # §5.2 row "alignment": no alignment needed; pages covering [addr, addr+len) are pinned
    f, MR, pd = _setup()
    node = f.node("n")
    buf = node.virtual(1 << 20)
    mr = MR(pd, 2, LW, address=buf.data_ptr() + PAGE_SIZE - 1)   # straddles two pages
    assert node.pinned_bytes == 2 * PAGE_SIZE
    mr.close()
    assert node.pinned_bytes == 0


def test_memlock_zero_is_eperm() -> None:
    # §5.2: can_do_mlock() false (RLIMIT_MEMLOCK 0, no CAP_IPC_LOCK) -> EPERM
    f, MR, pd = _setup(memlock=0)
    buf = f.node("n").virtual(1 << 20)
    assert _errno(MR, pd, 4096, LW, address=buf.data_ptr()) == errno.EPERM


def test_memlock_is_charged_per_mr_across_devices() -> None:
    # §5.2 / §1.9: pinned_vm grows per registration; the same buffer on two devices counts
    # twice, so N devices x bytes must fit ulimit -l, else ENOMEM
    f = Fabric(())
    node = f.add_node("n", memlock_limit=3 << 20)
    f.add_device("d0", node="n")
    f.add_device("d1", node="n")
    m = node.modules
    pds = [m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name=d)) for d in ("d0", "d1")]
    buf = node.virtual(8 << 20)
    mr0 = m["pyverbs.mr"].MR(pds[0], 2 << 20, LW, address=buf.data_ptr())
    assert _errno(m["pyverbs.mr"].MR, pds[1], 2 << 20, LW,
                  address=buf.data_ptr()) == errno.ENOMEM
    mr1 = m["pyverbs.mr"].MR(pds[1], 1 << 20, LW, address=buf.data_ptr())
    assert node.pinned_bytes == 3 << 20
    assert (f.node("n").nics["d0"].pinned_bytes, f.node("n").nics["d1"].pinned_bytes) == \
        (2 << 20, 1 << 20)
    mr0.close()
    mr1.close()
    assert node.pinned_bytes == 0


@pytest.mark.parametrize(("profile", "limit"), [("erdma", 64 * GiB), ("efa", 64 * GiB),
                                                ("ionic", 2 * GiB)])
def test_drivers_that_check_max_mr_size_reject_with_einval(profile: str, limit: int) -> None:
    # §5.2 row "len > device max_mr_size": erdma & EFA check (EINVAL); ionic's enforcement
    # is [uncertain] and enforced by default
    f, MR, pd = _setup(profile)
    buf = f.node("n").virtual(2 * limit)
    assert _errno(MR, pd, limit + 1, LW, address=buf.data_ptr()) == errno.EINVAL
    MR(pd, limit, LW, address=buf.data_ptr()).close()


@pytest.mark.parametrize("profile", ["mlx5", "rxe"])
def test_drivers_advertising_u64_max_never_hit_the_limit(profile: str) -> None:
    # §5.2: mlx4/mlx5 and rxe advertise 2^64-1 and do not limit
    f, MR, pd = _setup(profile)
    buf = f.node("n").virtual(8 << 40)
    MR(pd, 8 << 40, LW, address=buf.data_ptr()).close()


def test_uncertain_switches_ionic_enforcement_and_erdma_eio() -> None:
    # §1.6 PR #4168 (ionic accepted 4 GiB) and §1.9 (erdma reported EIO) as profile options
    f = Fabric(())
    node = f.add_node("n")
    from kvreg.fakes.verbs import get_nic_profile

    f.add_device("ionic_0", get_nic_profile("ionic").replace(enforce_max_mr_size=False),
                 node="n")
    f.add_device("erdma_0", get_nic_profile("erdma").replace(oversize_errno=errno.EIO),
                 node="n")
    m = node.modules
    buf = node.virtual(128 * GiB)
    pd_i = m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name="ionic_0"))
    pd_e = m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name="erdma_0"))
    m["pyverbs.mr"].MR(pd_i, 4 * GiB, LW, address=buf.data_ptr()).close()
    assert _errno(m["pyverbs.mr"].MR, pd_e, 65 * GiB, LW, address=buf.data_ptr()) == errno.EIO


@pytest.mark.parametrize(("profile", "code"), [("mlx5", errno.EAGAIN), ("erdma", errno.ENOMEM),
                                               ("rxe", errno.ENOMEM)])
def test_max_mr_exhaustion(profile: str, code: int) -> None:
    # §5.2 row "device out of MR/MKEY resources"; max_mr is settable
    f, MR, pd = _setup(profile, max_mr=2)
    buf = f.node("n").virtual(1 << 20)
    mrs = [MR(pd, 4096, LW, address=buf.data_ptr() + i * 4096) for i in range(2)]
    assert _errno(MR, pd, 4096, LW, address=buf.data_ptr() + 8192) == code
    mrs[0].close()
    MR(pd, 4096, LW, address=buf.data_ptr() + 8192).close()
    mrs[1].close()


def test_on_demand_paging_unsupported_and_supported() -> None:
    # §5.2 row "ON_DEMAND unsupported" -> EOPNOTSUPP; mlx5 supports ODP and pins nothing
    f, MR, pd = _setup("rxe")
    buf = f.node("n").virtual(1 << 20)
    odp = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_ON_DEMAND)
    assert _errno(MR, pd, 4096, odp, address=buf.data_ptr()) == errno.EOPNOTSUPP
    f2, MR2, pd2 = _setup("mlx5")
    buf2 = f2.node("n").virtual(1 << 20)
    mr = MR2(pd2, 1 << 20, odp, address=buf2.data_ptr())
    assert f2.node("n").pinned_bytes == 0
    mr.close()
    MR2(pd2, 0, LW, implicit=True).close()       # §4.4: implicit ODP, NULL/SIZE_MAX


def test_address_overflow_is_einval_or_eoverflow() -> None:
    # §5.2 row "addr+len overflows": EINVAL (newer kernels: EOVERFLOW)
    _f, MR, pd = _setup()
    top = (1 << 64) - 4096
    assert _errno(MR, pd, 8192, LW, address=top) == errno.EINVAL
    from kvreg.fakes.verbs import get_nic_profile

    f2 = Fabric(())
    f2.add_node("n")
    f2.add_device("d", get_nic_profile("mlx5").replace(overflow_errno=errno.EOVERFLOW),
                  node="n")
    m = f2.node("n").modules
    pd2 = m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name="d"))
    assert _errno(m["pyverbs.mr"].MR, pd2, 8192, LW, address=top) == errno.EOVERFLOW


def test_unmapped_virtual_range_is_efault() -> None:
    # §5.2 row "range not mapped" [inferred]: the fake knows which virtual ranges exist
    f, MR, pd = _setup()
    buf = f.node("n").virtual(1 << 20)
    assert _errno(MR, pd, (1 << 20) + 1, LW, address=buf.data_ptr()) == errno.EFAULT
    # the guard page after the buffer's mapping (fakes/reserved.py: PROT_NONE on both sides);
    # a fixed offset further out may hold another mapping of this process, which would pin
    assert _errno(MR, pd, 4096, LW, address=buf.data_ptr() + (1 << 20)) == errno.EFAULT
    MR(pd, 1 << 20, LW, address=buf.data_ptr()).close()


def test_relaxed_ordering_is_masked_when_unsupported() -> None:
    # §4.6: optional-range bits are silently masked if unsupported
    ro = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_RELAXED_ORDERING)
    for profile, kept in (("rxe", LW), ("mlx5", ro)):
        _f, MR, pd = _setup(profile)
        mr = MR(pd, 4096, ro)
        assert mr.access == kept
        mr.close()


def test_size_and_access_are_c_integers() -> None:
    # §4.4 / Cython: length is size_t, access unsigned int
    _f, MR, pd = _setup()
    with pytest.raises(OverflowError):
        MR(pd, -1, LW)
    with pytest.raises(TypeError):
        MR(pd, "4096", LW)


def test_close_twice_is_a_no_op_and_pd_close_closes_mrs() -> None:
    # §4.4: close() is ibv_dereg_mr once; closing the PD/Context closes dependent MRs
    f, MR, pd = _setup()
    buf = f.node("n").virtual(1 << 20)
    mr = MR(pd, 4096, LW, address=buf.data_ptr())
    mr.close()
    mr.close()
    assert len(f.trace.calls("dereg_mr")) == 1
    mrs = [MR(pd, 4096, LW, address=buf.data_ptr() + i * 4096) for i in range(3)]
    pd.ctx.close()
    assert all(m.closed for m in mrs) and pd.closed
    assert f.live_mrs() == []


def test_dropped_mr_is_deregistered_by_gc() -> None:
    # pyverbs' __dealloc__ closes an MR that is garbage-collected
    f, MR, pd = _setup()
    buf = f.node("n").virtual(1 << 20)
    MR(pd, 4096, LW, address=buf.data_ptr())
    gc.collect()
    assert f.live_mrs() == []
    assert f.trace.calls("dereg_mr")[-1].result == "garbage-collected"


def test_leak_report_names_buffer_and_device() -> None:
    f, MR, pd = _setup()
    node = f.node("n")
    pool = node.virtual(1 << 30, name="kv_pool")
    mr = MR(pd, 1 << 20, RW, address=pool.data_ptr() + (1 << 20))
    report = f.leak_report()
    assert "1 MR(s) still registered" in report
    assert "n/dev0" in report and "kv_pool + 0x100000" in report
    mr.close()
    assert f.leak_report() == ""


def test_real_buffer_registration_keeps_its_address() -> None:
    f, MR, pd = _setup()
    arr = f.node("n").track(np.zeros(10000, np.uint8), name="host")
    mr = MR(pd, arr.nbytes, RW, address=arr.ctypes.data)
    assert (mr.buf, mr.length) == (arr.ctypes.data, 10000) and mr.lkey == mr.rkey
    mr.write(b"xyz", 3, 100)
    assert bytes(arr[100:103]) == b"xyz"
    mr.close()
