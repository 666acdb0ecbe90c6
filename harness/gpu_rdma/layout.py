"""One node's KV pool in GPU memory, allocated as the engines allocate it, at real sizes
without RAM (the fake driver holds no byte of device memory, docs/cuda-runtime.md §14).

SGLang's MHA pool makes one tensor per layer for K and one for V, of ``(size + page_size,
head_num, head_dim)`` (``MHATokenToKVPool._create_buffers``); its MLA pool one latent tensor
per layer of ``kv_lora_rank + qk_rope_head_dim``; its ``kv_item_lens`` are one page of a
buffer. Where the bytes come from is the allocator: ``cudaMalloc`` (a block per tensor),
``one_block`` (tensors carved from one block, so their pointers are interior: Mooncake
#2035) or ``expandable_segments`` (PyTorch's VMM segments: 20 MiB ``cuMemCreate`` mappings
in one reservation, Mooncake #2511) or ``memory_saver`` (torch_memory_saver's region: a
``cuMemCreate`` + ``cuMemAddressReserve`` + ``cuMemMap`` of its own per tensor, so a pause can
release it and a resume map new memory at the same address: memory_saver.py). Aux buffers
are host memory (SGLang's metadata buffers); state buffers (a hybrid model's) are cudaMalloc
blocks, or under ``memory_saver`` allocations of the region as the KV tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvreg.fakes.address_space import Allocation
from kvreg.fakes.device_bytes import SparseBytes
from kvreg.fakes.dtypes import as_dtype
from kvreg.fakes.verbs.node import Node
from kvreg.harness.run.target import CannotRun

from .buffers import KvBuffer, KvBuffers, make_buffers
from .options import GpuRdmaOptions

__all__ = ["SAVER_ROUND", "SEGMENT_MAPPING", "KvLayout", "LayoutError", "allocate", "kv_shapes",
           "ready", "saver_create", "saver_pause", "saver_resume"]

SEGMENT_MAPPING = 20 << 20     # PyTorch's expandable segment granule (Mooncake #2511)
_TORCH_ROUND = 512             # the caching allocator's rounding of a block
SAVER_ROUND = 2 << 20          # the caching allocator's large-block rounding, the VMM granule
_GDR_WITH_VMM = 110            # CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED


class LayoutError(ValueError):
    """A pool this target cannot lay out (the message says why)."""


@dataclass
class KvLayout:
    """One node's buffers, and the device ranges the data path sees as no-byte memory."""

    buffers: KvBuffers
    device_ranges: list[tuple[int, int]] = field(default_factory=list)
    # torch_memory_saver's allocations (``memory_saver``): [base, size, cuMemCreate handle]
    saver: list[list[int]] = field(default_factory=list)


def kv_shapes(geometry: Any) -> list[tuple[str, int, int]]:
    """(name, bytes, item bytes) of each KV tensor: K and V per layer (``mha``) or one
    latent per layer (``mla``); ``page_num`` pages plus SGLang's padding page."""
    kind = type(geometry).__name__
    itemsize = as_dtype(geometry.dtype).itemsize
    page = int(geometry.page_size)
    tokens = (int(geometry.page_num) + 1) * page
    if kind == "MHAGeometry":
        per_token = int(geometry.head_num) * int(geometry.head_dim) * itemsize
        return [(f"{h}{layer}", tokens * per_token, page * per_token)
                for layer in range(int(geometry.layer_num)) for h in ("k", "v")]
    if kind == "MLAGeometry":
        per_token = (int(geometry.kv_lora_rank) + int(geometry.qk_rope_head_dim)) * itemsize
        return [(f"kv{layer}", tokens * per_token, page * per_token)
                for layer in range(int(geometry.layer_num))]
    raise LayoutError(f"the gpu_rdma target lays out mha and mla pools, not {kind}")


class _Prop:
    """A CUmemAllocationProp as PyTorch fills it: pinned device memory on ``device``."""

    def __init__(self, device: int, rdma: bool) -> None:
        self.type = 1
        self.location = type("Loc", (), {"type": 1, "id": device})()
        self.allocFlags = type("Flags", (), {"gpuDirectRDMACapable": int(rdma)})()


class _Access:
    def __init__(self, device: int) -> None:
        self.location = type("Loc", (), {"type": 1, "id": device})()
        self.flags = 3


def _ok(result: Any, what: str) -> Any:
    err = result[0]
    if int(err) != 0:
        raise LayoutError(f"{what} returned {int(err)} on the fake GPU (the pool does not "
                          "fit the device profile's memory)")
    return result[1] if len(result) > 1 else None


def _round(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def saver_create(drv: Any, size: int) -> Any:
    """torch_memory_saver's ``cu_mem_create``: pinned device memory, GPUDirect RDMA capable
    where the device says GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED (110) (csrc/utils.h) [SRC]."""
    gdr = _ok(drv.cuDeviceGetAttribute(_GDR_WITH_VMM, 0), "cuDeviceGetAttribute")
    return _ok(drv.cuMemCreate(size, _Prop(0, bool(gdr)), 0), "cuMemCreate")


def _saver_malloc(drv: Any, size: int, saver: list[list[int]]) -> int:
    """``TorchMemorySaver::malloc`` (csrc/core.cpp) [SRC]: a handle, a reservation of its
    size, the handle mapped there and made accessible. PyTorch's caching allocator asks for
    2 MiB multiples, the granularity [INF]."""
    size = _round(size, SAVER_ROUND)
    handle = saver_create(drv, size)
    va = int(_ok(drv.cuMemAddressReserve(size, 0, 0, 0), "cuMemAddressReserve"))
    _ok(drv.cuMemMap(va, size, 0, handle, 0), "cuMemMap")
    _ok(drv.cuMemSetAccess(va, size, [_Access(0)], 1), "cuMemSetAccess")
    saver.append([va, size, int(handle)])
    return va


def saver_pause(drv: Any, saver: list[list[int]]) -> None:
    """``TorchMemorySaver::pause`` (csrc/core.cpp) [SRC]: each allocation unmapped and its
    handle released; the reservation stays."""
    for base, size, handle in saver:
        _ok(drv.cuMemUnmap(base, size), "cuMemUnmap")
        _ok(drv.cuMemRelease(handle), "cuMemRelease")


def saver_resume(drv: Any, saver: list[list[int]]) -> None:
    """``TorchMemorySaver::resume`` [SRC]: new memory of each allocation's size created,
    mapped at the same address and made accessible (the contents are gone)."""
    for entry in saver:
        base, size, _ = entry
        handle = saver_create(drv, size)
        _ok(drv.cuMemMap(base, size, 0, handle, 0), "cuMemMap")
        _ok(drv.cuMemSetAccess(base, size, [_Access(0)], 1), "cuMemSetAccess")
        entry[2] = int(handle)


def _carve(drv: Any, sizes: list[int], opts: GpuRdmaOptions,
           ranges: list[tuple[int, int]], saver: list[list[int]]) -> list[int]:
    """The base of each KV tensor under the scenario's allocator."""
    if opts.allocator == "memory_saver":
        bases = [_saver_malloc(drv, size, saver) for size in sizes]
        ranges.extend((a[0], a[1]) for a in saver)
        return bases
    if opts.allocator == "cudaMalloc":
        bases = []
        for size in sizes:
            base = int(_ok(drv.cuMemAlloc(size), "cuMemAlloc"))
            ranges.append((base, size))
            bases.append(base)
        return bases
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += _round(size, _TORCH_ROUND)
    if opts.allocator == "one_block":
        base = int(_ok(drv.cuMemAlloc(total), "cuMemAlloc"))
        ranges.append((base, total))
        return [base + o for o in offsets]
    span = _round(total, SEGMENT_MAPPING)
    va = int(_ok(drv.cuMemAddressReserve(span, 0, 0, 0), "cuMemAddressReserve"))
    for off in range(0, span, SEGMENT_MAPPING):
        handle = _ok(drv.cuMemCreate(SEGMENT_MAPPING, _Prop(0, opts.vmm_gdr), 0), "cuMemCreate")
        _ok(drv.cuMemMap(va + off, SEGMENT_MAPPING, 0, handle, 0), "cuMemMap")
    _ok(drv.cuMemSetAccess(va, span, [_Access(0)], 1), "cuMemSetAccess")
    ranges.append((va, span))
    return [va + o for o in offsets]


def allocate(drv: Any, node: Node, geometry: Any, opts: GpuRdmaOptions, *,
             real: bool = False) -> KvLayout:
    """The node's KV (GPU), aux (host) and state (GPU) buffers; the device ranges are
    recorded as no-byte memory in the node's address space, so transfers over them pass
    every check and move nothing (fakes/verbs/memory.py ``virtual``). ``real`` (a pool of
    ``memory = "real"``): device ranges hold bytes in sparse pages (fakes/device_bytes.py)
    and the aux buffers are host memory, so transfers move bytes."""
    shapes = kv_shapes(geometry)
    ranges: list[tuple[int, int]] = []
    saver: list[list[int]] = []
    bases = _carve(drv, [s for _, s, _ in shapes], opts, ranges, saver)
    entries = [KvBuffer(name, base, size, "VRAM", 0, "kv")
               for (name, size, _), base in zip(shapes, bases, strict=True)]
    items: dict[str, list[int]] = {"kv": [i for _, _, i in shapes]}
    for i in range(opts.aux):
        base = node.space.track(np.zeros(opts.aux_bytes, np.uint8),
                                name=f"{node.name}:aux{i}").base if real else \
            node.space.reserve(opts.aux_bytes, name=f"{node.name}:aux{i}")
        entries.append(KvBuffer(f"aux{i}", base, opts.aux_bytes, "DRAM", 0, "aux"))
    items["aux"] = [opts.aux_item] * opts.aux
    for i in range(opts.state):
        if opts.allocator == "memory_saver":
            base = _saver_malloc(drv, opts.state_bytes, saver)
            ranges.append((base, saver[-1][1]))
        else:
            base = int(_ok(drv.cuMemAlloc(opts.state_bytes), "cuMemAlloc"))
            ranges.append((base, opts.state_bytes))
        entries.append(KvBuffer(f"state{i}", base, opts.state_bytes, "VRAM", 0, "state"))
    items["state"] = [opts.state_bytes] * opts.state
    for base, size in ranges:
        name = f"{node.name}:gpu0@{base:#x}"
        if real:
            node.space.add_device(base, SparseBytes(size), name)
        else:
            node.space.add(Allocation(base, size, name, "virtual"))
    return KvLayout(make_buffers(entries, items, gpu_id=0), ranges, saver)


def ready(cuda: Any) -> Any:
    """The fake GPU's driver face after cuInit, the primary context current
    (docs/cuda-runtime.md §13.1): what :func:`allocate` allocates through."""
    drv = cuda.driver_api
    if int(drv.cuInit(0)[0]) != 0:
        raise CannotRun(f"the fake GPU of profile {cuda.profile.name} has no usable device")
    err, ctx = drv.cuDevicePrimaryCtxRetain(0)
    if int(err) != 0 or int(drv.cuCtxSetCurrent(ctx)[0]) != 0:
        raise CannotRun(f"the fake GPU of profile {cuda.profile.name} has no context")
    return drv
