"""``kvreg_host_memory``: a real pool's host allocations come from no-RAM buffers.

Real host pools allocate their KV buffers themselves, in their constructor: SGLang's
``HostTensorAllocator.allocate(dims, dtype, device)`` maps anonymous memory with
``MAP_POPULATE`` (RAM for every byte), NPU-style paths call ``torch.empty``. To test such a
pool at production size on a CPU runner, :func:`kvreg_host_memory` routes those entry points,
for its block only, to real ``torch.Tensor``s over reserved memory: a real address and every
tensor method, but no RAM until a page is
touched (a fresh mapping reads as zeros, so ``torch.zeros`` keeps its meaning). The tensors
are :func:`kvreg.fakes.reserved.reserve_tensor`'s (a sparse memfd inside a ``PROT_NONE`` guard
reservation), the same buffers kvreg's scenarios hand out.

- ``torch.empty`` / ``torch.zeros`` on the CPU are taken over only at or above ``threshold``
  bytes (default 64 MiB), so the small tensors everything else makes stay torch's own
  (SGLang's allocator itself calls ``torch.empty([], dtype)``); ``out=``, ``pin_memory=True``,
  non-strided layouts and other devices always go to torch.
- ``allocators``: ``(owner, attribute)`` pairs whose ``allocate``-style method
  ``(dims, dtype, device)`` is replaced for the block (whatever size: the caller named it).
  :meth:`HostMemory.allocate` is itself such an allocator, for pools that take one.
- Each allocation is named (``names`` in allocation order, else ``host_alloc<i>``), tracked by
  the fake so its trace and leak reports point into it by name, and recorded in the trace as a
  ``host.kvreg_host_alloc(ptr, nbytes)`` row.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_THRESHOLD", "HostAllocation", "HostMemory", "kvreg_host_memory"]

DEFAULT_THRESHOLD = 64 << 20


@dataclass(frozen=True)
class HostAllocation:
    """One allocation kvreg served: what the pool asked for and where it lives."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    ptr: int
    via: str            # "torch.empty", "torch.zeros", "HostTensorAllocator.allocate", ...


def _shape_of(size: tuple[Any, ...]) -> tuple[int, ...] | None:
    """torch.empty's ``*size``: ints, or one sequence of ints (torch.Size, list, tuple)."""
    if (len(size) == 1 and isinstance(size[0], (tuple, list))) or (
            len(size) == 1 and type(size[0]).__name__ == "Size"):
        size = tuple(size[0])
    if all(isinstance(d, int) and not isinstance(d, bool) for d in size):
        return tuple(size)
    return None


class HostMemory:
    """The allocations served in one :func:`kvreg_host_memory` block."""

    def __init__(self, fake: Any = None, *, threshold: int = DEFAULT_THRESHOLD,
                 names: Sequence[str] = ()) -> None:
        if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
            raise ValueError(f"threshold must be a positive number of bytes, got {threshold!r}")
        if isinstance(names, str) or len(set(names)) != len(names):
            raise ValueError(f"names must be a sequence of distinct buffer names, got {names!r}")
        self.fake = fake
        self.threshold = threshold
        self.names = tuple(names)
        self.allocations: list[HostAllocation] = []
        self._tensors: dict[str, weakref.ref[Any]] = {}

    def allocate(self, dims: Sequence[int], dtype: Any, device: Any = "cpu", *,
                 via: str = "allocate") -> Any:
        """Allocator protocol of SGLang's ``HostTensorAllocator``: a no-RAM CPU tensor."""
        if str(device) != "cpu":
            raise ValueError(f"kvreg host memory serves CPU allocations only; got "
                             f"device={device!r}")
        from kvreg.fakes.reserved import reserve_tensor

        i = len(self.allocations)
        name = self.names[i] if i < len(self.names) else f"host_alloc{i}"
        tensor = reserve_tensor(dtype=dtype, shape=tuple(int(d) for d in dims), name=name)
        nbytes = tensor.numel() * tensor.element_size()
        ptr = int(tensor.data_ptr())
        self.allocations.append(HostAllocation(name, tuple(tensor.shape), str(dtype), nbytes,
                                               ptr, via))
        self._tensors[name] = weakref.ref(tensor)
        if self.fake is not None and nbytes:
            self.fake.track(tensor, name=name)
            self.fake.trace.append("host", "kvreg_host_alloc", (ptr, nbytes), None, None,
                                   False)
        return tensor

    def by_name(self, name: str) -> HostAllocation:
        """The allocation named ``name``; KeyError lists those there are."""
        for a in self.allocations:
            if a.name == name:
                return a
        raise KeyError(f"no host allocation named {name!r}; there are: "
                       f"{', '.join(a.name for a in self.allocations) or 'none'}")

    def tensor(self, name: str) -> Any:
        """The tensor served as ``name`` while something still holds it (a pool whose
        constructor raised leaves its buffers to be judged), else None."""
        self.by_name(name)
        return self._tensors[name]()

    # -- entry points ------------------------------------------------------------------------
    def _factory(self, real: Any, via: str, torch: Any) -> Any:
        def factory(*size: Any, out: Any = None, dtype: Any = None, layout: Any = None,
                    device: Any = None, pin_memory: bool = False, **kwargs: Any) -> Any:
            shape = _shape_of(size)
            on_cpu = device is None or str(device) == "cpu"
            strided = layout is None or layout == torch.strided
            if shape is not None and out is None and on_cpu and strided and not pin_memory \
                    and not kwargs.get("requires_grad", False):
                kind = dtype if dtype is not None else torch.get_default_dtype()
                nbytes = math.prod(shape) * _itemsize(torch, kind)
                if nbytes >= self.threshold:
                    return self.allocate(shape, kind, "cpu", via=via)
            extra = {k: v for k, v in (("out", out), ("dtype", dtype), ("layout", layout),
                                        ("device", device)) if v is not None}
            return real(*size, pin_memory=pin_memory, **extra, **kwargs)

        factory.__wrapped__ = real  # type: ignore[attr-defined]
        return factory

    def _method(self, via: str, *, bound: bool) -> Any:
        memory = self

        def method(_self: Any, dims: Sequence[int], dtype: Any, device: Any = "cpu") -> Any:
            return memory.allocate(dims, dtype, device, via=via)

        def function(dims: Sequence[int], dtype: Any, device: Any = "cpu") -> Any:
            return memory.allocate(dims, dtype, device, via=via)

        return method if bound else function


def _itemsize(torch: Any, dtype: Any) -> int:
    # torch.tensor, not torch.empty: the latter may be this module's own patch
    return int(torch.tensor([], dtype=dtype).element_size())


@contextmanager
def kvreg_host_memory(fake: Any = None, *, threshold: int = DEFAULT_THRESHOLD,
                      names: Sequence[str] = (), allocators: Sequence[tuple[Any, str]] = (),
                      torch_factories: bool = True) -> Iterator[HostMemory]:
    """For the block, large CPU ``torch.empty`` / ``torch.zeros`` and the named allocator
    methods hand out no-RAM tensors, tracked in ``fake`` (a ``FakeCuda``) by name."""
    from kvreg.fakes.patching import patch_attr

    memory = HostMemory(fake, threshold=threshold, names=names)
    for i, pair in enumerate(allocators):
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], str)):
            raise ValueError(f"allocators[{i}] must be an (owner, attribute name) pair, got "
                             f"{pair!r}")
        owner, attr = pair
        if not callable(getattr(owner, attr, None)):
            raise ValueError(f"allocators[{i}]: {getattr(owner, '__name__', owner)!r} has no "
                             f"method {attr!r} to replace")
    with ExitStack() as stack:
        if torch_factories:
            import torch

            for name in ("empty", "zeros"):
                real = getattr(torch, name)
                stack.enter_context(patch_attr(torch, name, memory._factory(
                    real, f"torch.{name}", torch)))
        for owner, attr in allocators:
            label = f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
            stack.enter_context(patch_attr(owner, attr, memory._method(
                label, bound=isinstance(owner, type))))
        yield memory
