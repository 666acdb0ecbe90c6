"""Properties at the scale where the bugs live: virtual pools of 1 GiB to several TiB (offsets
far past 2^31) and chunk limits on both sides of the 512 GiB per-call ceiling of R580+
drivers (spec/cuda-runtime.md §2.2, §11.1: a call of 2^39 bytes or more returns 2)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.harness.cuda import reference
from kvreg.harness.plan.chunking import PlanError, plan_chunks, reference_unit
from kvreg.harness.pools import PoolGeometry
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.endstate import BufferEnd, check_registered, check_seams_aligned
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.registration import RegistrationError
from kvreg.harness.scenario import load_file
from kvreg.harness.strategies import CEILING, ceiling_limits, huge_geometries

GiB = 1 << 30
TiB = 1 << 40
HUGE = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _units(g: PoolGeometry, limit: int) -> list[tuple[int, str, int, int]]:
    """(index, name, nbytes, seam unit) of each pinned, non-empty buffer the reference can
    chunk under ``limit``."""
    out = []
    for i, spec in enumerate(g.buffers()):
        if not spec.cuda_registered or not spec.nbytes:
            continue
        try:
            unit = reference_unit(spec, limit, None, i)[0]
        except PlanError:        # a copy unit above the limit: rejected before any call
            continue
        out.append((i, spec.name, spec.nbytes, unit))
    return out


@HUGE
@given(st.data())
def test_strategies_reach_past_the_ceiling(data: st.DataObject) -> None:
    g = data.draw(huge_geometries())
    limit = data.draw(ceiling_limits(g))
    assert GiB - g.total_nbytes < max(b.nbytes for b in g.buffers())   # never tiny
    assert g.total_nbytes <= 8 * TiB
    unit = max(b.copy_unit for b in g.buffers() if b.cuda_registered and b.nbytes)
    assert GiB <= limit <= max(2 * TiB, unit) and limit >= unit


def test_strategies_draw_both_sides_of_the_ceiling() -> None:
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        g = data.draw(huge_geometries())
        limit = data.draw(ceiling_limits(g))
        seen.add("limit<ceiling" if limit < CEILING else "limit>=ceiling")
        if max(b.nbytes for b in g.buffers()) >= CEILING:
            seen.add("buffer>=ceiling")
        if g.total_nbytes > 1 << 31:
            seen.add("past 2^31")

    draw()
    assert seen == {"limit<ceiling", "limit>=ceiling", "buffer>=ceiling", "past 2^31"}


@HUGE
@given(st.data())
def test_reference_pins_every_byte_on_aligned_seams_or_fails_at_the_ceiling(
        data: st.DataObject) -> None:
    g = data.draw(huge_geometries(max_total=4 * TiB))
    limit = data.draw(ceiling_limits(g, minimum=16 * GiB))
    fake = FakeCuda("h200-r580")
    for _, name, nbytes, unit in _units(g, limit):
        buf = fake.virtual(nbytes, "uint8", name=name)
        base = int(buf.data_ptr())
        planned = plan_chunks(nbytes, limit, unit)
        over = [size for _, size in planned if size >= CEILING]
        try:
            ranges = reference.register(fake.torch, base, nbytes, granularity=unit,
                                        chunk_limit=limit)
        except RegistrationError as exc:
            # only a call at or above the ceiling fails, with 2, and nothing stays pinned
            assert over and exc.code == 2 and exc.size >= CEILING
            assert not [r for r in fake.live_registrations() if base <= r.base < base + nbytes]
            continue
        assert not over
        assert all(size <= limit for _, size in ranges)
        end = BufferEnd(name, base, nbytes, unit, True, live=list(ranges))
        assert check_registered([end], "required") == []
        assert check_seams_aligned([end], 0) == []
        assert reference.teardown(fake.torch, ranges) == []
    assert fake.live_registrations() == []


@HUGE
@given(st.data())
def test_seams_aligned_fires_exactly_where_byte_offset_seams_cut_a_page(
        data: st.DataObject) -> None:
    g = data.draw(huge_geometries())
    limit = data.draw(ceiling_limits(g))
    for _, name, nbytes, unit in _units(g, limit):
        base = 1 << 45
        chunks = plan_chunks(nbytes, limit, None)         # the pre-#36798 byte seams
        end = BufferEnd(name, base, nbytes, unit, True,
                        live=[(base + off, size) for off, size in chunks])
        found = check_seams_aligned([end], 0)
        bad = [off for off, _ in chunks[1:] if off % unit]
        assert bool(found) == bool(bad)
        if bad:
            (v,) = found
            page = bad[0] // unit
            assert (f"lies at offset {bad[0]} ({name}+{bad[0]:#x}), which cuts copy page "
                    f"{page} [{page * unit}, {(page + 1) * unit})") in v.message


@HUGE
@given(st.data())
def test_registered_names_the_exact_gap_in_a_multi_tib_buffer(data: st.DataObject) -> None:
    g = data.draw(huge_geometries())
    limit = data.draw(ceiling_limits(g))
    units = _units(g, limit)
    for _, name, nbytes, unit in units:
        chunks = plan_chunks(nbytes, limit, unit)
        if len(chunks) < 2:
            continue
        k = data.draw(st.integers(0, len(chunks) - 1))
        base = 1 << 45
        live = [(base + off, size) for i, (off, size) in enumerate(chunks) if i != k]
        (v,) = check_registered([BufferEnd(name, base, nbytes, unit, True, live=live)],
                                "required")
        off, size = chunks[k]
        assert f"[{name}+{off:#x}, +{size}) is not covered by any live registration" in \
            v.message
        assert f"{nbytes - size} of {nbytes} bytes registered" in v.message
        # one chunk registered twice over (a byte-disjoint duplicate is legal in the fake,
        # an overlapping one is not: the rule names it either way)
        twice = [*[(base + o, s) for o, s in chunks], (base + off, size)]
        (v,) = check_registered([BufferEnd(name, base, nbytes, unit, True, live=twice)],
                                "required")
        assert f"bytes [{name}+{off:#x}, +{size}) are covered by two live registrations" in \
            v.message


POOLS = {
    # copy unit 4497408 bytes: floor(limit / unit) * unit stays below a 512 GiB limit
    "mla": ('type = "mla"\nparams = { layout = "page_first_direct", layer_num = 61, '
            'kv_lora_rank = 512, qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }'),
    # 64-token pages of 36 layers x 8 heads x 128 x bf16: a unit that divides 512 GiB
    "mha": ('type = "mha"\nparams = { layout = "page_first", layer_num = 36, head_num = 8, '
            'head_dim = 128, dtype = "bfloat16", page_size = 64 }'),
}


@settings(max_examples=12, deadline=None)
@given(pool=st.sampled_from(sorted(POOLS)), total_gib=st.integers(520, 4096),
       chunk_gb=st.sampled_from([256, 511, 512, 513, 1024]))
def test_runner_verdict_on_both_sides_of_the_ceiling(tmp_path_factory, pool: str,
                                                     total_gib: int, chunk_gb: int) -> None:
    path: Path = tmp_path_factory.mktemp("huge") / f"{pool}.toml"
    path.write_text(f'format = 1\n[pool]\n{POOLS[pool]}\nmemory = "virtual"\n'
                    f'[[scenario]]\nname = "huge"\ntotal_gib = {total_gib}\n'
                    f'chunk_gb = {chunk_gb}\nexercise = ["register", "teardown", "teardown"]\n'
                    'guards = "a multi-TiB pool across the 512 GiB per-call ceiling"\n')
    (sc,) = load_file(path)
    result = run_scenario(sc, make_implementation())
    g = sc.geometry()
    units = _units(g, sc.chunk_limit)
    too_big = any(size >= CEILING for _, _, nbytes, unit in units
                  for _, size in plan_chunks(nbytes, sc.chunk_limit, unit))
    if too_big:
        rules = [v.rule for v in result.violations]
        assert rules[0] == "unexpected-error", result.violations
        assert "per-call ceiling of R580+ drivers; chunk it" in result.first_violation
    else:
        assert result.verdict == "pass", result.violations
