"""Plan, register in 1 GiB chunks, batch-copy-validate every page and tear down a 4 TiB pool.

Run as a script so its peak RSS is its own: prints one JSON line with seconds per phase and
the peak RSS growth over the process's size after imports
(ARCHITECTURE.md#performance-targets: < 2 s, < 200 MB).
"""

from __future__ import annotations

import json
import time

# imported before the clock, as in every CUDA run (the faces patch torch.cuda.cudart and the
# pool's buffers are tensors), so the figures are the pipeline's, not torch's import
import torch  # noqa: F401

from kvreg.fakes import FakeCuda
from kvreg.harness.cuda.reference import register, teardown
from kvreg.harness.cuda.transfers import copy_every_page
from kvreg.harness.plan.chunking import plan_pool
from kvreg.harness.pools import make_geometry
from kvreg.harness.pools.buffers import allocate

GiB = 1 << 30
TiB = 1 << 40


def _status_kib(field: str) -> int:
    """VmRSS / VmHWM of this process (getrusage's maxrss can carry the parent's peak over
    fork + exec, so /proc is the honest source on Linux)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def main() -> None:
    base_rss = _status_kib("VmHWM")
    page = 64 * 61 * 576 * 2
    t0 = time.perf_counter()
    geometry = make_geometry("mla", layout="page_first_direct", layer_num=61, kv_lora_rank=512,
                             qk_rope_head_dim=64, dtype="bfloat16", page_size=64,
                             page_num=(4 * TiB) // page)
    plan = plan_pool(geometry, GiB, "reference")
    t1 = time.perf_counter()
    fake = FakeCuda()
    (buf,) = allocate(geometry, fake.space)
    spec = geometry.buffers()[0]
    ranges = register(fake.torch, buf.data_ptr(), spec.nbytes, granularity=spec.copy_unit,
                      chunk_limit=GiB)
    t2 = time.perf_counter()
    result = copy_every_page(fake.runtime, geometry, [buf])
    t3 = time.perf_counter()
    assert result.ok and result.copies == geometry.page_count, result
    teardown(fake.torch, ranges)
    t4 = time.perf_counter()
    assert not fake.live_registrations()
    peak = _status_kib("VmHWM")
    print(json.dumps({"pages": geometry.page_count, "calls": plan.calls,
                      "plan_s": t1 - t0, "register_s": t2 - t1, "copy_validate_s": t3 - t2,
                      "teardown_s": t4 - t3, "total_s": t4 - t0,
                      "peak_rss_growth_mb": (peak - base_rss) / 1024}))


if __name__ == "__main__":
    main()
