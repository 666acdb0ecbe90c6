"""``torch.Tensor.is_pinned()`` answered from the fake's registry while the fake is patched in.

A CUDA build of torch answers ``is_pinned()`` of a CPU tensor with ``CUDAHooks::isPinnedPtr``
(aten/src/ATen/cuda/detail/CUDAHooks.cpp) on ``self.storage().data()`` (the storage's first
byte, whatever the view): False when CUDA is not available, else ``cudaPointerGetAttributes``
and "type is cudaMemoryTypeHost" (an invalid-value error reads as False). Registered and
``cudaHostAlloc`` memory have type Host (docs/cuda-runtime.md §4 [DOC]), so a tensor whose
storage starts inside a live registration is pinned, any other is not; a CPU-only torch would
always say False, which is not what the simulated machine says.
The query goes to the registry directly: torch's own attribute query is not a call of the code
under test and does not appear in its trace or touch its last-error state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["patch_is_pinned"]


@contextmanager
def patch_is_pinned(pinned: Any, available: bool) -> Iterator[None]:
    """For the block, ``Tensor.is_pinned()`` of a CPU tensor asks ``pinned.containing(ptr)``
    (False throughout where the profile has no usable CUDA, as torch says then)."""
    import torch

    original = torch.Tensor.is_pinned

    def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
        if self.device.type != "cpu":
            return bool(original(self, device) if device is not None else original(self))
        if not available:
            return False
        # torch asks about the storage's first byte (``self.storage().data()``), not the view's
        return pinned.containing(self.untyped_storage().data_ptr()) is not None

    is_pinned.__doc__ = original.__doc__
    torch.Tensor.is_pinned = is_pinned  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.is_pinned = original  # type: ignore[method-assign]
