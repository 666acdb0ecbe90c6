"""Materialise a pool geometry: real torch CPU tensors (small pools) or virtual buffers.

Virtual buffers come from a fake's address space, so pools of hundreds of GiB to several TiB
cost no RAM; real tensors are tracked in the same space so traces can name them.
"""

from __future__ import annotations

from typing import Any

from kvreg.fakes.address_space import AddressSpace
from kvreg.harness.pools import PoolGeometry
from kvreg.harness.scenario.size_limits import REAL_LIMIT

__all__ = ["REAL_LIMIT", "allocate"]



def allocate(geometry: PoolGeometry, space: AddressSpace, *, real: bool = False) -> list[Any]:
    """One buffer object per ``geometry.buffers()`` entry, in order.

    Real buffers are ``torch.empty(shape, dtype)`` (torch imported here, not at load);
    virtual buffers are :class:`~kvreg.fakes.address_space.VirtualTensor`.
    """
    specs = geometry.buffers()
    if real:
        total = sum(s.nbytes for s in specs)
        if total > REAL_LIMIT:
            raise ValueError(f"pool needs {total} bytes; real buffers are limited to "
                             f"{REAL_LIMIT} (use virtual memory for larger pools)")
        import torch

        out = []
        for spec in specs:
            t = torch.zeros(spec.shape, dtype=getattr(torch, spec.dtype.name))
            space.track(t, name=spec.name)
            out.append(t)
        return out
    return [space.virtual(spec.shape, spec.dtype, name=spec.name) for spec in specs]


def allocate_pinnable(geometry: PoolGeometry, backend: Any) -> list[Any]:
    """Real, prefaulted host memory for the real-hardware tier, one torch tensor per buffer.

    ``backend.buffer(nbytes, name=)`` (kvreg.realhw's RealCuda) gives page-aligned, touched
    memory; the tensor views it with the pool's dtype and shape, so SGLang-style code sees
    the tensor it would see in production. No size limit: the caller sized the scenario to
    the machine (kvreg.realhw.sizing).
    """
    import torch

    out = []
    for spec in geometry.buffers():
        raw = backend.buffer(max(spec.nbytes, 1), name=spec.name)[:spec.nbytes]
        t = torch.from_numpy(raw).view(getattr(torch, spec.dtype.name)).reshape(spec.shape)
        out.append(t)
    return out
