"""Copy validation: which side of each copy is device memory, and is each host side legal.

The rule (docs/cuda-runtime.md §5.1, ``\\note_memcpy``) [DOC]: a host range must be wholly
registered or wholly pageable; a mix is cudaErrorInvalidValue. A range that is wholly
pinned but by two adjacent, separate registrations is [UNC] (§5.4) and follows the
profile's ``copy_across_registrations``. Everything is vectorised: one numpy pass per side.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import errors as E
from .registry import CLASS_NAMES, MIXED, PINNED, SPANS, Pinned

if TYPE_CHECKING:
    from .cuda_driver import FakeDriver

__all__ = ["CopyFault", "HostSide", "classify_copy_sides"]


class HostSide(enum.Enum):
    NONE = "none"
    SRC = "src"
    DST = "dst"


@dataclass(frozen=True)
class CopyFault:
    """Why a copy failed, in terms a user can act on (which copy, which range, which rule)."""

    code: int
    index: int            # copy index in the batch (-1: not about one copy)
    reason: str
    side: HostSide
    ptr: int
    size: int
    registrations: tuple[Pinned, ...]

    def describe(self) -> str:
        if self.index >= 0:
            where = f"copy {self.index}"
        else:
            where = "batch" if self.side is HostSide.NONE else "copy"
        if self.side is HostSide.NONE:
            return f"{where}: {self.reason} ({E.error_name(self.code)})"
        regs = ", ".join(f"[{r.base:#x}, {r.end:#x})" for r in self.registrations)
        return (f"{where}: {self.side.value} range [{self.ptr:#x}, {self.ptr + self.size:#x}) "
                f"{self.reason}" + (f" (registrations {regs})" if regs else "")
                + f" -> {E.error_name(self.code)}")


_FEW_RANGES = 8    # at most this many device ranges in reach: tested one by one


def _device_side(driver: FakeDriver, ptrs: np.ndarray, sizes: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(is device pointer, device range fits in its allocation) per copy.

    Only the allocations between the lowest and highest pointer can hold one; a few are
    tested one by one (a batch's host side reaches none, its staging side one), more by a
    binary search: both give the same answer, the first without gathering per copy."""
    from .cuda_driver import ALIAS_OFFSET, DEVICE_BASE

    alias = (ptrs >= ALIAS_OFFSET) & (ptrs < DEVICE_BASE)
    if not len(ptrs):
        return alias, alias
    lo, hi = int(ptrs.min()), int(ptrs.max())
    ranges = [r for r in driver.device_ranges() if r.base <= hi and r.end > lo]
    if not ranges:
        return alias, alias
    ends_q = ptrs + sizes
    if len(ranges) <= _FEW_RANGES:
        is_dev = np.zeros(ptrs.shape, bool)
        fits = np.zeros(ptrs.shape, bool)
        for r in ranges:
            inside = (ptrs >= r.base) & (ptrs < r.end)
            is_dev |= inside
            fits |= inside & (ends_q <= r.end)
        return is_dev | alias, fits | alias
    bases = np.fromiter((r.base for r in ranges), np.int64, len(ranges))
    ends = np.fromiter((r.end for r in ranges), np.int64, len(ranges))
    idx = np.searchsorted(bases, ptrs, side="right") - 1
    safe = np.maximum(idx, 0)
    is_dev = (idx >= 0) & (ptrs < ends[safe])
    fits = is_dev & (ends_q <= ends[safe])
    return is_dev | alias, fits | alias


def _as_int64(values: np.ndarray) -> np.ndarray:
    """``values`` as int64 (a uint64 array viewed, not copied: the same bits astype gives)."""
    if values.dtype == np.uint64:
        return values.view(np.int64)
    return values.astype(np.int64, copy=False)


def classify_copy_sides(driver: FakeDriver, dsts: np.ndarray, srcs: np.ndarray,
                        sizes: np.ndarray, *, kind: int, batch: bool) -> CopyFault | None:
    """The first fault among the copies (by index), or None when all are legal.

    ``kind`` is a cudaMemcpyKind (4 = Default: infer from the pointers, as the batch API
    does under UVA).
    """
    d = _as_int64(dsts)
    s = _as_int64(srcs)
    n = _as_int64(sizes)
    d_dev, d_fits = _device_side(driver, d, n)
    s_dev, s_fits = _device_side(driver, s, n)
    if kind == 1:       # HostToDevice
        want_d_dev, want_s_dev = np.ones_like(d_dev), np.zeros_like(s_dev)
    elif kind == 2:     # DeviceToHost
        want_d_dev, want_s_dev = np.zeros_like(d_dev), np.ones_like(s_dev)
    elif kind == 3:     # DeviceToDevice
        want_d_dev, want_s_dev = np.ones_like(d_dev), np.ones_like(s_dev)
    elif kind == 0:     # HostToHost
        want_d_dev, want_s_dev = np.zeros_like(d_dev), np.zeros_like(s_dev)
    else:               # Default
        want_d_dev, want_s_dev = d_dev, s_dev
    # a side declared device must be device memory that holds the whole range [INF]
    bad_dev = (want_d_dev & ~d_fits) | (want_s_dev & ~s_fits)
    candidates: list[tuple[int, CopyFault]] = []
    if bad_dev.any():
        i = int(np.argmax(bad_dev))
        side = HostSide.DST if want_d_dev[i] and not d_fits[i] else HostSide.SRC
        ptr = int(d[i] if side is HostSide.DST else s[i])
        candidates.append((i, CopyFault(E.INVALID_VALUE, i,
                                        "is not inside one device allocation", side, ptr,
                                        int(n[i]), ())))
    profile = driver.profile
    for side, ptrs, is_host in ((HostSide.SRC, s, ~want_s_dev), (HostSide.DST, d, ~want_d_dev)):
        if not is_host.any():
            continue
        if is_host.all():     # every copy's side is host memory: no gather
            rows = np.arange(len(ptrs))
            classes, _ = driver.pinned.classify(ptrs, n)
        else:
            rows = np.flatnonzero(is_host)
            classes, _ = driver.pinned.classify(ptrs[rows], n[rows])
        bad = classes == MIXED
        if profile.copy_across_registrations == "reject":
            bad |= classes == SPANS
        hit = bad
        if batch and not profile.can_use_host_pointer_for_registered_mem:
            # raw host VA of registered memory handed to the batch API (sglang #40232)
            hit = bad | (classes == PINNED) | (classes == SPANS)
        if not hit.any():
            continue
        j = int(np.argmax(hit))
        i = int(rows[j])
        ptr, size = int(ptrs[i]), int(n[i])
        regs = driver.pinned.touching(ptr, size)
        if bad[j]:
            reason = ("spans two separate registrations"
                      if classes[j] == SPANS else "is partly registered and partly pageable")
            code = E.INVALID_VALUE
        else:
            reason = "is a raw host address of registered memory (device alias differs)"
            code = E.ILLEGAL_ADDRESS
        candidates.append((i, CopyFault(code, i if batch else -1, reason, side, ptr, size,
                                        regs)))
    if not candidates:
        return None
    candidates.sort(key=lambda c: (c[0], c[1].code == E.ILLEGAL_ADDRESS))
    return candidates[0][1]


def describe_class(code: int) -> str:
    return CLASS_NAMES[code]
