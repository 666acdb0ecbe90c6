"""cudaPointerGetAttributes, cudaHostGetDevicePointer, cudaHostGetFlags.

docs/cuda-runtime.md §4.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES

MiB = 1 << 20
UNREGISTERED, HOST, DEVICE = 0, 1, 2


# -- cudaPointerGetAttributes -----------------------------------------------------------------

def test_malloc_memory_is_unregistered_with_host_pointer() -> None:
    # docs/cuda-runtime.md §4 "Since CUDA 11.0, a plain host pointer (malloc or stack) returns
    # cudaSuccess with type = Unregistered"; "hostPointer is set and devicePointer is NULL"
    # [DOC] + [OBS-ext]
    fake = FakeCuda()
    arr = np.zeros(4096, np.uint8)
    err, attrs = fake.runtime.cudaPointerGetAttributes(arr.ctypes.data + 8)
    assert int(err) == 0 and not err
    assert int(attrs.type) == UNREGISTERED
    assert int(attrs.hostPointer) == arr.ctypes.data + 8
    assert int(attrs.devicePointer) == 0


@pytest.mark.parametrize("device", [-2, -1])
def test_unregistered_device_value_follows_profile(device: int) -> None:
    # docs/cuda-runtime.md §4 "The device value reported for unregistered memory is [UNC]"
    fake = FakeCuda(PROFILES["h200-r580"].replace(unregistered_pointer_device=device))
    _, attrs = fake.runtime.cudaPointerGetAttributes(fake.virtual(64).data_ptr())
    assert int(attrs.device) == device


def test_registered_memory_is_host_type() -> None:
    # docs/cuda-runtime.md §4 "Registered host memory gives type = Host (1). device is the device
    # that was current at registration. devicePointer is the alias, equal to ptr when
    # CanUseHostPointerForRegisteredMem = 1" [DOC]
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(4 * MiB).data_ptr()
    assert int(rt.cudaHostRegister(base, 2 * MiB, 0)[0]) == 0
    err, attrs = rt.cudaPointerGetAttributes(base)
    assert int(err) == 0
    assert int(attrs.type) == HOST
    assert int(attrs.device) == 0
    assert int(attrs.devicePointer) == base
    assert int(attrs.hostPointer) == base
    # the byte just past the registration is unregistered again
    _, after = rt.cudaPointerGetAttributes(base + 2 * MiB)
    assert int(after.type) == UNREGISTERED


def test_interior_address_reports_queried_address_by_default() -> None:
    # docs/cuda-runtime.md §4 "What hostPointer and devicePointer report for an interior address
    # ... is [UNC]. [INF]: the queried address"; profile pointer_attributes_interior="queried"
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(4 * MiB).data_ptr()
    rt.cudaHostRegister(base, 2 * MiB, 0)
    _, attrs = rt.cudaPointerGetAttributes(base + 12345)
    assert int(attrs.type) == HOST
    assert int(attrs.hostPointer) == base + 12345
    assert int(attrs.devicePointer) == base + 12345


def test_interior_address_reports_base_in_base_mode() -> None:
    # docs/cuda-runtime.md §4 interior-address row [UNC]; profile pointer_attributes_interior
    fake = FakeCuda(PROFILES["h200-r580"].replace(pointer_attributes_interior="base"))
    rt = fake.runtime
    base = fake.virtual(4 * MiB).data_ptr()
    rt.cudaHostRegister(base, 2 * MiB, 0)
    _, attrs = rt.cudaPointerGetAttributes(base + 12345)
    assert int(attrs.hostPointer) == base
    assert int(attrs.devicePointer) == base


def test_device_memory_is_device_type() -> None:
    # docs/cuda-runtime.md §4 "cudaMemoryType values: Unregistered = 0, Host = 1, Device = 2"
    # [DOC]
    fake = FakeCuda()
    rt = fake.runtime
    _, dev = rt.cudaMalloc(MiB)
    err, attrs = rt.cudaPointerGetAttributes(dev + 100)
    assert int(err) == 0
    assert int(attrs.type) == DEVICE
    assert int(attrs.devicePointer) == dev + 100
    assert int(attrs.device) == 0
    assert rt.cudaFree(dev)[0] == 0
    _, gone = rt.cudaPointerGetAttributes(dev + 100)
    assert int(gone.type) == UNREGISTERED


def test_host_alloc_memory_is_host_type() -> None:
    # docs/cuda-runtime.md §4: cudaHostAlloc memory is page-locked host memory (type Host)
    fake = FakeCuda()
    _, ptr = fake.runtime.cudaHostAlloc(MiB, 0)
    _, attrs = fake.runtime.cudaPointerGetAttributes(ptr + 1)
    assert int(attrs.type) == HOST


def test_torch_registration_visible_to_cuda_python() -> None:
    # docs/cuda-runtime.md §6 "A registration made through torch should therefore be visible to
    # cuda-python's cudaPointerGetAttributes" [INF]
    fake = FakeCuda()
    base = fake.virtual(MiB).data_ptr()
    assert fake.torch.cudaHostRegister(base, MiB, 0) == 0
    _, attrs = fake.runtime.cudaPointerGetAttributes(base)
    assert int(attrs.type) == HOST


def test_memory_type_is_binding_enum() -> None:
    # docs/cuda-runtime.md §4 cudaMemoryType values [DOC] + [OBS-local] (cuda-bindings enums)
    fake = FakeCuda()
    _, attrs = fake.runtime.cudaPointerGetAttributes(fake.virtual(8).data_ptr())
    assert attrs.type == fake.runtime.cudaMemoryType.cudaMemoryTypeUnregistered


# -- cudaHostGetDevicePointer ----------------------------------------------------------------

def test_device_pointer_equals_host_pointer_by_default() -> None:
    # docs/cuda-runtime.md §4 "On UVA with CanUseHostPointerForRegisteredMem, the returned
    # pointer equals pHost"; "works for memory registered with Default (0) flags" [DOC]+[OBS-ext]
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(4 * MiB).data_ptr()
    rt.cudaHostRegister(base, 2 * MiB, 0)
    assert rt.cudaHostGetDevicePointer(base, 0) == (rt.cudaError_t.cudaSuccess, base)
    assert rt.cudaHostGetDevicePointer(base + 777, 0)[1] == base + 777


def test_device_pointer_flags_must_be_zero() -> None:
    # docs/cuda-runtime.md §4 "flags must be 0" [DOC]
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    rt.cudaHostRegister(base, MiB, 0)
    err, dev = rt.cudaHostGetDevicePointer(base, 1)
    assert int(err) == 1 and dev is None
    assert int(rt.cudaGetLastError()[0]) == 1


def test_device_pointer_of_unregistered_memory_fails() -> None:
    # docs/cuda-runtime.md §4 "Unregistered pHost gives InvalidValue" [INF]
    fake = FakeCuda()
    err, dev = fake.runtime.cudaHostGetDevicePointer(fake.virtual(MiB).data_ptr(), 0)
    assert int(err) == 1 and dev is None


def test_device_pointer_differs_under_wsl2() -> None:
    # docs/cuda-runtime.md §4 "On platforms where CanUseHostPointerForRegisteredMem = 0 (WSL2
    # GPU-PV, ROCm) the alias differs from the host VA" [OBS-ext] sglang #40232
    fake = FakeCuda("wsl2")
    rt = fake.runtime
    base = fake.virtual(4 * MiB).data_ptr()
    rt.cudaHostRegister(base, 2 * MiB, 0)
    err, alias = rt.cudaHostGetDevicePointer(base, 0)
    assert int(err) == 0 and alias != base
    assert rt.cudaHostGetDevicePointer(base + 4096, 0)[1] == alias + 4096
    _, attrs = rt.cudaPointerGetAttributes(base)
    assert int(attrs.devicePointer) == alias and int(attrs.hostPointer) == base
    assert rt.cudaDeviceGetAttribute(91, 0) == (rt.cudaError_t.cudaSuccess, 0)


def test_adjacent_registrations_get_non_adjacent_aliases_under_wsl2() -> None:
    # docs/cuda-runtime.md §4 "Adjacent separate registrations get non-adjacent aliases"
    # [OBS-ext] sglang PR #37596
    fake = FakeCuda("wsl2")
    rt = fake.runtime
    base = fake.virtual(4 * MiB).data_ptr()
    rt.cudaHostRegister(base, MiB, 0)
    rt.cudaHostRegister(base + MiB, MiB, 0)
    a1 = rt.cudaHostGetDevicePointer(base, 0)[1]
    a2 = rt.cudaHostGetDevicePointer(base + MiB, 0)[1]
    assert a2 != a1 + MiB
    assert not (a1 <= a2 < a1 + MiB)


# -- cudaHostGetFlags --------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "reported"), [(0, 2), (1, 3), (2, 2), (4, 6)])
def test_host_alloc_flags_report_devicemap(flags: int, reported: int) -> None:
    # docs/cuda-runtime.md §4 "After cuMemHostAlloc(flags=0), the driver reports 0x2 (DEVICEMAP
    # implicit)" [OBS-ext] lupine #437
    fake = FakeCuda()
    rt = fake.runtime
    _, ptr = rt.cudaHostAlloc(MiB, flags)
    assert rt.cudaHostGetFlags(ptr) == (rt.cudaError_t.cudaSuccess, reported)
    assert rt.cudaHostGetFlags(ptr + 100)[1] == reported


def test_malloc_host_flags() -> None:
    # docs/cuda-runtime.md §4 cudaHostGetFlags on cudaMallocHost memory [OBS-ext]
    fake = FakeCuda()
    _, ptr = fake.runtime.cudaMallocHost(4096)
    assert fake.runtime.cudaHostGetFlags(ptr)[1] == 2


def test_host_get_flags_on_unregistered_memory_fails() -> None:
    # docs/cuda-runtime.md §4 [DOC] "will fail if the input pointer does not reside in an
    # address range allocated by cudaHostAlloc"; only documented error InvalidValue
    fake = FakeCuda()
    err, flags = fake.runtime.cudaHostGetFlags(fake.virtual(64).data_ptr())
    assert int(err) == 1 and flags is None


def test_host_get_flags_on_registered_memory_default_is_invalid() -> None:
    # docs/cuda-runtime.md §4 "Behaviour on cudaHostRegister'd memory ... is [UNC]";
    # profile host_get_flags_on_registered="invalid" (the documented wording)
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    rt.cudaHostRegister(base, MiB, 3)
    err, flags = rt.cudaHostGetFlags(base)
    assert int(err) == 1 and flags is None


def test_host_get_flags_on_registered_memory_flags_mode() -> None:
    # docs/cuda-runtime.md §4 cudaHostGetFlags on registered memory [UNC], "flags" reading
    fake = FakeCuda(PROFILES["h200-r580"].replace(host_get_flags_on_registered="flags"))
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    rt.cudaHostRegister(base, MiB, 3)
    assert rt.cudaHostGetFlags(base + 5) == (rt.cudaError_t.cudaSuccess, 3)
