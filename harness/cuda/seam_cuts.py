"""The ``seams-aligned`` rule of the CUDA target: a seam off the copy unit fails only where a
copy would cross it, and says which copy.

A registration seam is harmless unless a transfer spans it (docs/pools.md §5). Two copy paths
can:

- ``batch``: a page extent of the pool's page meta holds the seam strictly inside. HiCache's
  write-back sends that page as one ``cudaMemcpyBatchAsync`` descriptor, and kvreg's
  transfers step copies exactly these extents (transfers.py), so the two verdicts agree.
- ``run``: the seam lies between two pages of one copy unit (a layer slab of a layer_first
  pool). io_backend "direct" copies runs of consecutive pages of a layer with one
  ``cudaMemcpyAsync`` (docs/pools.md §5.2); kvreg does not copy those runs, so the message
  names the path.

A seam in bytes no transfer addresses (``Region.copied`` False: the DSA indexer's spare rows,
docs/pools.md §2.5), or between two pages that no run joins, cuts nothing. Either failure
needs a copy across two registrations to fail, which docs/cuda-runtime.md §5.4 marks [UNC]:
the device profile's ``copy_across_registrations`` decides, and the message says how to flip it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvreg.harness.pools import BufferSpec
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.run.endstate import BufferEnd
from kvreg.harness.run.result import Violation

__all__ = ["FLIP", "SeamCut", "check_cuda_seams", "cuts_of", "misaligned_seams"]

FLIP = ('[UNC] docs/cuda-runtime.md §5.4: the device profile has copy_across_registrations = '
        '"reject"; a scenario with profile_options = { copy_across_registrations = "allow" } '
        'treats such a copy as pinned')
ALLOWED = ('the device profile has copy_across_registrations = "allow" ([UNC] '
           'docs/cuda-runtime.md §5.4), so the copy is treated as pinned')


@dataclass(frozen=True)
class SeamCut:
    """A misaligned seam that a copy crosses."""

    offset: int                  # from the buffer base
    path: str                    # "batch" or "run"
    start: int                   # the page extent (batch) or the copy unit block (run)
    size: int
    page: int                    # page of the extent family (batch) / unit block index (run)
    region: str = ""


def misaligned_seams(end: BufferEnd) -> list[int]:
    """Seams between live registrations inside the buffer that are off its unit."""
    if end.unit is None or end.unit <= 0 or len(end.live) < 2:
        return []
    inside = sorted((p - end.base, s) for p, s in end.live
                    if p >= end.base and p + s <= end.base + end.nbytes)
    seams = sorted({off for off, _ in inside if off > 0}
                   | {off + s for off, s in inside if off + s < end.nbytes})
    return [x for x in seams if x % end.unit]


def _uncopied(spec: BufferSpec, x: int) -> bool:
    return any(not r.copied and r.offset <= x <= r.end for r in spec.regions)


def _region(spec: BufferSpec, off: int) -> str:
    if len(spec.regions) < 2:
        return ""
    return next((r.name for r in spec.regions if r.offset <= off < r.end), "")


def _page_holding(fams: Sequence[ExtentFamily], x: int) -> tuple[int, int, int] | None:
    """(offset, size, page) of the lowest page-meta row holding ``x`` strictly inside."""
    best: tuple[int, int, int, int] | None = None
    for f in fams:
        rel = x - f.base
        hi = min((rel - 1) // f.stride, f.count - 1)
        lo = max(-(-(rel - f.size + 1) // f.stride), 0)
        if lo <= hi and (best is None or f.row(lo) < best[0]):
            best = (f.row(lo), f.offset(lo), f.size, lo)
    return None if best is None else best[1:]


def _joins_two_pages(fams: Sequence[ExtentFamily], x: int) -> bool:
    """Whether ``x`` is where one page of a contiguous family ends and the next begins."""
    for f in fams:
        if f.size != f.stride or not f.count:
            continue
        q, r = divmod(x - f.base, f.stride)
        if r == 0 and 0 < q < f.count:
            return True
    return False


def cuts_of(end: BufferEnd, spec: BufferSpec, families: Sequence[ExtentFamily] | None,
            index: int) -> list[SeamCut]:
    """The misaligned seams of one buffer that a copy crosses, in offset order."""
    unit = end.unit or 0
    seams = [x for x in misaligned_seams(end) if not _uncopied(spec, x)]
    if not seams:
        return []
    cuts: list[SeamCut] = []
    fams = [f for f in families or () if f.buffer == index and f.count]
    if families is None:     # no page meta: every seam inside a unit may be crossed by a run
        return [SeamCut(x, "run", x // unit * unit, unit, x // unit, _region(spec, x))
                for x in seams]
    for x in seams:
        held = _page_holding(fams, x)
        if held is not None:
            off, size, page = held
            cuts.append(SeamCut(x, "batch", off, size, page, _region(spec, off)))
        elif unit > max((f.size for f in fams), default=unit) and _joins_two_pages(fams, x):
            cuts.append(SeamCut(x, "run", x // unit * unit, unit, x // unit, _region(spec, x)))
    return cuts


def _sentence(label: str, cut: SeamCut, more: int) -> str:
    where = f" of the {cut.region}" if cut.region else ""
    extra = f" ({more} more misaligned seam(s) cut a copy)" if more else ""
    x = cut.offset
    head = f"a seam between two registrations of {label} lies at offset {x} ({label}+{x:#x}), "
    if cut.path == "batch":
        return (head + f"which cuts copy page {cut.page}{where} [{cut.start}, "
                f"{cut.start + cut.size}) of {cut.size} bytes: {x - cut.start} bytes into "
                f"it{extra}; the batch copy of that page spans two registrations")
    unit = f" ({cut.region})" if cut.region else ""
    return (head + f"between two pages of copy unit {cut.page} [{cut.start}, "
            f"{cut.start + cut.size}){unit} of {cut.size} bytes, {x - cut.start} bytes into "
            f"it{extra}; "
            "kvreg copies each page apart, but io_backend \"direct\" copies runs of "
            "consecutive pages of a layer with one cudaMemcpyAsync (transfer_kv_direct, "
            "docs/pools.md §5.2), and a run across this seam spans two registrations")


def check_cuda_seams(ends: Sequence[BufferEnd], specs: Sequence[BufferSpec],
                     indexes: Sequence[int], families: Sequence[ExtentFamily] | None,
                     across: str, seq: int) -> tuple[list[Violation], list[Violation]]:
    """(violations, warnings) of ``seams-aligned`` over buffers whose register returned.

    ``across`` is the device profile's copy_across_registrations: "reject" fails a cut
    ([UNC] rule named in the message), "allow" reports it as a warning.
    """
    violations: list[Violation] = []
    warnings: list[Violation] = []
    for end, spec, index in zip(ends, specs, indexes, strict=True):
        if not end.returned:
            continue
        cuts = cuts_of(end, spec, families, index)
        if not cuts:
            continue
        text = _sentence(end.label, cuts[0], len(cuts) - 1)
        if across == "reject":
            violations.append(Violation("seams-aligned", f"{text}, which fails under {FLIP}",
                                        seq))
        else:
            warnings.append(Violation("seams-aligned", f"{text}; {ALLOWED}", seq))
    return violations, warnings
