"""Device memory as PyTorch's expandable segments lay it out, on the fake driver face.

Shared by the CUDA tests (tests/fakes/test_device_memory.py) and the RDMA ones over GPU memory
(tests/verbs/test_gpu_mr.py); docs/cuda-runtime.md §14.2.
"""

from __future__ import annotations

from typing import Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20
GiB = 1 << 30


def ready_driver(fake: FakeCuda) -> Any:
    """The fake's driver face after cuInit, with the primary context current on this thread
    (memory calls need one: docs/cuda-runtime.md §13.1)."""
    drv = fake.driver_api
    assert int(drv.cuInit(0)[0]) == 0
    err, ctx = drv.cuDevicePrimaryCtxRetain(0)
    assert int(err) == 0 and int(drv.cuCtxSetCurrent(ctx)[0]) == 0
    return drv


class Prop:
    """A CUmemAllocationProp as code fills it (pinned device memory on ``device``)."""

    def __init__(self, rdma: bool = False, device: int = 0, kind: int = 1) -> None:
        self.type = kind
        self.location = type("Loc", (), {"type": 1, "id": device})()
        self.allocFlags = type("Flags", (), {"gpuDirectRDMACapable": int(rdma)})()


class Access:
    """A CUmemAccessDesc: read-write (3) for ``device``."""

    def __init__(self, device: int = 0, flags: int = 3) -> None:
        self.location = type("Loc", (), {"type": 1, "id": device})()
        self.flags = flags


def expandable_segment(drv: Any, mappings: int = 3, size: int = 20 * MiB,
                       rdma: bool = False) -> tuple[int, list[int]]:
    """One 8 GiB reservation with ``mappings`` 20 MiB mappings made one after another as the
    pool grows, each its own cuMemCreate handle (Mooncake #2511); (base, handles)."""
    err, va = drv.cuMemAddressReserve(8 * GiB, 0, 0, 0)
    assert int(err) == 0
    handles = []
    for i in range(mappings):
        err, handle = drv.cuMemCreate(size, Prop(rdma), 0)
        assert int(err) == 0
        assert int(drv.cuMemMap(int(va) + i * size, size, 0, handle, 0)[0]) == 0
        handles.append(int(handle))
    assert int(drv.cuMemSetAccess(va, mappings * size, [Access()], 1)[0]) == 0
    return int(va), handles
