"""Draw a chunk plan as SVG: the buffer to scale, its seams, and every straddling page.

People should see an alignment bug, not read about it: each buffer is a bar with its
regions (K/V halves, per-layer slabs), chunk seams as dark lines and pages that cross a
seam in red, followed by zoomed views of the pages around the worst seams.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

import numpy as np

from .chunking import BufferPlan, PoolPlan

__all__ = ["render_svg"]

WIDTH = 1000
MARGIN = 20
BAR_H = 28
ZOOM_H = 40
REGION_COLOURS = ("#cfe3f7", "#d9f0d3", "#f6e3c6", "#e6d6f0")
OK_PAGE, BAD_PAGE, SEAM = "#9ec5e8", "#d7301f", "#222222"


def _fmt_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start",
          colour: str = "#111") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" font-family="monospace" '
            f'text-anchor="{anchor}" fill="{colour}">{escape(s)}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, cls: str = "",
          title: str = "") -> str:
    attrs = (f'x="{x:.2f}" y="{y:.1f}" width="{max(w, 0.5):.2f}" height="{h:.1f}" '
             f'fill="{fill}"' + (f' class="{cls}"' if cls else ""))
    if title:
        return f"<rect {attrs}><title>{escape(title)}</title></rect>"
    return f"<rect {attrs}/>"


def _buffer_bar(plan: PoolPlan, bp: BufferPlan, y: float) -> list[str]:
    spec = bp.spec
    total = max(spec.nbytes, 1)
    scale = (WIDTH - 2 * MARGIN) / total
    out = [_text(MARGIN, y - 6, f"{spec.name}: {_fmt_bytes(spec.nbytes)}, {bp.plan.calls} "
                 f"call(s), unit {bp.unit if bp.unit is not None else 'none'}, "
                 f"{len(bp.straddles)} straddling page extent(s)", 12)]
    for i, region in enumerate(spec.regions):
        x = MARGIN + region.offset * scale
        out.append(_rect(x, y, region.nbytes * scale, BAR_H,
                         REGION_COLOURS[i % len(REGION_COLOURS)], "region", region.name))
        if region.nbytes * scale > 60:
            out.append(_text(x + 3, y + BAR_H - 8, region.name, 10))
    ext = plan.extents
    if ext is not None:
        for r in bp.straddles[:2000]:
            x = MARGIN + int(ext.offset[r]) * scale
            out.append(_rect(x, y - 2, max(int(ext.size[r]) * scale, 2.0), BAR_H + 4, BAD_PAGE,
                             "straddle", f"page {int(ext.page[r])}"))
    for seam in bp.plan.seams[:5000]:
        x = MARGIN + int(seam) * scale
        out.append(f'<line class="seam" x1="{x:.2f}" y1="{y - 4:.1f}" x2="{x:.2f}" '
                   f'y2="{y + BAR_H + 4:.1f}" stroke="{SEAM}" stroke-width="1.5"/>')
    return out


def _zoom(plan: PoolPlan, bp: BufferPlan, seam: int, y: float, title: str) -> list[str]:
    ext = plan.extents
    assert ext is not None
    rows = np.nonzero(ext.buffer == bp.index)[0]
    offs, sizes = ext.offset[rows], ext.size[rows]
    near = np.argsort(np.abs(offs - seam))[:8]
    near = near[np.argsort(offs[near])]
    if not len(near):
        return []
    lo = int(offs[near].min())
    hi = int((offs[near] + sizes[near]).max())
    lo, hi = min(lo, seam), max(hi, seam + 1)
    scale = (WIDTH - 2 * MARGIN) / max(hi - lo, 1)
    out = [_text(MARGIN, y - 6, title, 11)]
    bad = set(int(r) for r in bp.straddles)
    for j in near:
        r = int(rows[j])
        x = MARGIN + (int(offs[j]) - lo) * scale
        colour = BAD_PAGE if r in bad else OK_PAGE
        out.append(_rect(x, y, int(sizes[j]) * scale - 1, ZOOM_H, colour, "zoom-page",
                         f"page {int(ext.page[r])}"))
        if int(sizes[j]) * scale > 50:
            out.append(_text(x + 3, y + ZOOM_H / 2 + 4, f"page {int(ext.page[r])}", 10,
                             colour="#fff" if r in bad else "#111"))
    x = MARGIN + (seam - lo) * scale
    out.append(f'<line class="seam" x1="{x:.2f}" y1="{y - 4:.1f}" x2="{x:.2f}" '
               f'y2="{y + ZOOM_H + 4:.1f}" stroke="{SEAM}" stroke-width="2"/>')
    out.append(_text(x, y + ZOOM_H + 16, f"seam at {seam:#x}", 10, "middle"))
    return out


def render_svg(plan: PoolPlan, *, max_zooms: int = 4) -> str:
    """The SVG document for one pool plan."""
    g = plan.geometry
    body: list[str] = []
    y = 50.0
    for bp in plan.buffers:
        body += _buffer_bar(plan, bp, y)
        y += BAR_H + 40
    zooms: list[tuple[BufferPlan, int]] = []
    if plan.extents is not None:
        for bp in plan.buffers:
            seams = bp.plan.seams
            if len(bp.straddles):
                ext_off = plan.extents.offset[bp.straddles]
                idx = np.searchsorted(seams, ext_off, side="right")
                chosen = sorted({int(seams[min(i, len(seams) - 1)]) for i in idx})
            else:
                chosen = [int(s) for s in seams]
            zooms += [(bp, s) for s in chosen]
    for bp, seam in zooms[:max_zooms]:
        straddle = any(
            plan.extents is not None and int(plan.extents.offset[r]) < seam
            < int(plan.extents.offset[r] + plan.extents.size[r]) for r in bp.straddles[:5000])
        body += _zoom(plan, bp, seam, y + 10,
                      f"zoom: {bp.spec.name} around seam {seam:#x}"
                      + (" - a page crosses it" if straddle else " - pages meet it cleanly"))
        y += ZOOM_H + 50
    title = (f"kvreg plan: {g.pool_type} {g.layout}, algorithm {plan.algorithm}, chunk limit "
             f"{_fmt_bytes(plan.limit)}: {plan.calls} call(s), {plan.straddling_count} "
             "straddling page extent(s)")
    height = int(y + 20)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">')
    return "\n".join([head, '<rect width="100%" height="100%" fill="#ffffff"/>',
                      _text(MARGIN, 24, title, 13), *body, "</svg>"]) + "\n"
