"""The copy step over selected pages gives the fake runtime's verdict on every page.

The runtime's copy rule depends only on how registrations cover a host range (docs/cuda-runtime.md
§5.1 wholly pinned or wholly pageable, §5.4 two adjacent registrations: rejected by default), so
copying the pages next to every registration edge, one page per gap and a seeded sample must
find the same first failing row as copying every page, whatever the chunking: seams on the copy
unit, on byte offsets, off by one byte, or with a chunk left unregistered (docs/pools.md §5.2).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes import FakeCuda
from kvreg.harness.cuda.selection import (
    EDGES_AND_SAMPLE,
    EVERY_PAGE,
    copy_selected,
    select_copies,
)
from kvreg.harness.pools import MHAGeometry, PoolGeometry
from kvreg.harness.pools.buffers import allocate
from kvreg.harness.pools.deciding_pages import buffer_edges
from kvreg.harness.strategies import registered_geometries


@st.composite
def registered_pool(draw: st.DrawFn) -> tuple[PoolGeometry, list[list[tuple[int, int]]]]:
    """A geometry and, per buffer, chunk offsets: right, wrong or holed."""
    geo = draw(registered_geometries().filter(lambda g: g.has_page_meta))
    plans = []
    for spec in geo.buffers():
        n = spec.nbytes
        if not spec.cuda_registered or not n:
            plans.append([])
            continue
        kind = draw(st.sampled_from(["unit", "bytes", "off-by-one", "hole", "one"]))
        if kind == "one":
            cuts = [0, n]
        elif kind == "unit":
            step = spec.copy_unit * draw(st.integers(1, 8))
            cuts = [*range(0, n, step), n]
        elif kind == "off-by-one":
            step = spec.copy_unit * draw(st.integers(1, 8))
            cuts = sorted({0, n, *(c + draw(st.sampled_from([-1, 1]))
                                   for c in range(step, n, step) if c - 1 > 0 and c + 1 < n)})
        else:
            step = draw(st.integers(max(1, n // 40), max(1, n)))
            cuts = [*range(0, n, step), n]
        chunks = [(a, b - a) for a, b in pairwise(cuts) if b > a]
        if kind == "hole" and len(chunks) > 1:
            chunks.pop(draw(st.integers(0, len(chunks) - 1)))
        plans.append(chunks)
    return geo, plans


def _copy(geo: PoolGeometry, plans: list[list[tuple[int, int]]], profile: str = "h200-r580",
          **select: int) -> tuple[tuple[int, int | None], int, str]:
    fake = FakeCuda(profile)
    buffers = allocate(geo, fake.space)
    bases = [int(b.data_ptr()) for b in buffers]
    for base, chunks in zip(bases, plans, strict=True):
        for off, size in chunks:
            assert int(fake.runtime.cudaHostRegister(base + off, size, 0)[0]) == 0
    live = [(r.base, r.size) for r in fake.live_registrations()]
    edges = [buffer_edges(base, spec.nbytes, live)
             for base, spec in zip(bases, geo.buffers(), strict=True)]
    sel = select_copies(geo, edges, **select)
    out = copy_selected(fake.runtime, sel, bases,
                        fault_detail=lambda: fake.cuda_runtime.last_copy_fault)
    return (out.code, out.failed_row), len(sel), sel.method


@settings(max_examples=150, deadline=None)
@given(registered_pool(), st.integers(0, 3), st.integers(0, 2**32 - 1),
       st.sampled_from(["h200-r580", "wsl2"]))
def test_selected_pages_find_the_first_failing_page_of_a_full_walk(
    case: tuple[PoolGeometry, list[list[tuple[int, int]]]], sample: int, seed: int, profile: str
) -> None:
    # wsl2 (docs/cuda-runtime.md §5.3): registered memory may not be handed to the batch API by its
    # host address, so a page wholly inside one registration fails too: a gap's representative
    # decides for every page of its gap
    geo, plans = case
    full, n_all, method_all = _copy(geo, plans, profile, copy_all_below=1 << 62)
    some, n_some, method = _copy(geo, plans, profile, copy_all_below=0, sample=sample,
                                 seed=seed)
    assert method_all == EVERY_PAGE and n_all == len(geo.page_extents())
    assert method in (EDGES_AND_SAMPLE, EVERY_PAGE)
    assert some == full
    assert n_some <= n_all


def test_a_4tib_pool_of_one_token_pages_copies_a_few_thousand_pages() -> None:
    # 64 layers x 8 heads x 128 x bf16, page_first, one-token pages: 16.8 M pages, 1 GiB chunks
    geo = MHAGeometry("page_first", 64, 8, 128, "bfloat16", 1, 1 << 24)
    spec = geo.buffers()[0]
    step = 1 << 30
    wrong = [(off + 1, step) for off in range(0, spec.nbytes - step, step)]
    for chunks, want in (([(o, min(step, spec.nbytes - o)) for o in range(0, spec.nbytes, step)],
                          (0, None)), (wrong, (1, 0))):
        got, copied, method = _copy(geo, [chunks])
        assert method == EDGES_AND_SAMPLE
        assert got == want
        assert copied < 40_000 < geo.page_count
    # the sample is seeded: the same seed picks the same pages
    edges = [np.array([0, spec.nbytes], dtype=np.int64)]
    a, b = select_copies(geo, edges, seed=7), select_copies(geo, edges, seed=7)
    assert np.array_equal(a.rows, b.rows)
    assert a.as_dict() == {"pages_copied": len(a), "pages_total": 2 << 24,
                           "method": EDGES_AND_SAMPLE}
