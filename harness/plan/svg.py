"""Draw chunk plans as SVG: each buffer to scale with its seams, and zooms on the pages at a seam.

People should see an alignment bug, not read about it. Every requested algorithm gets a panel,
side by side: each buffer is a bar with its regions (K/V halves, per-layer slabs), chunk seams
as dark lines (labelled with their offsets), the chunk size, and the pages that cross a seam in
red; below, zoomed views of the pages around the first seams that cut a page (or the first
seams, when none does). The drawing costs seams and zooms, never pages: pages come from the
closed-form extent families, and seam lines and red marks are capped, with a note saying so.
Every text line is wrapped to its panel's width and every block is placed below the one
before it by the number of lines it took, so a long buffer name or note never overprints the
next panel or the next buffer.
In MR mode (``mr=True``) the registrations are Mooncake MRs judged against the MR limit:
an MR above it is outlined in red and its panel's heading is red. Sizes are exact where two
decimals would hide the difference (:mod:`.sizes`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from xml.sax.saxutils import escape

import numpy as np

from kvreg.harness.plan.chunking import BufferPlan, PoolPlan
from kvreg.harness.plan.sizes import size_text
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.pools.families import extent_at, touching_pages

__all__ = ["render_svg"]

PANEL_W = 760
MARGIN = 20
BAR_H = 28
ZOOM_H = 40
MAX_SEAM_LINES = 400     # per bar; above it every k-th seam is drawn and a note says so
MAX_MARKS = 200          # straddling page marks per bar (the count is exact)
REGION_COLOURS = ("#cfe3f7", "#d9f0d3", "#f6e3c6", "#e6d6f0")
OK_PAGE, BAD_PAGE, SEAM = "#9ec5e8", "#d7301f", "#222222"
MAX_OVER = 200           # over-limit registrations outlined per bar
_fmt_bytes = size_text
TEXT_W = PANEL_W - 2 * MARGIN     # a panel's text column: nothing is drawn wider
# a monospace glyph's advance in em (DejaVu Sans Mono, the usual "monospace": 0.602),
# rounded up so a renderer with a wider face still stays inside the column
CHAR_EM = 0.62


def _lead(size: int) -> float:
    """Baseline-to-baseline distance of wrapped lines of font ``size``."""
    return size + 3.0


def _wrap(s: str, size: int, width: float = TEXT_W) -> list[str]:
    """``s`` cut into lines that fit ``width`` pixels at font ``size``."""
    per_line = max(int(width / (size * CHAR_EM)), 8)
    return textwrap.wrap(s, per_line, break_on_hyphens=False) or [""]


def _height(s: str, size: int, width: float = TEXT_W) -> float:
    """How far the lines of ``s`` reach below the first baseline."""
    return _lead(size) * (len(_wrap(s, size, width)) - 1)


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start",
          colour: str = "#111", cls: str = "", width: float = TEXT_W) -> str:
    """One text element at baseline ``y``; a line wider than ``width`` continues in
    ``<tspan>`` lines below it (see :func:`_height`)."""
    extra = f' class="{cls}"' if cls else ""
    first, *rest = _wrap(s, size, width)
    more = "".join(f'<tspan x="{x:.1f}" dy="{_lead(size):.1f}">{escape(line)}</tspan>'
                   for line in rest)
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" font-family="monospace" '
            f'text-anchor="{anchor}" fill="{colour}"{extra}>{escape(first)}{more}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, cls: str = "",
          title: str = "") -> str:
    attrs = (f'x="{x:.2f}" y="{y:.1f}" width="{max(w, 0.5):.2f}" height="{h:.1f}" '
             f'fill="{fill}"' + (f' class="{cls}"' if cls else ""))
    if title:
        return f"<rect {attrs}><title>{escape(title)}</title></rect>"
    return f"<rect {attrs}/>"


def _seam_line(x: float, y0: float, y1: float, width: float, title: str) -> str:
    return (f'<line class="seam" x1="{x:.2f}" y1="{y0:.1f}" x2="{x:.2f}" y2="{y1:.1f}" '
            f'stroke="{SEAM}" stroke-width="{width}"><title>{escape(title)}</title></line>')


def _buffer_bar(plan: PoolPlan, bp: BufferPlan, x0: float, top: float,
                word: str = "call") -> tuple[list[str], float]:
    """A buffer's heading, bar and notes from ``top`` down; the elements and the y below."""
    spec = bp.spec
    width = PANEL_W - 2 * MARGIN
    total = max(spec.nbytes, 1)
    scale = width / total
    chunks = bp.plan.chunks
    chunk = chunks[0][1] if chunks else 0
    last = (f", the last of {_fmt_bytes(chunks[-1][1])}"
            if len(chunks) > 1 and chunks[-1][1] != chunk else "")
    over = [(off, size) for off, size in chunks if size > plan.limit] if word == "MR" else []
    head = (f"{spec.name}: {_fmt_bytes(spec.nbytes)}, {bp.plan.calls} {word}(s) of "
            f"{_fmt_bytes(chunk)}{last}")
    unit = (f"unit {_fmt_bytes(bp.unit) if bp.unit is not None else 'none'}, "
            f"{bp.straddle_count} straddling page extent(s)")
    y = top + 12
    out = [_text(x0, y, head, 12, colour=BAD_PAGE if over else "#111", cls="buffer-head")]
    y += _height(head, 12) + 14
    out.append(_text(x0, y, unit, 11, colour=BAD_PAGE if bp.straddle_count else "#111"))
    y += _height(unit, 11) + 6     # the bar's top; seam lines reach 4 above and below it
    for i, region in enumerate(spec.regions):
        x = x0 + region.offset * scale
        out.append(_rect(x, y, region.nbytes * scale, BAR_H,
                         REGION_COLOURS[i % len(REGION_COLOURS)], "region", region.name))
        if region.nbytes * scale > 60:
            out.append(_text(x + 3, y + BAR_H - 8, region.name, 10))
    if plan.families is not None:
        for r in bp.hits.rows[:MAX_MARKS]:
            _, off, size, page = extent_at(plan.families, r)
            out.append(_rect(x0 + off * scale, y - 2, max(size * scale, 2.0), BAR_H + 4,
                             BAD_PAGE, "straddle", f"page {page} at {_fmt_bytes(off)}"))
    for off, size in over[:MAX_OVER]:
        out.append(f'<rect class="over-limit" x="{x0 + off * scale:.2f}" y="{y - 3:.1f}" '
                   f'width="{max(size * scale, 1.0):.2f}" height="{BAR_H + 6:.1f}" '
                   f'fill="none" stroke="{BAD_PAGE}" stroke-width="3"><title>'
                   f'{escape(f"MR of {size} bytes above the MR limit {plan.limit}")}'
                   "</title></rect>")
    seams = bp.plan.seams
    step = max(1, -(-len(seams) // MAX_SEAM_LINES))
    for seam in seams[::step]:
        out.append(_seam_line(x0 + int(seam) * scale, y - 4, y + BAR_H + 4, 1.5,
                              f"seam at {int(seam)} ({_fmt_bytes(int(seam))})"))
    notes = []
    if len(seams):
        labelled = ", ".join(_fmt_bytes(int(s)) for s in seams[:3])
        notes.append(f"seams at {labelled}{', ...' if len(seams) > 3 else ''}")
    if step > 1:
        notes.append(f"every {step}th of {len(seams)} seams drawn")
    if bp.straddle_count > MAX_MARKS:
        notes.append(f"first {MAX_MARKS} of {bp.straddle_count} straddling pages marked")
    if over:
        notes.append(f"{len(over)} {word}(s) above the MR limit {_fmt_bytes(plan.limit)}")
    if bp.note:
        notes.append(bp.note.replace("one call", "one MR") if word == "MR" else bp.note)
    below = y + BAR_H + 16
    for note in notes:
        out.append(_text(x0, below, note, 10, cls="note"))
        below += _height(note, 10) + _lead(10)
    return out, below - _lead(10) + 4


def _near(families: Sequence[ExtentFamily], buffer: int, seam: int
          ) -> list[tuple[int, int, int]]:
    """(offset, size, page) of up to 8 page extents of ``buffer`` nearest ``seam``."""
    cands: list[tuple[int, int, int]] = []
    edge = np.array([seam], dtype=np.int64)
    for f in families:
        if f.buffer != buffer or not f.count or not f.base <= seam <= f.span_end:
            continue
        pages = touching_pages(f, edge)
        lo, hi = int(pages.min()), int(pages.max())
        for p in range(max(lo - 3, 0), min(hi + 3, f.count - 1) + 1):
            cands.append((f.offset(p), f.size, p))
    cands.sort(key=lambda c: abs(c[0] - seam))
    return sorted(set(cands[:8]))


def _zoom(plan: PoolPlan, bp: BufferPlan, seam: int, x0: float, top: float,
          title: str) -> tuple[list[str], float]:
    """The pages around ``seam`` from ``top`` down; the elements and the y below."""
    assert plan.families is not None
    near = _near(plan.families, bp.index, seam)
    if not near:
        return [], top
    y = top + 11 + _height(title, 11) + 6
    lo = min(min(o for o, _, _ in near), seam)
    hi = max(max(o + s for o, s, _ in near), seam + 1)
    scale = (PANEL_W - 2 * MARGIN) / max(hi - lo, 1)
    out = [_text(x0, top + 11, title, 11)]
    for off, size, page in near:
        x = x0 + (off - lo) * scale
        bad = off < seam < off + size
        colour = BAD_PAGE if bad else OK_PAGE
        out.append(_rect(x, y, size * scale - 1, ZOOM_H, colour, "zoom-page",
                         f"page {page}: [{off}, {off + size})"))
        if size * scale > 50:
            out.append(_text(x + 3, y + ZOOM_H / 2 + 4, f"page {page}", 10,
                             colour="#fff" if bad else "#111"))
    x = x0 + (seam - lo) * scale
    out.append(_seam_line(x, y - 4, y + ZOOM_H + 4, 2, f"seam at {seam}"))
    label = f"seam at {seam} ({_fmt_bytes(seam)})"
    # centred on the seam, but never past the panel's edges
    half = len(label) * 10 * CHAR_EM / 2
    cx = min(max(x, x0 + half), x0 + TEXT_W - half)
    out.append(_text(cx, y + ZOOM_H + 16, label, 10, "middle"))
    return out, y + ZOOM_H + 20


def _zoom_targets(plan: PoolPlan) -> list[tuple[BufferPlan, int, bool]]:
    """(buffer, seam, cuts a page) in order: seams that cut a page first, then clean seams."""
    bad: list[tuple[BufferPlan, int, bool]] = []
    clean: list[tuple[BufferPlan, int, bool]] = []
    for bp in plan.buffers:
        cut = sorted(set(bp.hits.seams))
        bad += [(bp, s, True) for s in cut]
        clean += [(bp, int(s), False) for s in bp.plan.seams[:4] if int(s) not in cut]
    return bad + clean if bad else clean


def _panel(plan: PoolPlan, x0: float, max_zooms: int, mr: bool,
           top: float = 44.0) -> tuple[list[str], float]:
    word = "MR" if mr else "call"
    over = plan.over_limit() if mr else 0
    head = (f"{plan.algorithm}: {plan.calls} {word}(s), largest {_fmt_bytes(plan.largest)}, "
            + (f"{over} above the MR limit, " if mr else "")
            + f"{plan.straddling_count} straddling page extent(s)")
    body = [_text(x0, top, head, 12, colour=BAD_PAGE if plan.straddling_count or over
                  else "#111", cls="panel-head")]
    y = top + _height(head, 12) + 14
    for bp in plan.buffers:
        bar, y = _buffer_bar(plan, bp, x0, y, word)
        body += bar
        y += 16
    if plan.families is not None:
        targets = _zoom_targets(plan)
        shown = targets[:max_zooms]
        for bp, seam, cuts in shown:
            zoom, y = _zoom(plan, bp, seam, x0, y,
                            f"zoom: {bp.spec.name} around seam {_fmt_bytes(seam)}"
                            + (" - a page crosses it" if cuts else " - pages meet it cleanly"))
            body += zoom
            y += 10
        # every seam of the plan that has no zoom, counted the same way in every panel
        seams = sum(len(bp.plan.seams) for bp in plan.buffers)
        more = seams - len({(bp.index, seam) for bp, seam, _ in shown})
        if more > 0:
            note = (f"{more} more seam(s) not zoomed"
                    + (" (seams that cut a page come first)" if targets[0][2] else ""))
            body.append(_text(x0, y + 4, note, 10, cls="note more-seams"))
            y += _height(note, 10) + 20
    return body, y


def _legend(y: float, mr: bool = False) -> list[str]:
    items = [(REGION_COLOURS[0], "buffer region (K/V half, layer slab)"),
             (BAD_PAGE, "page extent that crosses a seam"
              + (" / MR above the MR limit (outline)" if mr else "")),
             (OK_PAGE, "page extent inside one " + ("MR" if mr else "chunk") + " (zooms)")]
    out = []
    x = MARGIN
    for colour, label in items:
        out.append(_rect(x, y - 10, 12, 12, colour, "legend"))
        out.append(_text(x + 16, y, label, 10))
        x += 28 + 7 * len(label)
    out.append(f'<line class="legend" x1="{x:.1f}" y1="{y - 10:.1f}" x2="{x:.1f}" '
               f'y2="{y + 2:.1f}" stroke="{SEAM}" stroke-width="2"/>')
    out.append(_text(x + 6, y, "chunk seam", 10))
    return out


def render_svg(plans: PoolPlan | Sequence[PoolPlan], *, max_zooms: int = 4,
               mr: bool = False) -> str:
    """The SVG document: one panel per plan (algorithm), side by side, and a legend;
    ``mr``: the plans are Mooncake MRs under an MR limit."""
    group = [plans] if isinstance(plans, PoolPlan) else list(plans)
    if not group:
        raise ValueError("render_svg needs at least one plan")
    g = group[0].geometry
    width = PANEL_W * len(group) + MARGIN
    title = (f"kvreg plan: {g.pool_type} {g.layout}, {_fmt_bytes(g.total_nbytes)} in "
             f"{g.page_count} pages, {'MR' if mr else 'chunk'} limit "
             f"{_fmt_bytes(group[0].limit)}")
    body: list[str] = []
    height = 0.0
    for i, plan in enumerate(group):
        panel, y = _panel(plan, MARGIN + i * PANEL_W, max_zooms, mr,
                          top=44 + _height(title, 13, width - 2 * MARGIN))
        body += panel
        height = max(height, y)
    height += 40
    body += _legend(height - 12, mr)
    h = int(height)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
            f'viewBox="0 0 {width} {h}">')
    return "\n".join([head, '<rect width="100%" height="100%" fill="#ffffff"/>',
                      _text(MARGIN, 20, title, 13, width=width - 2 * MARGIN), *body,
                      "</svg>"]) + "\n"
