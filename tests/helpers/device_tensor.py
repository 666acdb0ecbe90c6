"""A CUDA tensor as registration code reads one, over the fake driver's device memory.

vLLM's connectors take ``dict[str, torch.Tensor]`` of CUDA tensors and read only their
geometry: ``data_ptr``, ``untyped_storage().data_ptr() / .nbytes()``, ``shape``, ``stride``,
``element_size``, ``nbytes``, ``is_contiguous``, ``storage_offset`` and views by indexing.
CPU torch cannot make a tensor at a device address (the fake's are non-canonical, no byte
behind them: docs/cuda-runtime.md §14), so :class:`DeviceTensor` answers those questions with
torch's rules; reading or writing its elements is not possible (it has no data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["DeviceStorage", "DeviceTensor", "empty"]


@dataclass(frozen=True)
class DeviceStorage:
    """``untyped_storage()``: the allocation a tensor views (its base and byte size)."""

    ptr: int
    size: int
    device: int = 0

    def data_ptr(self) -> int:
        return self.ptr

    def nbytes(self) -> int:
        return self.size


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


class DeviceTensor:
    """A strided view of a :class:`DeviceStorage` (offset and strides in elements)."""

    is_cuda = True

    def __init__(self, storage: DeviceStorage, shape: Sequence[int], dtype: torch.dtype,
                 stride: Sequence[int] | None = None, offset: int = 0) -> None:
        self._storage = storage
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self._stride = tuple(stride) if stride is not None else _contiguous(shape)
        self._offset = offset
        self.device = torch.device("cuda", storage.device)

    # -- geometry -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def element_size(self) -> int:
        return self.dtype.itemsize

    def numel(self) -> int:
        return self.shape.numel()

    @property
    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    def stride(self, dim: int | None = None) -> Any:
        return self._stride if dim is None else self._stride[dim]

    def storage_offset(self) -> int:
        return self._offset

    def data_ptr(self) -> int:
        return self._storage.ptr + self._offset * self.element_size()

    def get_device(self) -> int:
        """The CUDA ordinal (-1 for a CPU tensor), as ``torch.Tensor.get_device``."""
        return -1 if self.device.type == "cpu" else int(self.device.index or 0)

    def untyped_storage(self) -> DeviceStorage:
        return self._storage

    def is_contiguous(self) -> bool:
        return all(n == 1 or s == c for n, s, c in
                   zip(self.shape, self._stride, _contiguous(self.shape), strict=True))

    # -- views ----------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> DeviceTensor:
        """``t[i]`` and ``t[:, i]`` (the views the connectors take)."""
        if isinstance(index, int):
            index = (index,)
        if isinstance(index, tuple) and len(index) == 2 and index[0] == slice(None):
            dim, i = 1, index[1]
        elif isinstance(index, tuple) and len(index) == 1:
            dim, i = 0, index[0]
        else:
            raise NotImplementedError(f"DeviceTensor[{index!r}]: only t[i] and t[:, i]")
        if not 0 <= i < self.shape[dim]:
            raise IndexError(f"index {i} is out of bounds for dimension {dim} with size "
                             f"{self.shape[dim]}")
        shape = list(self.shape)
        stride = list(self._stride)
        offset = self._offset + i * stride[dim]
        del shape[dim], stride[dim]
        return DeviceTensor(self._storage, shape, self.dtype, stride, offset)

    def unbind(self, dim: int = 0) -> tuple[DeviceTensor, ...]:
        if dim != 0:
            raise NotImplementedError("DeviceTensor.unbind: dim 0 only")
        return tuple(self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        return (f"DeviceTensor(shape={tuple(self.shape)}, dtype={self.dtype}, "
                f"data_ptr={self.data_ptr():#x}, device={self.device})")


def empty(driver: Any, shape: Sequence[int], dtype: torch.dtype = torch.bfloat16,
          device: int = 0) -> DeviceTensor:
    """``torch.empty(shape, device="cuda")`` as one ``cudaMalloc`` block of the fake driver
    (``FakeCuda(...).driver``)."""
    nbytes = torch.Size(shape).numel() * dtype.itemsize
    block = driver.device_alloc(nbytes, device)
    return DeviceTensor(DeviceStorage(int(block.base), nbytes, device), shape, dtype)
