"""The device-memory calls of the ``cuda.bindings.driver`` face (docs/cuda-runtime.md §14).

``cuMemAlloc`` / ``cuMemFree`` blocks, ``cuMemGetAddressRange``, the VMM calls PyTorch's
expandable segments make (``cuMemCreate``, ``cuMemAddressReserve``, ``cuMemMap``,
``cuMemSetAccess``, ``cuMemUnmap``, ``cuMemRelease``, ``cuMemAddressFree``,
``cuMemGetAllocationGranularity``) and ``cuMemGetHandleForAddressRange``'s dma-buf fds.
Conventions are the binding's: a tuple ``(CUresult, outputs...)``, None outputs on error.
Every call needs ``cuInit`` and a current context, as the face's other memory calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..address_space import Allocation
from . import errors as E
from .cuda_python_face import pointer_arg, unsigned_arg
from .device_memory import device_range, export_dmabuf
from .symbols import NotModelledError

if TYPE_CHECKING:
    from .cuda_driver import FakeDriver

__all__ = ["MEMORY_OUTPUTS", "DeviceMemoryCalls"]

_U64 = 1 << 64
NOT_FOUND = 500                     # CUDA_ERROR_NOT_FOUND (cuda.h) [DOC]
_LOCATION_DEVICE = 1                # CU_MEM_LOCATION_TYPE_DEVICE
_ALLOCATION_PINNED = 1              # CU_MEM_ALLOCATION_TYPE_PINNED
_ACCESS_FLAGS = (0, 1, 3)           # CU_MEM_ACCESS_FLAGS_PROT_NONE / READ / READWRITE

# output slots after the CUresult, per call (fake_cuda's fault wrapper reads them)
MEMORY_OUTPUTS: dict[str, int] = {
    "cuMemAlloc": 1, "cuMemFree": 0, "cuMemGetAddressRange": 2, "cuMemCreate": 1,
    "cuMemRelease": 0, "cuMemAddressReserve": 1, "cuMemAddressFree": 0, "cuMemMap": 0,
    "cuMemUnmap": 0, "cuMemSetAccess": 0, "cuMemGetAllocationGranularity": 1,
    "cuMemGetHandleForAddressRange": 1, "cuPointerGetAttributes": 1, "cuDeviceGetAttribute": 1,
}
# the CUdevice_attribute members registration code asks before GPUDirect RDMA (cuda.h) [DOC]
_DMA_BUF_SUPPORTED, _GDR_WITH_VMM, _GDR_SUPPORTED = 124, 110, 116
_PA_CONTEXT = 1                     # CU_POINTER_ATTRIBUTE_CONTEXT
_U32 = 1 << 32


class DeviceMemoryCalls:
    """Mixed into :class:`~kvreg.fakes.cuda.driver_face.CudaDriverFace`."""

    if TYPE_CHECKING:
        _kvreg_driver: FakeDriver
        CUdeviceptr: Any
        CUcontext: Any

        def _r(self, code: int) -> Any: ...

        def cuPointerGetAttribute(self, attribute: Any, ptr: Any) -> tuple[Any, Any]: ...

        def _ready_ctx(self) -> int: ...

        def _ready(self) -> int: ...

    def _handle_type(self, value: int) -> Any:
        cls = getattr(self, "CUmemGenericAllocationHandle", None)
        return cls(value) if cls is not None else value

    # -- cuMemAlloc / cuMemFree / cuMemGetAddressRange (§14.1) ---------------------------
    def cuMemAlloc(self, bytesize: Any) -> tuple[Any, Any]:
        """A device block at the profile's alignment; 0 bytes -> 1 [DOC]; past free -> 2."""
        size = unsigned_arg(bytesize, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        driver = self._kvreg_driver
        if size == 0:
            return self._r(E.INVALID_VALUE), None
        used = sum(a.size for a in driver.device_ranges())
        if size > driver.profile.total_memory - used:
            return self._r(E.MEMORY_ALLOCATION), None
        block = driver.device_alloc(size, driver.current_device())
        return self._r(0), self.CUdeviceptr(block.base)

    def cuMemFree(self, dptr: Any) -> tuple[Any]:
        """The exact base of a block; anything else -> 1 [INF]."""
        ptr = pointer_arg(dptr)
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        if self._kvreg_driver.device_free(ptr) is None:
            return (self._r(E.INVALID_VALUE),)
        return (self._r(0),)

    def cuMemGetAddressRange(self, dptr: Any) -> tuple[Any, Any, int | None]:
        """The block or the one VMM mapping holding dptr (§14.2); none -> 500 [DOC].

        Never the reservation: a tensor in an expandable segment gets its 20 MiB mapping."""
        ptr = pointer_arg(dptr)
        code = self._ready_ctx()
        if code:
            return self._r(code), None, None
        rng = device_range(self._kvreg_driver, ptr)
        if rng is None:
            return self._r(NOT_FOUND), None, None
        return self._r(0), self.CUdeviceptr(rng.base), rng.size

    # -- VMM (§14.2) -----------------------------------------------------------------------
    def cuMemGetAllocationGranularity(self, prop: Any, option: Any) -> tuple[Any, int | None]:
        """The profile's granularity for a pinned device allocation (2 MiB)."""
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        if self._prop_device(prop) is None or int(option) not in (0, 1):
            return self._r(E.INVALID_VALUE), None
        return self._r(0), self._kvreg_driver.vmm.granularity

    def _prop_device(self, prop: Any) -> int | None:
        """The device of a CUmemAllocationProp for pinned device memory, else None."""
        try:
            if int(prop.type) != _ALLOCATION_PINNED or \
                    int(prop.location.type) != _LOCATION_DEVICE:
                return None
            device = int(prop.location.id)
        except (AttributeError, TypeError, ValueError):
            return None
        return device if 0 <= device < self._kvreg_driver.profile.device_count else None

    def cuMemCreate(self, size: Any, prop: Any, flags: Any) -> tuple[Any, Any]:
        """A physical allocation handle; its size a multiple of the granularity [DOC]."""
        nbytes = unsigned_arg(size, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        device = self._prop_device(prop)
        if device is None or int(flags):
            return self._r(E.INVALID_VALUE), None
        rdma = bool(getattr(getattr(prop, "allocFlags", None), "gpuDirectRDMACapable", 0))
        driver = self._kvreg_driver
        with driver.lock:
            code, handle = driver.vmm.create(nbytes, device, rdma)
        return self._r(code), (self._handle_type(handle) if handle is not None else None)

    def cuMemRelease(self, handle: Any) -> tuple[Any]:
        """The memory goes with the handle's last mapping [DOC]; unknown or twice -> 1 [INF]."""
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        with self._kvreg_driver.lock:
            return (self._r(self._kvreg_driver.vmm.release(int(handle))),)

    def cuMemAddressReserve(self, size: Any, alignment: Any, addr: Any,
                            flags: Any) -> tuple[Any, Any]:
        """Device addresses, no memory: granularity multiples, flags 0; addr a hint [DOC]."""
        nbytes = unsigned_arg(size, _U64, "size_t")
        align = unsigned_arg(alignment, _U64, "size_t")
        pointer_arg(addr)                       # a hint only [DOC]
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        driver = self._kvreg_driver
        with driver.lock:
            code, base = driver.vmm.reserve(nbytes, align, 0, int(flags))
        return self._r(code), (self.CUdeviceptr(base) if base is not None else None)

    def cuMemAddressFree(self, ptr: Any, size: Any) -> tuple[Any]:
        """The reservation's exact base and size [DOC]; one still mapped -> 1 [INF]."""
        base = pointer_arg(ptr)
        nbytes = unsigned_arg(size, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        with self._kvreg_driver.lock:
            return (self._r(self._kvreg_driver.vmm.free(base, nbytes)),)

    def cuMemMap(self, ptr: Any, size: Any, offset: Any, handle: Any,
                 flags: Any) -> tuple[Any]:
        """Into unmapped reserved addresses, within the handle, granularity multiples [DOC]."""
        base = pointer_arg(ptr)
        nbytes = unsigned_arg(size, _U64, "size_t")
        off = unsigned_arg(offset, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        driver = self._kvreg_driver
        with driver.lock:
            code = driver.vmm.map(base, nbytes, off, int(handle), int(flags))
        if not code:       # traces name the mapping, as they name cudaMalloc blocks
            driver.space.add(Allocation(base, nbytes, f"vmm{int(handle):#x}@{base:#x}",
                                        "device"))
        return (self._r(code),)

    def cuMemUnmap(self, ptr: Any, size: Any) -> tuple[Any]:
        """A whole mapping, never part of one [DOC]."""
        base = pointer_arg(ptr)
        nbytes = unsigned_arg(size, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        driver = self._kvreg_driver
        with driver.lock:
            code = driver.vmm.unmap(base, nbytes)
        if not code:
            driver.space.forget(base)
        return (self._r(code),)

    def cuMemSetAccess(self, ptr: Any, size: Any, desc: Sequence[Any] | None,
                       count: Any) -> tuple[Any]:
        """Access for each CUmemAccessDesc's device over a fully mapped range [DOC]."""
        base = pointer_arg(ptr)
        nbytes = unsigned_arg(size, _U64, "size_t")
        n = unsigned_arg(count, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        descs = list(desc or [])[:n]
        if not descs or n > len(list(desc or [])):
            return (self._r(E.INVALID_VALUE),)
        driver = self._kvreg_driver
        for d in descs:
            device, flags = int(d.location.id), int(d.flags)
            if int(d.location.type) != _LOCATION_DEVICE or flags not in _ACCESS_FLAGS:
                return (self._r(E.INVALID_VALUE),)
            if not 0 <= device < driver.profile.device_count:
                return (self._r(E.INVALID_DEVICE),)
        with driver.lock:
            for d in descs:
                code = driver.vmm.set_access(base, nbytes, int(d.location.id), int(d.flags))
                if code:
                    return (self._r(code),)
        return (self._r(0),)

    # -- dma-buf (§14.3) --------------------------------------------------------------------
    def cuMemGetHandleForAddressRange(self, dptr: Any, size: Any, handleType: Any,
                                      flags: Any) -> tuple[Any, int | None]:
        """A dma-buf fd for a page-aligned device range in one allocation (§14.3)."""
        ptr = pointer_arg(dptr)
        nbytes = unsigned_arg(size, _U64, "size_t")
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        driver = self._kvreg_driver
        with driver.lock:
            code, fd = export_dmabuf(driver, ptr, nbytes, int(handleType), int(flags))
        return self._r(code), fd

    # -- cuDeviceGetAttribute (§14.3, §14.4) ----------------------------------------------
    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> tuple[Any, int | None]:
        """DMA_BUF_SUPPORTED (124) from the profile's ``dma_buf_supported``;
        GPU_DIRECT_RDMA_SUPPORTED (116) and _WITH_CUDA_VMM_SUPPORTED (110) 1 on the
        data-centre parts the profiles stand for [INF]. Other members are not modelled."""
        attr = int(attrib)
        if attr not in (_DMA_BUF_SUPPORTED, _GDR_WITH_VMM, _GDR_SUPPORTED):
            raise NotModelledError(f"cuda.bindings.driver.cuDeviceGetAttribute attribute {attr} "
                                   "is not modelled by kvreg's fake; see COVERAGE.md")
        code = self._ready()
        if code:
            return self._r(code), None
        device = int(dev)
        if not 0 <= device < self._kvreg_driver.profile.device_count:
            return self._r(E.INVALID_DEVICE), None
        if attr == _DMA_BUF_SUPPORTED:
            return self._r(0), int(self._kvreg_driver.profile.dma_buf_supported)
        return self._r(0), 1

    # -- cuPointerGetAttributes (§14.1) ----------------------------------------------------
    def cuPointerGetAttributes(self, numAttributes: Any, attributes: Sequence[Any] | None,
                               ptr: Any) -> tuple[Any, list[Any] | None]:
        """cuPointerGetAttribute's answers in one call; where that one fails the value is
        its NULL default and the call still succeeds [DOC]. CONTEXT is the primary context
        of the allocation's device (NULL for memory CUDA does not know) (NIXL's
        CudaAcceleratorDevice asks for it with MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL)."""
        n = unsigned_arg(numAttributes, _U32, "unsigned int")
        wanted = list(attributes or [])
        address = pointer_arg(ptr)
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        if n != len(wanted):
            return self._r(E.INVALID_VALUE), None
        values: list[Any] = []
        for attr in wanted:
            if int(attr) == _PA_CONTEXT:
                values.append(self.CUcontext(self._context_of(address)))
                continue
            err, value = self.cuPointerGetAttribute(attr, address)
            values.append(value if int(err) == 0 else _null_of(int(attr), self.CUdeviceptr))
        return self._r(0), values

    def _context_of(self, address: int) -> int:
        driver = self._kvreg_driver
        rng = device_range(driver, address)
        entry = driver.pinned.containing(address) if rng is None else None
        device = rng.device if rng is not None else (entry.device if entry else None)
        return 0 if device is None else driver.contexts.primary(device)


def _null_of(attr: int, pointer_type: Any) -> Any:
    """The NULL default of an attribute cuPointerGetAttributes could not fill [DOC]."""
    if attr in (3, 11):                 # DEVICE_POINTER, RANGE_START_ADDR
        return pointer_type(0)
    if attr in (8, 13, 15):             # IS_MANAGED, MAPPED, IS_GPU_DIRECT_RDMA_CAPABLE
        return False
    return 0
