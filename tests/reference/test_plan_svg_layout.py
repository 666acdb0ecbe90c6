"""The plan SVG's text stays in its panel and no two lines or bars are drawn over each other.

A pool of many buffers with long names and sizes used to run each buffer's heading across the
next panel (the text had no width) and, with four or more notes, into the next buffer's
heading (the rows had a fixed height). The geometry here is measured with DejaVu Sans Mono's
advance (0.602 em), the face ``monospace`` resolves to on the usual renderers.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from kvreg.harness.mooncake.reference import effective_mr_limit
from kvreg.harness.plan.chunking import ALGORITHMS, plan_pool
from kvreg.harness.plan.svg import MARGIN, PANEL_W, render_svg
from kvreg.harness.pools import make_geometry

NS = "{http://www.w3.org/2000/svg}"
EM = 0.602
GiB = 1 << 30


@dataclass(frozen=True)
class Box:
    x0: float
    x1: float
    y0: float
    y1: float
    what: str

    def overlaps(self, other: Box) -> bool:
        return (self.x0 < other.x1 and other.x0 < self.x1
                and self.y0 < other.y1 and other.y0 < self.y1)


def text_boxes(root: ET.Element) -> list[Box]:
    """One box per drawn line (a <text> and each of its <tspan> continuation lines)."""
    boxes = []
    for t in root.iter(f"{NS}text"):
        size = float(t.get("font-size", "11"))
        x, y = float(t.get("x", "0")), float(t.get("y", "0"))
        lines = [(x, y, t.text or "")]
        for span in t.findall(f"{NS}tspan"):
            y += float(span.get("dy", "0"))
            lines.append((float(span.get("x", x)), y, span.text or ""))
        for lx, ly, s in lines:
            w = len(s) * size * EM
            left = lx - w / 2 if t.get("text-anchor") == "middle" else lx
            # ascent ~0.76 em, descent ~0.24 em
            boxes.append(Box(left, left + w, ly - 0.76 * size, ly + 0.24 * size, s))
    return boxes


def bars(root: ET.Element) -> list[Box]:
    out = []
    for r in root.iter(f"{NS}rect"):
        if r.get("class") in ("region", "zoom-page"):
            x, y = float(r.get("x", "0")), float(r.get("y", "0"))
            out.append(Box(x, x + float(r.get("width", "0")), y,
                           y + float(r.get("height", "0")), r.get("class", "")))
    return out


def layout_problems(svg: str, panels: int) -> list[str]:
    root = ET.fromstring(svg)
    texts, rects = text_boxes(root), bars(root)
    problems = []
    body = [b for b in texts if b.y0 > 30 and not b.what.startswith("kvreg plan:")]
    legend_y = max(b.y0 for b in texts) - 1
    for b in body:
        if b.y0 >= legend_y:
            continue                                    # the legend row spans the page
        panel = int((b.x0 - MARGIN) // PANEL_W)
        right = MARGIN + panel * PANEL_W + PANEL_W - MARGIN
        if not 0 <= panel < panels or b.x1 > right + 1:
            problems.append(f"runs past its panel: {b.what!r} ends at {b.x1:.0f} > {right}")
    for i, a in enumerate(body):
        for b in body[i + 1:]:
            if a.overlaps(b):
                problems.append(f"lines overprint: {a.what!r} / {b.what!r}")
    for b in body:
        for r in rects:
            inside = r.x0 <= b.x0 and b.x1 <= r.x1 + 60 and r.y0 <= b.y0 and b.y1 <= r.y1
            if not inside and b.overlaps(r):   # region/page names are drawn inside bars
                problems.append(f"text over a bar: {b.what!r}")
    return problems


def _many_buffers() -> object:
    return make_geometry("mamba", layout="page_first", num_mamba_layers=36,
                         temporal_shape=[16, 64, 64], temporal_dtype="float16",
                         conv_shapes=[[3, 2048], [3, 512], [3, 256], [3, 128]],
                         conv_dtype="bfloat16", page_num=300_000)


def test_many_buffers_stay_in_their_panels_and_rows() -> None:
    g = _many_buffers()
    plans = [plan_pool(g, GiB, a) for a in ALGORITHMS]
    assert len(plans[0].buffers) == 5
    assert layout_problems(render_svg(plans), len(plans)) == []


def test_mr_mode_notes_do_not_reach_the_next_buffer() -> None:
    """MR mode adds an over-limit note to the seams/drawn/marked notes: five rows under a
    bar used to run into the next buffer's heading."""
    g = _many_buffers()
    limit = effective_mr_limit("1073741824", [])
    plans = [plan_pool(g, limit, a) for a in ALGORITHMS]
    assert layout_problems(render_svg(plans, mr=True), len(plans)) == []


@pytest.mark.parametrize("bad", ["past the panel", "fixed rows"])
def test_the_check_catches_both_overprints(bad: str) -> None:
    """The check itself: a heading wider than the panel, and a note drawn on the next row."""
    head = ("x" * 200) if bad == "past the panel" else "short"
    svg = ('<svg xmlns="http://www.w3.org/2000/svg">'
           f'<text x="20" y="50" font-size="12">{head}</text>'
           '<text x="20" y="90" font-size="10">a note under the bar</text>'
           f'<text x="20" y="{92 if bad == "fixed rows" else 120}" font-size="12">next</text>'
           '<text x="20" y="500" font-size="10">legend</text></svg>')
    problems = layout_problems(svg, 2)
    assert problems and (("runs past" in problems[0]) == (bad == "past the panel"))
