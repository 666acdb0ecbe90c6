"""Transfers over the pool's pages through the batch copy API, as HiCache's write-back does.

One ``cudaMemcpyBatchAsync`` descriptor per page extent (docs/pools.md §5.1: whole pages; §5.2:
per-(page, layer) sub-blocks are inside those), host to a device staging buffer, on a
non-default stream with srcAccessOrder Stream. Small pools copy every extent; large ones
copy the extents that decide the verdict (selection.py says which and why the others
get the same one), so the runtime's own copy rules stay the judge at any page count. The
fake's verdict for the first bad descriptor says which page and which registrations it spans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kvreg.harness.pools import PoolGeometry
from kvreg.harness.pools.deciding_pages import buffer_edges

from .selection import copy_selected, select_copies

__all__ = ["TransferResult", "copy_every_page"]


@dataclass
class TransferResult:
    code: int
    copies: int
    failed_row: int | None    # row of the pool's page extents that failed, when known
    detail: str
    # {"pages_copied", "pages_total", "method"}: how the pages were covered
    coverage: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code == 0


def copy_every_page(runtime: Any, geometry: PoolGeometry, buffers: list[Any], *,
                    direction: str = "h2d", fault_detail: Callable[[], Any] | None = None,
                    registrations: Iterable[tuple[int, int]] | None = None,
                    seed: int = 0) -> TransferResult:
    """Judge every page extent of the pool by copying it (small pools) or the ones that decide.

    ``runtime`` is a cuda.bindings.runtime-style module (fake or real). ``fault_detail`` is
    an optional callable returning the fake's last copy fault description. ``registrations``
    are the live (ptr, size) registrations; without them every extent is copied.
    """
    if not geometry.has_page_meta:
        return TransferResult(0, 0, None, "no page metadata: nothing to copy")
    bases = [int(b.data_ptr()) for b in buffers]
    if registrations is None:
        selection = select_copies(geometry, [], copy_all_below=1 << 62)
    else:
        regs = list(registrations)
        edges = [buffer_edges(base, spec.nbytes, regs)
                 for base, spec in zip(bases, geometry.buffers(), strict=True)]
        selection = select_copies(geometry, edges, seed=seed)
    if not len(selection):
        return TransferResult(0, 0, None, "no pages", selection.as_dict())
    out = copy_selected(runtime, selection, bases, direction=direction,
                        fault_detail=fault_detail)
    return TransferResult(out.code, out.copies, out.failed_row, out.detail, selection.as_dict())
