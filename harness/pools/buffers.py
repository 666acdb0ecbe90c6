"""Materialise a pool geometry: torch CPU tensors, zeroed (small pools) or over reserved memory.

Virtual buffers come from a fake's address space: real CPU tensors over reserved memory
(kvreg.fakes.reserved), so pools of hundreds of GiB to several TiB cost no RAM until the code
touches them; real tensors are tracked in the same space so traces can name them.
:func:`release` ends a scenario's virtual buffers and holds the pages the code touched to the
worker's memory limit.
"""

from __future__ import annotations

import resource
from collections.abc import Iterable
from typing import Any

from kvreg.fakes.address_space import AddressSpace
from kvreg.harness.pools import PoolGeometry
from kvreg.harness.scenario.size_limits import REAL_LIMIT

__all__ = ["REAL_LIMIT", "allocate", "data_headroom", "release"]


def allocate(geometry: PoolGeometry, space: AddressSpace, *, real: bool = False,
             base_offset: int = 0) -> list[Any]:
    """One buffer object per ``geometry.buffers()`` entry, in order.

    Real buffers are ``torch.zeros(shape, dtype)`` (torch imported here, not at load), at
    the base torch gives them; virtual buffers are tensors over reserved memory
    (``space.virtual``), ended by :func:`release`, each ``base_offset`` bytes past a 2 MiB
    boundary (0: aligned; scenarios/FORMAT.md ``base_offset`` for where torch puts them).
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
    return [space.virtual(spec.shape, spec.dtype, name=spec.name, offset=base_offset)
            for spec in specs]


def allocate_pinnable(geometry: PoolGeometry, backend: Any, base_offset: int = 0) -> list[Any]:
    """Real, prefaulted host memory for the real-hardware tier, one torch tensor per buffer.

    ``backend.buffer(nbytes, name=)`` (kvreg.realhw's RealCuda) gives page-aligned, touched
    memory; the tensor views it with the pool's dtype and shape, so SGLang-style code sees
    the tensor it would see in production. No size limit: the caller sized the scenario to
    the machine (kvreg.realhw.sizing). With ``base_offset`` each tensor begins that many
    bytes into its memory, as torch's own large tensors do.
    """
    import torch

    out = []
    for spec in geometry.buffers():
        raw = backend.buffer(max(spec.nbytes + base_offset, 1),
                             name=spec.name)[base_offset:base_offset + spec.nbytes]
        t = torch.from_numpy(raw).view(getattr(torch, spec.dtype.name)).reshape(spec.shape)
        out.append(t)
    return out


def data_headroom() -> int | None:
    """How much more the data segment may grow under ``RLIMIT_DATA`` (the worker's memory
    limit, kvreg.harness.run.limits), None where no limit is set or /proc is missing."""
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmData:"):
                    return max(0, soft - int(line.split()[1]) * 1024)
    except OSError:
        pass
    return None


def release(spaces: Iterable[AddressSpace]) -> None:
    """End the virtual buffers of a scenario's address spaces (their RAM is freed now, their
    mappings once nothing holds the tensors), so that many scenarios' pools fit one process.

    The pages the code touched are shared memory, which ``RLIMIT_DATA`` does not count while
    they are written; they are counted here, when the scenario ends: more than the memory
    limit left is a ``MemoryError``, which a supervised run reports as the limit hit, as it
    reports a ``bytearray`` past it.
    """
    touched = sum(space.release() for space in spaces)
    headroom = data_headroom()
    if headroom is not None and touched > headroom:
        raise MemoryError(f"the code under test wrote {touched} bytes into the pool's buffers "
                          f"(pages touched), more than the {headroom} bytes the memory limit "
                          f"left")
