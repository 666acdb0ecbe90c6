"""cudaMemcpyBatchAsync (docs/cuda-runtime.md §5.3, §5.4, §4 WSL2 row, §11.3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES

MiB = 1 << 20
PAGE = 4096
SIZE_MAX = (1 << 64) - 1


class Rig:
    """Adjacent registrations [0, 2M) and [2M, 4M) of a pool, pageable [4M, 8M), a device
    buffer and a created stream."""

    def __init__(self, profile: object = None) -> None:
        self.fake = FakeCuda(profile)  # type: ignore[arg-type]
        self.rt = self.fake.runtime
        self.base = self.fake.virtual(8 * MiB, name="pool").data_ptr()
        self.rt.cudaHostRegister(self.base, 2 * MiB, 0)
        self.rt.cudaHostRegister(self.base + 2 * MiB, 2 * MiB, 0)
        _, self.dev = self.rt.cudaMalloc(8 * MiB)
        _, self.stream = self.rt.cudaStreamCreate()

    def attrs(self, order: int = 1) -> Any:
        a = self.rt.cudaMemcpyAttributes()
        a.srcAccessOrder = self.rt.cudaMemcpySrcAccessOrder(order)
        return a

    def batch(self, host_offs: list[int], sizes: list[int], *, attrs: list[Any] | None = None,
              idxs: list[int] | None = None, num_attrs: int | None = None,
              stream: Any = "mine", count: int | None = None, d2h: bool = False
              ) -> tuple[Any, ...]:
        hosts = [self.base + o for o in host_offs]
        devs = [self.dev + o for o in host_offs]
        attrs = [self.attrs()] if attrs is None else attrs
        idxs = [0] if idxs is None else idxs
        num_attrs = len(attrs) if num_attrs is None else num_attrs
        count = len(hosts) if count is None else count
        stream = self.stream if stream == "mine" else stream
        dsts, srcs = (hosts, devs) if d2h else (devs, hosts)
        return self.rt.cudaMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, idxs, num_attrs,
                                            stream)

    def fault_text(self) -> str:
        fault = self.fake.cuda_runtime.last_copy_fault
        assert fault is not None
        return fault.describe()


# -- host-side classification (docs/cuda-runtime.md §5.1 applies to the batch API) -----------------

@pytest.mark.parametrize("d2h", [False, True])
def test_wholly_registered_and_wholly_pageable_are_ok(d2h: bool) -> None:
    # docs/cuda-runtime.md §5.3 "The \note_memcpy rule of 5.1 applies" [DOC]; §11.3
    rig = Rig()
    res = rig.batch([0, PAGE, 2 * MiB, 5 * MiB], [PAGE, MiB, 2 * MiB, MiB], d2h=d2h)
    assert res == (rig.rt.cudaError_t.cudaSuccess,)
    assert rig.fake.cuda_runtime.last_copy_fault is None


@pytest.mark.parametrize("d2h", [False, True])
def test_mixed_entry_gives_invalid_value_and_names_the_copy(d2h: bool) -> None:
    # docs/cuda-runtime.md §5.1 mixed registered + unregistered -> 1 [DOC]
    rig = Rig()
    (err,) = rig.batch([0, 5 * MiB, 4 * MiB - PAGE], [PAGE, PAGE, 2 * PAGE], d2h=d2h)
    assert int(err) == 1
    text = rig.fault_text()
    assert text.startswith("copy 2:")
    assert ("dst" if d2h else "src") in text
    assert "partly registered" in text
    assert f"[{rig.base + 2 * MiB:#x}, {rig.base + 4 * MiB:#x})" in text
    assert int(rig.rt.cudaGetLastError()[0]) == 1


def test_spanning_entry_rejected_by_default_and_names_both_registrations() -> None:
    # docs/cuda-runtime.md §5.4 "Status: UNVERIFIED, plausible" [UNC]; §11.3 conservative 1
    rig = Rig()
    (err,) = rig.batch([0, 2 * MiB - PAGE], [PAGE, 2 * PAGE])
    assert int(err) == 1
    text = rig.fault_text()
    b = rig.base
    assert text.startswith("copy 1:")
    assert "spans two separate registrations" in text
    assert f"[{b:#x}, {b + 2 * MiB:#x})" in text and f"[{b + 2 * MiB:#x}, {b + 4 * MiB:#x})" in text


def test_spanning_entry_allowed_by_profile() -> None:
    # docs/cuda-runtime.md §5.4 [UNC]; profile copy_across_registrations="allow"
    rig = Rig(PROFILES["h200-r580"].replace(copy_across_registrations="allow"))
    (err,) = rig.batch([0, 2 * MiB - PAGE], [PAGE, 2 * PAGE])
    assert int(err) == 0
    (err,) = rig.batch([2 * MiB - PAGE], [2 * MiB + 2 * PAGE])   # spans, then runs off the end
    assert int(err) == 1


def test_first_faulty_copy_is_reported() -> None:
    # docs/cuda-runtime.md §5.3 failIdx "the index of the offending copy" [DOC]
    rig = Rig()
    (err,) = rig.batch([0, PAGE, 2 * MiB - PAGE, 4 * MiB - PAGE],
                       [PAGE, PAGE, 2 * PAGE, 2 * PAGE])
    assert int(err) == 1
    assert rig.fake.cuda_runtime.last_copy_fault.index == 2


def test_numpy_arrays_are_accepted_for_large_batches() -> None:
    # docs/cuda-runtime.md §5.3 "the pointers may be ints or buffer objects" [OBS-local]
    rig = Rig()
    n = 1024
    offs = np.arange(n, dtype=np.uint64) * PAGE
    (err,) = rig.rt.cudaMemcpyBatchAsync(rig.dev + offs, rig.base + offs,
                                         np.full(n, PAGE, np.int64), n, [rig.attrs()], [0], 1,
                                         rig.stream)
    assert int(err) == 0
    offs = offs + (2 * MiB - (n // 2) * PAGE + 1)            # entry n/2 - 1 now spans
    (err,) = rig.rt.cudaMemcpyBatchAsync(rig.dev + offs, rig.base + offs,
                                         np.full(n, PAGE, np.int64), n, [rig.attrs()], [0], 1,
                                         rig.stream)
    assert int(err) == 1
    assert rig.fake.cuda_runtime.last_copy_fault.index == n // 2 - 1


# -- the validity rules (docs/cuda-runtime.md §5.3) ------------------------------------------------

def test_src_access_order_invalid_default_is_rejected() -> None:
    # docs/cuda-runtime.md §5.3 "Invalid = 0 (the default, and rejected)" [DOC]
    rig = Rig()
    default = rig.rt.cudaMemcpyAttributes()
    assert int(default.srcAccessOrder) == 0
    assert int(rig.batch([0], [PAGE], attrs=[default])[0]) == 1
    for order in (1, 2, 3):
        assert int(rig.batch([0], [PAGE], attrs=[rig.attrs(order)])[0]) == 0


@pytest.mark.parametrize(("label", "count", "idxs", "n_attrs"), [
    ("attrsIdxs[0] != 0", 2, [1], 1),
    ("not increasing", 3, [0, 0], 2),
    ("decreasing", 3, [0, 2, 1], 3),
    ("last >= count", 2, [0, 2], 2),
    ("numAttrs > count", 1, [0, 0], 2),
])
def test_bad_attrs_layout_gives_invalid_value(label: str, count: int, idxs: list[int],
                                              n_attrs: int) -> None:
    # docs/cuda-runtime.md §5.3 "attrsIdxs[0] must be 0; the entries must strictly increase and
    # the last must be less than count; numAttrs must not exceed count" [DOC]
    rig = Rig()
    offs = [i * PAGE for i in range(count)]
    attrs = [rig.attrs() for _ in range(n_attrs)]
    (err,) = rig.batch(offs, [PAGE] * count, attrs=attrs, idxs=idxs)
    assert int(err) == 1, label
    assert int(rig.rt.cudaGetLastError()[0]) == 1


def test_good_multi_attr_layout_succeeds() -> None:
    # docs/cuda-runtime.md §5.3 validity rules, the legal counterpart [DOC]
    rig = Rig()
    attrs = [rig.attrs(1), rig.attrs(3)]
    (err,) = rig.batch([0, PAGE, 2 * PAGE], [PAGE] * 3, attrs=attrs, idxs=[0, 2])
    assert int(err) == 0


def test_one_bad_order_among_attrs_is_rejected() -> None:
    # docs/cuda-runtime.md §5.3 "Every copy needs an attribute entry with a valid
    # srcAccessOrder" [DOC]
    rig = Rig()
    bad = rig.rt.cudaMemcpyAttributes()
    (err,) = rig.batch([0, PAGE], [PAGE] * 2, attrs=[rig.attrs(), bad], idxs=[0, 1])
    assert int(err) == 1


@pytest.mark.parametrize("stream", [0, None, 1])
def test_legacy_null_stream_is_rejected(stream: Any) -> None:
    # docs/cuda-runtime.md §5.3 "The stream must not be the legacy NULL stream" [DOC];
    # "stream=None becomes 0, the legacy NULL stream" [OBS-local]; cudaStreamLegacy == 1
    rig = Rig()
    (err,) = rig.batch([0], [PAGE], stream=stream)
    assert int(err) == 1
    assert "legacy NULL stream" in rig.fault_text()


def test_per_thread_default_stream_is_accepted() -> None:
    # docs/cuda-runtime.md §5.3 "accepts the per-thread default stream" [DOC] (cuda.core docs)
    rig = Rig()
    (err,) = rig.batch([0], [PAGE], stream=rig.rt.cudaStreamPerThread)
    assert int(err) == 0


@pytest.mark.parametrize("which", ["zero size", "NULL src", "NULL dst"])
def test_zero_size_or_null_entry_is_rejected(which: str) -> None:
    # docs/cuda-runtime.md §5.3 "Zero-byte or NULL entries are rejected" [OBS-ext] rmm #2509
    rig = Rig()
    dsts = [rig.dev, rig.dev + PAGE]
    srcs = [rig.base, rig.base + PAGE]
    sizes = [PAGE, PAGE]
    if which == "zero size":
        sizes[1] = 0
    elif which == "NULL src":
        srcs[1] = 0
    else:
        dsts[1] = None
    (err,) = rig.rt.cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, [rig.attrs()], [0], 1,
                                         rig.stream)
    assert int(err) == 1
    assert rig.fake.cuda_runtime.last_copy_fault.index == 1
    assert "zero-size or NULL" in rig.fault_text()


def test_count_zero_is_rejected() -> None:
    # docs/cuda-runtime.md §5.3 "numAttrs must not exceed count" (count 0 < numAttrs 1) [DOC]
    rig = Rig()
    assert int(rig.batch([0], [PAGE], count=0)[0]) == 1


@pytest.mark.parametrize("short", ["dsts", "srcs", "sizes", "attrs", "attrsIdxs"])
def test_count_greater_than_list_raises(short: str) -> None:
    # docs/cuda-runtime.md §5.3 "If count exceeds the length of any list, the binding raises
    # RuntimeError("List is too small: …")" [OBS-local]
    rig = Rig()
    args: dict[str, Any] = {"dsts": [rig.dev] * 2, "srcs": [rig.base] * 2,
                            "sizes": [PAGE] * 2, "attrs": [rig.attrs()] * 2,
                            "attrsIdxs": [0, 1]}
    args[short] = args[short][:1]
    before = len(rig.fake.trace)
    with pytest.raises(RuntimeError, match=r"List is too small: 1 < 2"):
        rig.rt.cudaMemcpyBatchAsync(args["dsts"], args["srcs"], args["sizes"], 2,
                                    args["attrs"], args["attrsIdxs"], 2, rig.stream)
    assert len(rig.fake.trace) == before
    assert int(rig.rt.cudaPeekAtLastError()[0]) == 0


# -- return arity and driver version (docs/cuda-runtime.md §5.3, §9) -------------------------------

def test_13x_signature_returns_err_only() -> None:
    # docs/cuda-runtime.md §5.3 "13.x returns (cudaError_t,)" [OBS-local]
    rig = Rig("h200-r580")
    ok = rig.batch([0], [PAGE])
    bad = rig.batch([0], [PAGE], stream=0)
    assert len(ok) == 1 and len(bad) == 1
    assert int(bad[0]) == 1


def test_12x_signature_returns_fail_idx_none_on_error() -> None:
    # docs/cuda-runtime.md §5.3 "12.9.x returns (cudaError_t, failIdx). On a non-success result,
    # failIdx is None" [OBS-local]
    rig = Rig("h100-r575")
    assert rig.fake.profile.bindings_major == 12
    err, fail_idx = rig.batch([0], [PAGE])
    assert int(err) == 0 and isinstance(fail_idx, int)
    err, fail_idx = rig.batch([0, 2 * MiB - PAGE], [PAGE, 2 * PAGE])   # spans -> copy 1
    assert int(err) == 1 and fail_idx is None
    assert rig.fake.cuda_runtime.last_copy_fault.index == 1
    err, fail_idx = rig.batch([0], [PAGE], stream=None)
    assert int(err) == 1 and fail_idx is None


def test_12x_injected_error_keeps_the_arity() -> None:
    # docs/cuda-runtime.md §9 "A compatibility shim must handle both" arities [DOC]/[INF]
    rig = Rig("h100-r575")
    rig.fake.inject("cudaMemcpyBatchAsync", nth=1, error=1)
    err, fail_idx = rig.batch([0], [PAGE])
    assert int(err) == 1 and fail_idx is None


def test_old_driver_gives_36() -> None:
    # docs/cuda-runtime.md §5.3 "A 12.8+ toolkit on an older driver ... keys the fallback on
    # cudaErrorCallRequiresNewerDriver (36)" [OBS-ext]; §1 row 36
    rig = Rig("old-driver-12.2")
    err, fail_idx = rig.batch([0], [PAGE])
    assert int(err) == 36 and fail_idx is None
    assert int(rig.rt.cudaGetLastError()[0]) == 36
    # cudaMemcpyAsync is the fallback and still works on that driver
    assert int(rig.rt.cudaMemcpyAsync(rig.dev, rig.base, PAGE, 1, rig.stream)[0]) == 0


# -- WSL2: raw host VA of registered memory (docs/cuda-runtime.md §4, §10 sglang #40232) -----------

def test_wsl2_raw_host_va_poisons_the_context_asynchronously() -> None:
    # docs/cuda-runtime.md §4 "Passing raw host VAs of registered memory to cudaMemcpyBatchAsync
    # there caused asynchronous 700 illegal address" [OBS-ext]; §1 row 700 "sticky"
    rig = Rig("wsl2")
    rt = rig.rt
    (err,) = rig.batch([0, PAGE], [PAGE, PAGE])
    assert int(err) == 0                                   # the call itself succeeds
    text = rig.fault_text()
    assert text.startswith("copy 0:") and "raw host address of registered memory" in text
    assert f"[{rig.base:#x}, {rig.base + 2 * MiB:#x})" in text
    assert int(rt.cudaStreamSynchronize(rig.stream)[0]) == 700
    assert int(rt.cudaDeviceSynchronize()[0]) == 700
    # sticky: every later call fails, and cudaGetLastError cannot clear it
    assert int(rt.cudaHostRegister(rig.base + 5 * MiB, PAGE, 0)[0]) == 700
    assert int(rt.cudaGetLastError()[0]) == 700
    assert int(rt.cudaGetLastError()[0]) == 700
    assert int(rig.fake.torch.cudaHostUnregister(rig.base)) == 700
    assert len(rig.fake.live_registrations()) == 2


def test_wsl2_device_alias_in_batch_is_fine() -> None:
    # docs/cuda-runtime.md §10 sglang PR #40233 "Pass device aliases" [OBS-ext]
    rig = Rig("wsl2")
    rt = rig.rt
    _, alias = rt.cudaHostGetDevicePointer(rig.base, 0)
    (err,) = rt.cudaMemcpyBatchAsync([rig.dev], [alias], [PAGE], 1, [rig.attrs()], [0], 1,
                                     rig.stream)
    assert int(err) == 0
    assert int(rt.cudaStreamSynchronize(rig.stream)[0]) == 0
    assert int(rt.cudaHostRegister(rig.base + 5 * MiB, PAGE, 0)[0]) == 0


def test_wsl2_pageable_memory_in_batch_is_fine() -> None:
    # docs/cuda-runtime.md §4 WSL2 row concerns registered memory only [OBS-ext]
    rig = Rig("wsl2")
    (err,) = rig.batch([5 * MiB], [PAGE])
    assert int(err) == 0
    assert int(rig.rt.cudaDeviceSynchronize()[0]) == 0


def test_wsl2_cudamemcpyasync_stays_healthy() -> None:
    # docs/cuda-runtime.md §4 "cudaMemcpyAsync translated them correctly" [OBS-ext]
    rig = Rig("wsl2")
    assert int(rig.rt.cudaMemcpyAsync(rig.dev, rig.base, PAGE, 1, rig.stream)[0]) == 0
    assert int(rig.rt.cudaDeviceSynchronize()[0]) == 0
