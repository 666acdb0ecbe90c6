"""Registration throughput: one whole-buffer call, kvreg's reference, chunk sizes, threads.

The questions come from the field (docs/cuda-runtime.md §10, §12.10): pinning costs about
0.1 s per GB, so how much does chunking cost against one call (design target: the
reference within 10 % of it), which chunk size is best, and does registering chunks from
several threads help or hurt (vLLM #42632 says it hurts)? Every number is measured on
*prefaulted* memory, so page faults do not pollute it, and each registration is undone
before the next one.

On real hardware the unit is a GiB (chunks of 1 to 64 GiB, bounded by available memory).
On the fake the same code runs in MiB units as a smoke test: the numbers then measure
kvreg's fake, and the result says so. Nothing here asserts on time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from xml.sax.saxutils import escape

from kvreg.harness.cuda import reference

from .memory import available_memory, prefaulted

__all__ = ["measure", "plan_sizes", "render_svg"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CHUNK_UNITS = (1, 2, 4, 8, 16, 32, 64)
THREADS = (1, 2, 4, 8)
PAGE = 4096


def _code(result: Any) -> int:
    return int(result[0]) if isinstance(result, tuple) else int(result)


def plan_sizes(unit: int, *, max_units: int = 64, available: int | None = None,
               headroom: int = 8 * GiB) -> int:
    """Units of buffer to measure: the largest power of two ≤ ``max_units`` that fits.

    0 when not even one unit fits next to ``headroom`` bytes of free memory.
    """
    avail = available_memory() if available is None else available
    fits = max((avail - headroom) // unit, 0)
    n = 1
    while n * 2 <= min(fits, max_units):
        n *= 2
    return n if fits >= 1 else 0


class _Timer:
    """Register ranges through one runtime face and time it; undo after every run."""

    def __init__(self, rt: Any, ptr: int) -> None:
        self.rt = rt
        self.ptr = ptr

    def unregister(self, ranges: Sequence[tuple[int, int]]) -> float:
        start = time.perf_counter()
        for base, _ in ranges:
            self.rt.cudaHostUnregister(base)
        return time.perf_counter() - start

    def chunks(self, total: int, chunk: int, threads: int = 1) -> dict[str, Any]:
        ranges = [(self.ptr + off, min(chunk, total - off)) for off in range(0, total, chunk)]
        codes: list[int] = []

        def one(r: tuple[int, int]) -> int:
            return _code(self.rt.cudaHostRegister(r[0], r[1], 0))

        start = time.perf_counter()
        if threads == 1:
            codes = [one(r) for r in ranges]
        else:
            with ThreadPoolExecutor(threads) as pool:
                codes = list(pool.map(one, ranges))
        seconds = time.perf_counter() - start
        done = [r for r, c in zip(ranges, codes, strict=True) if c == 0]
        undo = self.unregister(done)
        bad = next((c for c in codes if c), 0)
        return _row(total, seconds, undo, calls=len(ranges), code=bad)

    def reference(self, total: int, chunk_limit: int) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            ranges = reference.register(self.rt, self.ptr, total, granularity=PAGE,
                                        chunk_limit=chunk_limit)
        except reference.RegistrationError as exc:
            return _row(total, time.perf_counter() - start, 0.0, calls=0, code=exc.code)
        seconds = time.perf_counter() - start
        calls = len(ranges)
        undo = time.perf_counter()
        reference.teardown(self.rt, ranges)    # empties ``ranges`` on success
        return _row(total, seconds, time.perf_counter() - undo, calls=calls, code=0)


def _row(total: int, seconds: float, undo: float, *, calls: int, code: int) -> dict[str, Any]:
    gib = total / GiB
    return {"bytes": total, "calls": calls, "code": code, "seconds": seconds,
            "unregister_seconds": undo,
            "gib_per_s": (gib / seconds) if seconds > 0 and code == 0 else None,
            "seconds_per_gib": (seconds / gib) if gib and code == 0 else None}


def measure(backend: Any, *, unit: int = GiB, max_units: int = 64,
            chunk_units: Sequence[int] = CHUNK_UNITS, threads: Sequence[int] = THREADS,
            repeat: int = 1, available: int | None = None) -> dict[str, Any]:
    """Measure registration throughput through ``backend.runtime``; a JSON-ready dict.

    ``unit`` is GiB on hardware and MiB for the fake's smoke test. Each figure is the best
    of ``repeat`` runs. A machine without room for one unit gets ``skipped`` with the reason.
    """
    is_fake = not hasattr(backend, "release_all")
    headroom = 0 if is_fake else 8 * GiB
    units = plan_sizes(unit, max_units=max_units, available=available, headroom=headroom)
    out: dict[str, Any] = {
        "backend": "fake" if is_fake else "real", "unit_bytes": unit,
        "note": ("measured kvreg's fake CUDA runtime in MiB units (a smoke test of the "
                 "measurement code), not hardware") if is_fake else
                "measured on real hardware with prefaulted anonymous memory",
        "skipped": None}
    if units == 0:
        out["skipped"] = (f"not enough free host memory for one {unit // MiB} MiB unit plus "
                          f"{headroom // GiB} GiB headroom")
        return out
    total = units * unit
    prefault = time.perf_counter()
    buf = prefaulted(total)
    out["prefault_seconds"] = time.perf_counter() - prefault
    backend.track(buf, name="measure")
    timer = _Timer(backend.runtime, int(buf.ctypes.data))

    def best(fn: Any, *args: Any) -> dict[str, Any]:
        rows = [fn(*args) for _ in range(max(repeat, 1))]
        ok = [r for r in rows if r["code"] == 0]
        return min(ok, key=lambda r: r["seconds"]) if ok else rows[0]

    try:
        # the first call on real hardware also creates the CUDA context: keep it out of
        # every figure
        timer.chunks(unit, unit)
        out["total_bytes"] = total
        out["whole"] = best(timer.chunks, total, total)
        ref_limit = max(unit, min(16 * unit, total // 2))
        out["reference"] = {**best(timer.reference, total, ref_limit),
                            "chunk_limit": ref_limit}
        out["chunks"] = [{"chunk_bytes": c * unit, **best(timer.chunks, total, c * unit)}
                         for c in chunk_units if c * unit <= total]
        thread_chunk = max(unit, total // 8)
        out["threads"] = [{"threads": n, "chunk_bytes": thread_chunk,
                           **best(timer.chunks, total, thread_chunk, n)} for n in threads]
        whole, ref = out["whole"]["gib_per_s"], out["reference"]["gib_per_s"]
        out["reference_vs_whole"] = (ref / whole) if whole and ref else None
    finally:
        release = getattr(backend, "release_all", None)
        if release is not None:
            release()
        space = getattr(backend, "space", None)
        if space is not None:
            space.forget(int(buf.ctypes.data))
    return out


# -- the plot ------------------------------------------------------------------------------------

def _fmt(n: int) -> str:
    return f"{n // GiB} GiB" if n >= GiB else f"{n // MiB} MiB"


def render_svg(result: dict[str, Any], *, title: str = "") -> str:
    """GiB/s against chunk size (log scale), with the whole-buffer call and the reference.

    Written by hand so the tier needs no plotting library.
    """
    w, h, left, right, top, bottom = 720, 380, 70, 20, 40, 60
    chunks = [c for c in result.get("chunks", []) if c.get("gib_per_s")]
    marks = [r for r in (result.get("whole"), result.get("reference"))
             if r and r.get("gib_per_s")]
    values = [c["gib_per_s"] for c in chunks] + [r["gib_per_s"] for r in marks]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" font-family="monospace" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="13">'
             f'{escape(title or "pinned GiB/s by chunk size")}</text>']
    if not chunks:
        reason = result.get("skipped") or "no successful measurement"
        parts.append(f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle">'
                     f'{escape(str(reason))}</text></svg>')
        return "\n".join(parts)
    top_v = float(max(values)) * 1.15
    n = len(chunks)
    pw, ph = w - left - right, h - top - bottom

    def x(i: int) -> float:
        return left + (pw * (i + 0.5) / n)

    def y(v: float) -> float:
        return top + ph - ph * v / top_v

    parts.append(f'<line x1="{left}" y1="{top + ph}" x2="{w - right}" y2="{top + ph}" '
                 'stroke="#333"/>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>')
    for k in range(5):
        v = top_v * k / 4
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}'
                     '</text>')
        parts.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" '
                     'stroke="#eee"/>')
    points = " ".join(f"{x(i):.1f},{y(c['gib_per_s']):.1f}" for i, c in enumerate(chunks))
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" '
                 'stroke-width="2"/>')
    for i, c in enumerate(chunks):
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(c["gib_per_s"]):.1f}" r="4" '
                     f'fill="#1f77b4"><title>{_fmt(c["chunk_bytes"])}: '
                     f'{c["gib_per_s"]:.2f} GiB/s</title></circle>')
        parts.append(f'<text x="{x(i):.1f}" y="{top + ph + 16}" text-anchor="middle">'
                     f'{_fmt(c["chunk_bytes"])}</text>')
    for label, colour, row in (("whole buffer", "#d62728", result.get("whole")),
                               ("reference", "#2ca02c", result.get("reference"))):
        if row and row.get("gib_per_s"):
            yy = y(row["gib_per_s"])
            parts.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{w - right}" y2="{yy:.1f}" '
                         f'stroke="{colour}" stroke-dasharray="6 4"/>')
            parts.append(f'<text x="{w - right - 4}" y="{yy - 4:.1f}" text-anchor="end" '
                         f'fill="{colour}">{label} {row["gib_per_s"]:.2f} GiB/s</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 20}" text-anchor="middle">chunk size '
                 f'(buffer {_fmt(int(result.get("total_bytes", 0)))}; {result["backend"]})'
                 '</text>')
    parts.append(f'<text x="16" y="{top + ph / 2}" transform="rotate(-90 16 {top + ph / 2})" '
                 'text-anchor="middle">GiB/s pinned</text>')
    parts.append("</svg>")
    return "\n".join(parts)
