"""``kvreg plan``: choose a chunk limit before touching a machine.

Describes a pool on the command line (``kvreg plan mla layout=page_first_direct
layer_num=61 ...``), plans it under kvreg's reference, SGLang's upstream algorithm and the
byte-offset bug, and says for each: calls, largest call, calls at or above the 512 GiB
per-call ceiling, and the pages that would straddle a seam.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvreg.harness.mooncake.reference import effective_mr_limit
from kvreg.harness.plan.chunking import ALGORITHMS, PlanError, PoolPlan, plan_pool
from kvreg.harness.pools import POOL_TYPES, GeometryError, make_geometry
from kvreg.harness.pools.families import extent_at
from kvreg.harness.scenario.size_limits import size_problem

from .checks import UsageError, check_output_path, positive_int

GiB = 1 << 30
CEILING_R580 = 512 * GiB


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="plan the chunked registration of a pool described on the "
                                    "command line (no registration happens)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pool_type", choices=sorted(POOL_TYPES), help="pool type")
    p.add_argument("params", nargs="*", metavar="KEY=VALUE",
                   help="geometry parameters, e.g. layout=page_first layer_num=61 "
                        "dtype=bfloat16 page_size=64 page_num=100000 (JSON values allowed)")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--chunk-gb", type=positive_int, default=256,
                       help="SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB (default 256)")
    limit.add_argument("--limit-bytes", type=positive_int, help="chunk limit in bytes")
    limit.add_argument("--mc-max-mr-size", help="plan MRs: MC_MAX_MR_SIZE as in the environment")
    p.add_argument("--device-max-mr", type=int, action="append", default=[],
                   help="a NIC's max_mr_size (repeatable), with --mc-max-mr-size")
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


def _summary(plan: PoolPlan, ceiling: int | None) -> str:
    over = plan.over_ceiling(ceiling)
    problems = []
    if over:
        problems.append(f"{over} call(s) at or above the {ceiling // GiB if ceiling else 0} GiB "
                        "per-call ceiling: cudaHostRegister returns 2 (out of memory) on R580+")
    if plan.straddling_count:
        assert plan.families is not None
        first = next(b for b in plan.buffers if b.straddle_count)
        _, off, _, page = extent_at(plan.families, first.hits.rows[0])
        problems.append(f"{plan.straddling_count} page extent(s) straddle a seam, first: page "
                        f"{page} of {first.spec.name} at offset {off}")
    verdict = "OK" if not problems else "; ".join(problems)
    return (f"{plan.algorithm:<12} calls={plan.calls:<6} largest={plan.largest:<16} {verdict}")


def run(args: argparse.Namespace) -> int:
    try:
        check_output_path(args.json, "--json", stdout_ok=True)
        check_output_path(args.svg, "--svg")
        geometry = make_geometry(args.pool_type, **parse_params(args.params))
        too_big = size_problem(geometry)
        if too_big:
            raise PlanError(too_big)
        if args.mc_max_mr_size is not None:
            limit = effective_mr_limit(args.mc_max_mr_size, args.device_max_mr,
                                       fastdeploy_clamp=args.fastdeploy_clamp)
        elif args.limit_bytes is not None:
            limit = args.limit_bytes
        else:
            limit = args.chunk_gb * GiB
        algorithms = ALGORITHMS if args.algorithm == "all" else (args.algorithm,)
        plans = [plan_pool(geometry, limit, a) for a in algorithms]
    except (GeometryError, PlanError, UsageError) as exc:
        print(f"kvreg plan: error: {exc}", file=sys.stderr)
        return 2
    ceiling = args.ceiling_gb * GiB if args.ceiling_gb > 0 else None
    print(f"{geometry.pool_type} {geometry.layout}: {len(geometry.buffers())} buffer(s), "
          f"{geometry.total_nbytes} bytes, {geometry.page_count} pages; chunk limit {limit}")
    for plan in plans:
        print(_summary(plan, ceiling))
        for bp in plan.buffers:
            d = bp.as_dict(plan.families, limit_rows=3)
            print(f"    {d['buffer']:<24} bytes={d['nbytes']:<16} "
                  f"upstream_G={d['upstream_granularity']} copy_unit={d['copy_unit']} "
                  f"chunk={d['chunk']} calls={d['calls']}"
                  + (f"  ({d['note']})" if d["note"] else ""))
    if args.json:
        doc = {"geometry": geometry.describe(), "chunk_limit": limit,
               "per_call_ceiling": ceiling,
               "plans": [dict(p.as_dict(), over_ceiling=p.over_ceiling(ceiling)) for p in plans]}
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    if args.svg:
        from kvreg.harness.plan.svg import render_svg

        with open(args.svg, "w") as fh:
            fh.write(render_svg(plans))
    return 0
