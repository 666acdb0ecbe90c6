"""What one rank does per call in benchmarks/test_bench_ranks.py: some tensor work of the
size of a small scenario, then the agreement real rank code reaches (a MIN all-reduce) and a
barrier. Run inside rank processes as ``benchmarks.rank_work:work``."""

from __future__ import annotations

import torch
import torch.distributed as dist


def work(rounds: int) -> int:
    data = torch.arange(1 << 16, dtype=torch.int64)
    total = 0
    for shift in range(rounds):
        total += int((data >> (shift % 8)).sum().item())
    agreed = torch.tensor([total % 1000], dtype=torch.int64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    dist.barrier()
    return int(agreed.item())
