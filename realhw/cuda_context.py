"""The context a CUDA probe body runs in: the backend's faces, memory, and cleanup.

Kept apart from the probe bodies (:mod:`.probes_cuda`) so both stay short. The context is
what makes one body run unchanged on ``FakeCuda`` and ``RealCuda``: host memory comes from
``backend.virtual`` where the backend offers it (the fake, for 512 GiB) and from prefaulted
``mmap`` otherwise, sized against free memory; ``close`` unregisters whatever the probe left
registered and drains the cuda-python error slot, so one probe cannot affect the next.
"""

from __future__ import annotations

from typing import Any

from .backend import HardwareUnavailable, VirtualBuffersUnsupported
from .memory import available_memory, prefaulted
from .probe_types import ProbeError, ProbeSkipped

__all__ = ["CudaProbeContext", "code_of"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PAGE = 4096            # the 4 KiB page of the spec's same-page rows
SPLIT = 2 * MiB        # docs/cuda-runtime.md §5.4: [base, base+2 MiB) and [base+2 MiB, base+4 MiB)
CEILING = 512 * GiB    # docs/cuda-runtime.md §2.2: the R580+ per-call ceiling


def code_of(result: Any) -> int:
    """The error code of either face's result (cuda-python tuple, torch enum)."""
    return int(result[0]) if isinstance(result, tuple) else int(result)


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


class CudaProbeContext:
    """What a probe body holds: the backend's faces, memory helpers, and cleanup."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.observation: dict[str, Any] = {}
        self.details: dict[str, Any] = {}
        self._keep: list[Any] = []
        self._device: list[int] = []
        self._streams: list[Any] = []
        self._host_allocs: list[int] = []
        self.rt.cudaGetLastError()     # start from a clean cuda-python error slot

    @property
    def rt(self) -> Any:
        return self.backend.runtime

    @property
    def torch(self) -> Any:
        try:
            return self.backend.torch
        except HardwareUnavailable as exc:
            raise ProbeSkipped(str(exc)) from None

    # -- memory ---------------------------------------------------------------------------
    def host(self, nbytes: int, *, large: bool = False) -> int:
        """Page-aligned, prefaulted host memory; ``large`` lets the fake use a virtual buffer.

        On real hardware a buffer that would not fit in available memory (with headroom)
        skips the probe with the sizes in the reason.
        """
        if large:
            try:
                buf = self.backend.virtual(nbytes, "uint8", name=f"probe{len(self._keep)}")
                self._keep.append(buf)
                return int(buf.data_ptr())
            except VirtualBuffersUnsupported:
                pass
        avail = available_memory()
        if nbytes + max(2 * GiB, nbytes // 8) > avail:
            raise ProbeSkipped(f"needs {_gib(nbytes)} of free host memory to pin; this "
                               f"machine has {_gib(avail)} available")
        arr = prefaulted(nbytes)
        self.backend.track(arr, name=f"probe{len(self._keep)}")
        self._keep.append(arr)
        return int(arr.ctypes.data)

    def device(self, nbytes: int) -> int:
        err, ptr = self.rt.cudaMalloc(nbytes)
        if int(err) or ptr is None:
            raise ProbeError(f"cudaMalloc({nbytes}) returned {int(err)}")
        self._device.append(int(ptr))
        return int(ptr)

    def stream(self) -> Any:
        err, stream = self.rt.cudaStreamCreate()
        if int(err) or stream is None:
            raise ProbeError(f"cudaStreamCreate returned {int(err)}")
        self._streams.append(stream)
        return stream

    def host_alloc(self, nbytes: int, flags: int = 0) -> int:
        err, ptr = self.rt.cudaHostAlloc(nbytes, flags)
        if int(err) or not ptr:
            raise ProbeError(f"cudaHostAlloc({nbytes}) returned {int(err)}")
        self._host_allocs.append(int(ptr))
        return int(ptr)

    # -- calls ----------------------------------------------------------------------------
    def register(self, ptr: int, size: int, flags: int = 0) -> int:
        return code_of(self.rt.cudaHostRegister(ptr, size, flags))

    def unregister(self, ptr: int) -> int:
        return code_of(self.rt.cudaHostUnregister(ptr))

    def sync(self, stream: Any) -> int:
        return code_of(self.rt.cudaStreamSynchronize(stream))

    def memcpy_h2d(self, dst: int, src: int, size: int, stream: Any) -> int:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        return code_of(self.rt.cudaMemcpyAsync(dst, src, size, kind, stream))

    def batch(self, dsts: list[int], srcs: list[int], sizes: list[int], stream: Any, *,
              order: int = 1) -> int:
        """One cudaMemcpyBatchAsync with a single attribute entry (srcAccessOrder ``order``)."""
        attr = self.rt.cudaMemcpyAttributes()
        attr.srcAccessOrder = self.rt.cudaMemcpySrcAccessOrder(order)
        res = self.rt.cudaMemcpyBatchAsync(dsts, srcs, sizes, len(sizes), [attr], [0], 1,
                                           stream)
        if len(res) > 1:       # 12.x bindings: failIdx, None on error (docs/cuda-runtime.md §5.3)
            self.details["fail_idx"] = res[1]
        return code_of(res)

    # -- cleanup ----------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Unregister what is still live, free device memory, streams and host allocations."""
        problems = []
        for reg in self.backend.live_registrations():
            code = self.unregister(reg.base)
            if code:
                problems.append(f"cudaHostUnregister({reg.base:#x}) -> {code}")
        for ptr in self._device:
            self.rt.cudaFree(ptr)
        for stream in self._streams:
            self.rt.cudaStreamDestroy(stream)
        for ptr in self._host_allocs:
            self.rt.cudaFreeHost(ptr)
        space = getattr(self.backend, "space", None)
        for buf in self._keep:
            if space is not None and hasattr(buf, "ctypes"):
                space.forget(int(buf.ctypes.data))
        self._keep.clear()
        self.rt.cudaGetLastError()    # do not hand a pending error to the next probe
        return problems
