"""cudaMemcpyAsync against registered memory (docs/cuda-runtime.md §5.1, §5.2, §5.4, §11.3)."""

from __future__ import annotations

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES

MiB = 1 << 20
PAGE = 4096
H2D, D2H, DEFAULT = 1, 2, 4


class Rig:
    """A pool: adjacent registrations [0, 2M) and [2M, 4M), pageable [4M, 6M), one at [6M, 7M)."""

    def __init__(self, profile: object = None) -> None:
        self.fake = FakeCuda(profile)  # type: ignore[arg-type]
        self.rt = self.fake.runtime
        self.base = self.fake.virtual(8 * MiB, name="pool").data_ptr()
        assert int(self.rt.cudaHostRegister(self.base, 2 * MiB, 0)[0]) == 0
        assert int(self.rt.cudaHostRegister(self.base + 2 * MiB, 2 * MiB, 0)[0]) == 0
        assert int(self.rt.cudaHostRegister(self.base + 6 * MiB, MiB, 0)[0]) == 0
        _, self.dev = self.rt.cudaMalloc(8 * MiB)
        _, self.stream = self.rt.cudaStreamCreate()

    def h2d(self, off: int, size: int, kind: int = H2D) -> int:
        return int(self.rt.cudaMemcpyAsync(self.dev, self.base + off, size, kind,
                                           self.stream)[0])

    def d2h(self, off: int, size: int, kind: int = D2H) -> int:
        return int(self.rt.cudaMemcpyAsync(self.base + off, self.dev, size, kind,
                                           self.stream)[0])


@pytest.mark.parametrize("copy", ["h2d", "d2h"])
@pytest.mark.parametrize("kind", ["explicit", "default"])
def test_wholly_registered_is_ok(copy: str, kind: str) -> None:
    # docs/cuda-runtime.md §5.2 "A host range fully inside one registration runs as
    # asynchronous DMA" [DOC]; §11.3
    rig = Rig()
    k = DEFAULT if kind == "default" else (H2D if copy == "h2d" else D2H)
    assert getattr(rig, copy)(PAGE, MiB, k) == 0
    assert getattr(rig, copy)(2 * MiB, 2 * MiB, k) == 0     # the whole second registration


@pytest.mark.parametrize("copy", ["h2d", "d2h"])
def test_wholly_pageable_is_ok(copy: str) -> None:
    # docs/cuda-runtime.md §5.2 "A host range that is fully pageable is staged" [DOC]
    rig = Rig()
    assert getattr(rig, copy)(5 * MiB, MiB) == 0
    assert rig.fake.cuda_runtime.last_copy_fault is None


@pytest.mark.parametrize(("label", "off", "size"), [
    ("registered then pageable", 4 * MiB - PAGE, 2 * PAGE),
    ("pageable then registered", 6 * MiB - PAGE, 2 * PAGE),
    ("whole pool and beyond", 0, 5 * MiB),
])
@pytest.mark.parametrize("copy", ["h2d", "d2h"])
def test_mixed_range_gives_invalid_value(copy: str, label: str, off: int, size: int) -> None:
    # docs/cuda-runtime.md §5.1 `\note_memcpy`: "Regions that span allocations which are both
    # registered and not registered are unsupported and return CUDA_ERROR_INVALID_VALUE" [DOC]
    rig = Rig()
    assert getattr(rig, copy)(off, size) == 1, label
    fault = rig.fake.cuda_runtime.last_copy_fault
    assert fault is not None and fault.code == 1
    assert "partly registered" in fault.describe()
    assert int(rig.rt.cudaGetLastError()[0]) == 1


def test_spanning_two_registrations_rejected_by_default() -> None:
    # docs/cuda-runtime.md §5.4 [UNC] "a copied page spanning two registration intervals";
    # §11.3 "a conservative default is 1"; profile copy_across_registrations="reject"
    rig = Rig()
    assert rig.fake.profile.copy_across_registrations == "reject"
    assert rig.h2d(2 * MiB - PAGE, 2 * PAGE) == 1
    assert rig.d2h(2 * MiB - PAGE, 2 * PAGE) == 1
    text = rig.fake.cuda_runtime.last_copy_fault.describe()
    b = rig.base
    assert "spans two separate registrations" in text
    assert f"[{b:#x}, {b + 2 * MiB:#x})" in text
    assert f"[{b + 2 * MiB:#x}, {b + 4 * MiB:#x})" in text


def test_spanning_two_registrations_allowed_by_profile() -> None:
    # docs/cuda-runtime.md §5.4 [UNC]; profile copy_across_registrations="allow"
    rig = Rig(PROFILES["h200-r580"].replace(copy_across_registrations="allow"))
    assert rig.h2d(2 * MiB - PAGE, 2 * PAGE) == 0
    assert rig.h2d(0, 4 * MiB) == 0
    # a mix is still the documented failure, whatever the profile says (§5.1 [DOC])
    assert rig.h2d(0, 4 * MiB + 1) == 1


def test_spanning_is_only_about_adjacent_registrations() -> None:
    # docs/cuda-runtime.md §5.1: a gap between registrations makes the range mixed [DOC]
    rig = Rig(PROFILES["h200-r580"].replace(copy_across_registrations="allow"))
    assert int(rig.rt.cudaHostRegister(rig.base + 4 * MiB + PAGE, MiB, 0)[0]) == 0
    assert rig.h2d(4 * MiB - PAGE, 3 * PAGE) == 1
    assert rig.h2d(4 * MiB + PAGE, MiB) == 0


def test_memcpy_async_raw_host_va_is_fine_under_wsl2() -> None:
    # docs/cuda-runtime.md §4 "cudaMemcpyAsync translated them correctly" [OBS-ext] (WSL2)
    rig = Rig("wsl2")
    assert rig.h2d(0, MiB) == 0
    assert int(rig.rt.cudaStreamSynchronize(rig.stream)[0]) == 0
    assert int(rig.rt.cudaDeviceSynchronize()[0]) == 0


def test_zero_byte_memcpy_async_succeeds() -> None:
    # docs/cuda-runtime.md §5.2: nothing to copy, nothing to classify
    rig = Rig()
    assert rig.h2d(4 * MiB - PAGE, 0) == 0


def test_bad_direction_gives_21() -> None:
    # docs/cuda-runtime.md §1 row 21 cudaErrorInvalidMemcpyDirection [DOC]
    rig = Rig()
    assert rig.h2d(0, PAGE, kind=9) == 21


def test_device_side_must_hold_the_range() -> None:
    # docs/cuda-runtime.md §5.1 [INF]: a device range past its allocation is invalid
    rig = Rig()
    rt = rig.rt
    _, small = rt.cudaMalloc(PAGE)
    assert int(rt.cudaMemcpyAsync(small, rig.base, 2 * PAGE, H2D, rig.stream)[0]) == 1
    assert int(rt.cudaMemcpyAsync(small, rig.base, PAGE, H2D, rig.stream)[0]) == 0


def test_destroyed_stream_gives_400() -> None:
    # docs/cuda-runtime.md §1 row 400 cudaErrorInvalidResourceHandle [DOC]
    rig = Rig()
    assert int(rig.rt.cudaStreamDestroy(rig.stream)[0]) == 0
    assert rig.h2d(0, PAGE) == 400
    assert int(rig.rt.cudaStreamDestroy(rig.stream)[0]) == 400


def test_registering_after_unregister_changes_classification() -> None:
    # docs/cuda-runtime.md §3 / §5.1: after unregister the range is pageable again
    rig = Rig()
    assert rig.h2d(0, 3 * MiB) == 1                       # spans
    rig.rt.cudaHostUnregister(rig.base)
    rig.rt.cudaHostUnregister(rig.base + 2 * MiB)
    assert rig.h2d(0, 3 * MiB) == 0                       # wholly pageable now
