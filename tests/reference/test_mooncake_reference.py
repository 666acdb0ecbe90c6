"""The RDMA / Mooncake reference and SGLang's multi-buffer helpers (docs/mooncake-verbs.md §1.6,
§1.7, §2.1, §3.2, §3.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.fakes.address_space import AddressSpace
from kvreg.harness.cuda.reference import RegistrationError
from kvreg.harness.mooncake.reference import (
    DEFAULT_MAX_MR_SIZE,
    MultiBufferError,
    effective_mr_limit,
    iter_pool_buffers,
    pack_multi_buffer_meta,
    register,
    teardown,
    uses_multi_buffer,
)

GiB = 1 << 30


class RecordingStore:
    """A store double: records calls, fails the nth register, answers like Mooncake (ints)."""

    def __init__(self, fail_register_at: int | None = None, fail_unregister: int = 0) -> None:
        self.live: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.fail_register_at = fail_register_at
        self.fail_unregister = fail_unregister

    def register_buffer(self, ptr: int, size: int) -> int:
        self.calls.append(("register", ptr))
        if self.fail_register_at == sum(1 for c in self.calls if c[0] == "register"):
            return -600  # INVALID_PARAMS (§1.4)
        self.live[ptr] = size
        return 0

    def unregister_buffer(self, ptr: int) -> int:
        self.calls.append(("unregister", ptr))
        if self.fail_unregister:
            self.fail_unregister -= 1
            return -600
        return 0 if self.live.pop(ptr, None) is not None else -600


@pytest.mark.parametrize("env,devices,kw,expected", [
    (None, [], {}, DEFAULT_MAX_MR_SIZE),                    # 1 TiB default (§1.6)
    ("67108864", [], {}, 64 << 20),                          # MC_MAX_MR_SIZE taken as is
    ("0", [2 * GiB], {}, 2 * GiB),                           # 0 ignored; device clamps
    ("junk", [], {}, DEFAULT_MAX_MR_SIZE),                   # garbage ignored (atoll -> 0)
    ("64MiB", [], {}, 64),                                   # atoll stops at the first non-digit
    (str(8 * GiB), [4 * GiB, 2 * GiB], {}, 2 * GiB),         # min over every opened device
    (str(8 * GiB), [2 * GiB], {"protocol": "tcp"}, 8 * GiB),  # tcp opens no device
    (None, [], {"fastdeploy_clamp": True}, 4 * GiB),         # FastDeploy default (§2.1)
    ("100", [], {"fastdeploy_clamp": True}, 1 * GiB),        # clamped up to 1 GiB
    (str(8 * GiB), [], {"fastdeploy_clamp": True}, 6 * GiB),  # clamped down to 6 GiB
])
def test_effective_mr_limit(env: str | None, devices: list[int], kw: dict[str, object],
                            expected: int) -> None:
    assert effective_mr_limit(env, devices, **kw) == expected  # type: ignore[arg-type]


def test_mrs_follow_the_object_stride_not_fixed_offsets() -> None:
    # FastDeploy cut at fixed max offsets (§2.1 test: 1024, 2500 -> 1024, 1024, 452); kvreg cuts
    # at the largest multiple of the block stride instead, so no block straddles an MR (§1.7)
    store = RecordingStore()
    ranges = register(store, 0x1000, 2500, max_mr_size=1024, granularity=300)
    assert ranges == [(0x1000, 900), (0x1000 + 900, 900), (0x1000 + 1800, 700)]
    assert teardown(store, ranges) == [] and ranges == [] and store.live == {}


@given(st.integers(1, 8), st.integers(1, 6))
def test_failure_rolls_back_and_raises(n_chunks: int, fail_at: int) -> None:
    store = RecordingStore(fail_register_at=fail_at)
    if fail_at > n_chunks:
        ranges = register(store, 0, n_chunks * 64, max_mr_size=64, granularity=64)
        assert len(ranges) == n_chunks
        return
    with pytest.raises(RegistrationError, match=f"rc=-600.*offset={(fail_at - 1) * 64}"):
        register(store, 0, n_chunks * 64, max_mr_size=64, granularity=64)
    assert store.live == {}   # nothing leaks (FastDeploy leaked: §2.1 "No rollback")


def test_rollback_failure_is_reported() -> None:
    store = RecordingStore(fail_register_at=3, fail_unregister=1)
    with pytest.raises(RegistrationError, match="rollback could not release") as info:
        register(store, 0, 4 * 64, max_mr_size=64, granularity=64)
    assert info.value.unreleased == [(64, 64)]


def test_pack_multi_buffer_meta_and_its_edge_cases() -> None:
    ptrs, sizes = pack_multi_buffer_meta(["p0", "p1"], [1, 2, 3, 4, 5, 6], [8] * 6)
    assert ptrs == [[1, 2, 3], [4, 5, 6]] and sizes == [[8] * 3] * 2
    assert uses_multi_buffer(ptrs) and not uses_multi_buffer([1, 2]) and not uses_multi_buffer([])
    for args, match in ((([], [1], [1]), "no keys"), ((["a"], [], []), "no pointers"),
                        ((["a", "b"], [1, 2, 3], [1, 1, 1]), "do not divide"),
                        ((["a"], [1, 2], [1]), "2 pointers but 1 sizes"),
                        ((["a", "a"], [1, 2], [1, 1]), "duplicate keys"),
                        ((["a"], [1], [0]), "non-positive size")):
        with pytest.raises(MultiBufferError, match=match):
            pack_multi_buffer_meta(*args)  # type: ignore[arg-type]


def test_iter_pool_buffers_registers_each_allocation_once() -> None:
    space = AddressSpace()
    kv = space.virtual((2, 4, 16), "bfloat16", name="kv")
    temporal = space.virtual((4, 8), "float16")

    class Pool:
        def get_hybrid_pool_buffer(self) -> list[object]:
            return [kv[0], kv[1], None, temporal]   # K and V are views of one allocation

    got = list(iter_pool_buffers(Pool()))
    assert [b.untyped_storage().data_ptr() for b in got] == [kv.data_ptr(), temporal.data_ptr()]

    class Legacy:
        kv_buffer = temporal

    assert list(iter_pool_buffers(Legacy())) == [temporal]
