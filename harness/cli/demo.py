"""The PR #36798 demo: byte-offset chunk seams break page copies; page-aligned ones do not.

SGLang once registered big host pools in fixed-size chunks cut at arbitrary byte offsets.
A HiCache page that straddles a seam then spans two registrations, and the batched page
copy fails with "invalid argument" (docs/pools.md §5.2, docs/cuda-runtime.md §5.4). This
demo replays that on the fake with a DeepSeek-V3-shaped MLA page, then shows the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvreg.fakes.cuda.fake_cuda import FakeCuda

GiB = 1 << 30

# MLA DeepSeek-V3, bf16: C = 576, L = 61, P = 64 -> one page is 4,497,408 bytes (docs/pools.md
# §2.10)
PAGE_BYTES = 64 * 61 * 576 * 2


@dataclass
class DemoResult:
    label: str
    chunks: list[tuple[int, int]]
    code: int
    message: str


def byte_offset_chunks(total: int, limit: int, granularity: int | None) -> list[tuple[int, int]]:
    """The buggy plan: cut every ``limit`` bytes, whatever the page size."""
    return [(off, min(limit, total - off)) for off in range(0, total, limit)]


def page_aligned_chunks(total: int, limit: int, granularity: int | None) -> list[tuple[int, int]]:
    """The fix: cut at the largest multiple of the page size that fits the limit."""
    chunk = limit if not granularity else (limit // granularity) * granularity
    return [(off, min(chunk, total - off)) for off in range(0, total, chunk)]


def run_case(label: str, plan: Callable[[int, int, int | None], list[tuple[int, int]]],
             pages: int = 600, limit: int = GiB) -> DemoResult:
    fake = FakeCuda()
    rt = fake.runtime
    total = pages * PAGE_BYTES
    pool = fake.virtual(total, "uint8", name="mla_host_pool")
    base = pool.data_ptr()
    chunks = plan(total, limit, PAGE_BYTES)
    for off, size in chunks:
        (err,) = rt.cudaHostRegister(base + off, size, 0)
        assert int(err) == 0, err
    _, stream = rt.cudaStreamCreate()
    _, dev = rt.cudaMalloc(total)
    attrs = rt.cudaMemcpyAttributes()
    attrs.srcAccessOrder = rt.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream
    offsets = np.arange(pages, dtype=np.uint64) * PAGE_BYTES
    srcs = base + offsets
    dsts = dev + offsets
    sizes = np.full(pages, PAGE_BYTES, np.int64)
    (err, *_) = rt.cudaMemcpyBatchAsync(dsts, srcs, sizes, pages, [attrs], [0], 1, stream)
    code = int(err)
    fault = fake.cuda_runtime.last_copy_fault
    if code:
        _, text = rt.cudaGetErrorString(err)
        page = fault.index if fault else -1
        message = (f"cudaMemcpyBatchAsync failed. error={text.decode()}: page {page} "
                   f"[{page * PAGE_BYTES:#x}, {(page + 1) * PAGE_BYTES:#x}) of the pool "
                   f"spans the registrations at offsets "
                   + ", ".join(f"{r.base - base:#x}"
                               for r in (fault.registrations if fault else ())))
    else:
        message = f"all {pages} page copies accepted"
    for off, _ in reversed(chunks):
        rt.cudaHostUnregister(base + off)
    rt.cudaFree(dev)
    rt.cudaStreamDestroy(stream)
    return DemoResult(label, chunks, code, message)


def main() -> int:
    """Print both cases; exit 0 when the fake caught the bug and passed the fix."""
    print("kvreg demo: SGLang PR #36798, chunked cudaHostRegister of an MLA HiCache pool")
    print(f"  page = {PAGE_BYTES:,} bytes (DeepSeek-V3 bf16, 64 tokens x 61 layers), "
          f"pool = 600 pages, chunk limit = 1 GiB\n")
    results = [run_case("byte-offset chunks (the bug)", byte_offset_chunks),
               run_case("page-aligned chunks (the fix)", page_aligned_chunks)]
    for r in results:
        seams = ", ".join(f"{off:#x}" for off, _ in r.chunks[1:])
        verdict = "FAIL" if r.code else "pass"
        print(f"[{verdict}] {r.label}: {len(r.chunks)} registrations, seams at {seams}")
        print(f"       {r.message}")
    ok = results[0].code == 1 and results[1].code == 0
    print("\nThe fake caught the straddling page and passed the aligned plan." if ok
          else "\nUNEXPECTED: the fake did not tell the two plans apart.")
    return 0 if ok else 1
