"""``kvreg plan``: choose a chunk limit before touching a machine.

Describes a pool on the command line (``kvreg plan mla layout=page_first_direct
layer_num=61 ...``), plans it under kvreg's reference, SGLang's upstream algorithm and the
byte-offset bug, and says for each: calls, largest call, calls at or above the 512 GiB
per-call ceiling, and the pages that would straddle a seam. With ``--mc-max-mr-size`` or
``--device-max-mr`` it plans Mooncake MRs instead: every plan is judged against the
effective MR limit (docs/mooncake-verbs.md §6.2; the released store rejects a larger MR with
-600, §1.6), and the CUDA per-call ceiling does not apply.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvreg.harness.plan.chunking import ALGORITHMS, PlanError, PoolPlan, plan_pool
from kvreg.harness.plan.sizes import size_text
from kvreg.harness.pools import POOL_TYPES, GeometryError, make_geometry
from kvreg.harness.pools.families import extent_at
from kvreg.harness.run.targets import TARGETS, get_target
from kvreg.harness.scenario.size_limits import size_problem

from .arguments import UsageError, check_output_path, plain, positive_int
from .pipes import reader_safe

GiB = 1 << 30
CEILING_R580 = 512 * GiB


def _mr_limit() -> Any:
    """The effective MR limit of the target that registers RDMA memory regions (the one
    whose target object has ``effective_mr_limit``: its own knowledge, asked through the
    registry)."""
    for name in TARGETS:
        target: Any = get_target(name)
        if hasattr(target, "effective_mr_limit"):
            return target.effective_mr_limit
    raise UsageError("no target plans RDMA memory regions")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="plan the chunked registration of a pool described on the "
                                    "command line (no registration happens)",
                       description=plain(__doc__ or ""),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pool_type", choices=sorted(POOL_TYPES), help="pool type")
    p.add_argument("params", nargs="*", metavar="KEY=VALUE",
                   help="geometry parameters, e.g. layout=page_first layer_num=61 "
                        "dtype=bfloat16 page_size=64 page_num=100000 (JSON values allowed)")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--chunk-gb", type=positive_int, default=None,
                       help="SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB (default 256)")
    limit.add_argument("--limit-bytes", type=positive_int, help="chunk limit in bytes")
    limit.add_argument("--mc-max-mr-size", help="plan MRs: MC_MAX_MR_SIZE as in the environment")
    p.add_argument("--device-max-mr", type=positive_int, action="append", default=[],
                   help="plan MRs: a NIC's max_mr_size in bytes (repeatable; MC_MAX_MR_SIZE "
                        "unset unless --mc-max-mr-size is given)")
    p.add_argument("--fastdeploy-clamp", action="store_true",
                   help="with --mc-max-mr-size: FastDeploy's 1-6 GiB clamp")
    p.add_argument("--algorithm", choices=[*ALGORITHMS, "all"], default="all")
    p.add_argument("--ceiling-gb", type=int, default=512,
                   help="per-call ceiling to flag (512 on R580+ drivers; 0 for none)")
    p.add_argument("--json", metavar="FILE", help="write the plan as JSON ('-' for stdout)")
    p.add_argument("--svg", metavar="FILE",
                   help="draw the plans (every requested algorithm, side by side) as SVG")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_params(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PlanError(f"parameter {item!r} is not KEY=VALUE")
        out[key] = _value(value)
    return out


def _summary(plan: PoolPlan, ceiling: int | None, mr: bool) -> str:
    """One plan's line: its registrations, the largest, and what is wrong with it."""
    problems = []
    if mr:
        over = plan.over_limit()
        if over:
            problems.append(f"{over} MR(s) above the effective MR limit {size_text(plan.limit)}"
                            ": the released store's register_buffer returns -600 "
                            "(INVALID_PARAMS) for each and registers nothing (head splits "
                            "it, docs/mooncake-verbs.md §1.6)")
    else:
        over = plan.over_ceiling(ceiling)
        if over:
            problems.append(f"{over} call(s) at or above the "
                            f"{ceiling // GiB if ceiling else 0} GiB per-call ceiling: "
                            "cudaHostRegister returns 2 (out of memory) on R580+")
    if plan.straddling_count:
        assert plan.families is not None
        first = next(b for b in plan.buffers if b.straddle_count)
        _, off, _, page = extent_at(plan.families, first.hits.rows[0])
        seam = "an MR seam" if mr else "a seam"
        problems.append(f"{plan.straddling_count} page extent(s) straddle {seam}, first: page "
                        f"{page} of {first.spec.name} at offset {off}")
    verdict = "OK" if not problems else "; ".join(problems)
    word = "MRs" if mr else "calls"
    return f"{plan.algorithm:<12} {word}={plan.calls:<6} largest={plan.largest:<16} {verdict}"


def _legend(mr: bool) -> str:
    if mr:
        return ("legend: MRs = memory regions the plan registers; largest = bytes of the "
                "largest MR; first/last = the first and last MR of a buffer; OK = no MR above "
                "the effective MR limit and no page extent across an MR seam")
    return ("legend: calls = cudaHostRegister calls the plan makes; largest = bytes of the "
            "largest call; first/last = the first and last call of a buffer; OK = no call at or "
            "above the per-call ceiling and no page extent across a seam")


def run(args: argparse.Namespace) -> int:
    try:
        check_output_path(args.json, "--json", stdout_ok=True)
        check_output_path(args.svg, "--svg")
        geometry = make_geometry(args.pool_type, **parse_params(args.params))
        too_big = size_problem(geometry)
        if too_big:
            raise PlanError(too_big)
        mr = args.mc_max_mr_size is not None or bool(args.device_max_mr)
        if mr and (args.chunk_gb is not None or args.limit_bytes is not None):
            raise UsageError("--device-max-mr plans MRs: it cannot be combined with "
                             "--chunk-gb or --limit-bytes (CUDA chunk limits)")
        if args.fastdeploy_clamp and not mr:
            raise UsageError("--fastdeploy-clamp needs --mc-max-mr-size or --device-max-mr")
        if mr:
            limit = _mr_limit()(args.mc_max_mr_size, args.device_max_mr,
                                fastdeploy_clamp=args.fastdeploy_clamp)
        elif args.limit_bytes is not None:
            limit = args.limit_bytes
        else:
            limit = (args.chunk_gb or 256) * GiB
        algorithms = ALGORITHMS if args.algorithm == "all" else (args.algorithm,)
        plans = [plan_pool(geometry, limit, a) for a in algorithms]
    except (GeometryError, PlanError, UsageError) as exc:
        print(f"kvreg plan: error: {exc}", file=sys.stderr)
        return 2
    ceiling = None if mr or args.ceiling_gb <= 0 else args.ceiling_gb * GiB
    what = "effective MR limit" if mr else "chunk limit"
    # stdout holds only the JSON with --json -; a reader that leaves early (| head) does not
    # stop the --json and --svg files below from being written
    stdout = reader_safe()
    out = sys.stderr if args.json == "-" else stdout
    print(f"{geometry.pool_type} {geometry.layout}: {len(geometry.buffers())} buffer(s), "
          f"{geometry.total_nbytes} bytes, {geometry.page_count} pages; {what} {limit}"
          + (f" ({size_text(limit)})" if limit >= 1 << 10 else ""), file=out)
    for plan in plans:
        print(_summary(plan, ceiling, mr), file=out)
        for bp in plan.buffers:
            d = bp.as_dict(plan.families, limit_rows=3)
            word = "MRs" if mr else "calls"
            note = d["note"].replace("one call", "one MR") if mr else d["note"]
            sizes = (f" first={size_text(bp.plan.chunks[0][1])} "
                     f"last={size_text(bp.plan.chunks[-1][1])}" if bp.plan.chunks else "")
            print(f"    {d['buffer']:<24} bytes={d['nbytes']:<16} "
                  f"upstream_G={d['upstream_granularity']} copy_unit={d['copy_unit']} "
                  f"chunk={d['chunk']} {word}={d['calls']}{sizes}"
                  + (f"  ({note})" if note else ""), file=out)
    print(_legend(mr), file=out)
    if args.json:
        doc: dict[str, Any] = {
            "geometry": geometry.describe(), "chunk_limit": limit,
            "limit_kind": "mr" if mr else "chunk", "per_call_ceiling": ceiling,
            "plans": [dict(p.as_dict(), over_ceiling=p.over_ceiling(ceiling),
                           over_limit=p.over_limit()) for p in plans]}
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            stdout.write(text + "\n")
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    if args.svg:
        from kvreg.harness.plan.svg import render_svg

        with open(args.svg, "w") as fh:
            fh.write(render_svg(plans, mr=mr))
    stdout.flush()
    return 0
