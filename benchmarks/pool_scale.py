"""One 4 TiB pool of one bundled type and layout: register + copy-validate + teardown.

``python pool_scale.py POOL_FILE LAYOUT PAGE_SIZE`` loads the pool parameters of a bundled
``huge*.toml`` file, sets the layout and page size (0 keeps the file's), sizes the pool to
4 TiB, then plans, registers in 1 GiB chunks (256 GiB where a layer slab without page
rows cannot be cut finer; kvreg's reference), copy-validates through the
fake's ``cudaMemcpyBatchAsync`` and tears down. Prints one JSON line: seconds per phase, the
pages and the pages copied, and the peak RSS growth over the process after imports (/proc
VmHWM). ``python pool_scale.py --plan PAGES`` plans (and draws) a pool of PAGES pages instead.
``python pool_scale.py --mooncake POOL_FILE PAGE_SIZE`` runs every scenario of a Mooncake
``huge*.toml`` file through the runner with kvreg's reference (register, the store round trip
and PD writes over the pages that decide, teardown), its pool at 4 TiB with that page size.
"""

from __future__ import annotations

import json
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

# imported before the clock, as in every CUDA run (the faces patch torch.cuda.cudart and the
# pool's buffers are tensors), so the figures are the pipeline's, not torch's import
import torch  # noqa: F401

from kvreg.fakes import FakeCuda
from kvreg.harness.cuda.reference import register, teardown
from kvreg.harness.cuda.transfers import copy_every_page
from kvreg.harness.plan.chunking import ALGORITHMS, PlanError, plan_pool
from kvreg.harness.plan.svg import render_svg
from kvreg.harness.pools import make_geometry
from kvreg.harness.pools.buffers import allocate
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import load_file

GiB = 1 << 30
TiB = 1 << 40


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def pool(path: Path, layout: str, page_size: int) -> Any:
    data = tomllib.loads(path.read_text())
    kind = data["pool"]["type"]
    params = {**data["pool"]["params"], "layout": layout}
    if page_size and "page_size" in params:
        params["page_size"] = page_size
    one = make_geometry(kind, **params, page_num=1).total_nbytes
    per_page = make_geometry(kind, **params, page_num=2).total_nbytes - one
    return make_geometry(kind, **params, page_num=(4 * TiB - one) // per_page + 1)


def scale(path: Path, layout: str, page_size: int) -> dict[str, Any]:
    base_rss = _status_kib("VmHWM")
    t0 = time.perf_counter()
    geometry = pool(path, layout, page_size)
    try:
        limit = GiB
        plan = plan_pool(geometry, limit, "reference")
    except PlanError:   # a layer slab above 1 GiB and no page rows to cut it: the file's limit
        limit = 256 * GiB
        plan = plan_pool(geometry, limit, "reference")
    fake = FakeCuda()
    buffers = allocate(geometry, fake.space)
    t1 = time.perf_counter()
    done = [register(fake.torch, int(buffers[bp.index].data_ptr()), bp.spec.nbytes,
                     granularity=bp.unit, chunk_limit=limit) for bp in plan.buffers]
    t2 = time.perf_counter()
    live = [(r.base, r.size) for r in fake.live_registrations()]
    result = copy_every_page(fake.runtime, geometry, buffers, registrations=live,
                             fault_detail=lambda: fake.cuda_runtime.last_copy_fault)
    t3 = time.perf_counter()
    assert result.ok, result
    for ranges in reversed(done):
        teardown(fake.torch, ranges)
    t4 = time.perf_counter()
    assert not fake.live_registrations()
    return {"pool": geometry.pool_type, "layout": layout, "page_size": geometry.page_size,
            "pages": geometry.page_count, "chunk_limit": limit, "calls": plan.calls,
            "pages_copied": result.coverage.get("pages_copied", 0),
            "extents": result.coverage.get("pages_total", 0), "plan_s": t1 - t0,
            "register_s": t2 - t1, "copy_validate_s": t3 - t2, "teardown_s": t4 - t3,
            "total_s": t4 - t0, "peak_rss_growth_mb": (_status_kib("VmHWM") - base_rss) / 1024}


def plan_only(pages: int) -> dict[str, Any]:
    """kvreg plan of a pool of ``pages`` one-token pages, all algorithms, with the SVG."""
    base_rss = _status_kib("VmHWM")
    t0 = time.perf_counter()
    geometry = make_geometry("mha", layout="layer_first", layer_num=1, head_num=1, head_dim=64,
                             dtype="bfloat16", page_size=1, page_num=pages)
    plans = [plan_pool(geometry, 256 * GiB, a) for a in ALGORITHMS]
    svg = render_svg(plans)
    t1 = time.perf_counter()
    return {"pages": pages, "calls": [p.calls for p in plans], "svg_bytes": len(svg),
            "plan_s": t1 - t0, "peak_rss_growth_mb": (_status_kib("VmHWM") - base_rss) / 1024}


def mooncake_scale(path: Path, page_size: int) -> dict[str, Any]:
    """Every scenario of a Mooncake huge file, its pool resized to 4 TiB of ``page_size``."""
    base_rss = _status_kib("VmHWM")
    t0 = time.perf_counter()
    impl = make_implementation()
    pages = copied = 0
    verdicts = []
    for sc in load_file(path, path.parent.parent):
        geometry = pool(path, str(sc.params["layout"]), page_size)
        res = run_scenario(replace(sc, params=geometry.params()), impl)
        assert res.verdict == "pass", (sc.id, res.verdict, res.reason, res.violations)
        verdicts.append(res.verdict)
        pages = geometry.page_count
        copied = max(copied, int(res.copy["pages_copied"]) if res.copy else 0)
    t1 = time.perf_counter()
    return {"pool": path.stem, "page_size": page_size, "pages": pages, "scenarios": len(verdicts),
            "pages_copied": copied, "total_s": t1 - t0,
            "peak_rss_growth_mb": (_status_kib("VmHWM") - base_rss) / 1024}


def main(argv: list[str]) -> None:
    if argv[0] == "--plan":
        print(json.dumps(plan_only(int(argv[1]))))
    elif argv[0] == "--mooncake":
        print(json.dumps(mooncake_scale(Path(argv[1]), int(argv[2]))))
    else:
        print(json.dumps(scale(Path(argv[0]), argv[1], int(argv[2]))))


if __name__ == "__main__":
    main(sys.argv[1:])
