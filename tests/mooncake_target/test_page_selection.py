"""The Mooncake I/O steps over the pages that decide (harness/mooncake/selection.py): on small
random pools with MRs placed right (on page boundaries) and wrong (inside pages, with gaps),
moving only the selected pages finds the same first failure, in the same words, as moving
every page: through the store (a slice must lie in one registration, docs/mooncake-verbs.md
§1.7) and by RDMA WRITE from a prefill node (an SGE must lie in one MR, §5.3)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreg.fakes.mooncake import FakeMooncake
from kvreg.harness.mooncake.pd import pd_transfer
from kvreg.harness.mooncake.selection import (
    EDGES_AND_SAMPLE,
    EDGES_OUTSIDE_ONE_MR,
    EVERY_PAGE,
    OUTSIDE_ONE_MR,
    family_object_stride,
    select_pages,
)
from kvreg.harness.mooncake.transfers import (
    IoFailure,
    IoPlanError,
    PoolBuffer,
    allocate_pool,
    mr_ranges,
    object_stride,
    plan_io,
    store_round_trip,
)
from kvreg.harness.pools import (
    FastDeployGeometry,
    HostPoolGroup,
    PoolGeometry,
    make_geometry,
)
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import bundled_root, load_file
from kvreg.harness.strategies import geometries

Layout = list[list[tuple[int, int]]]    # per buffer: (offset, size) of each MR


@dataclass
class Deployment:
    fake: FakeMooncake
    nodes: tuple[str, ...]
    stores: dict[str, Any]
    pools: dict[str, list[PoolBuffer]]


def deploy(geometry: PoolGeometry, layouts: dict[str, Layout], *, real: bool) -> Deployment:
    """A fresh fabric with a released store per node and the MRs registered where drawn."""
    nodes = tuple(layouts)
    fake = FakeMooncake("released", node=nodes[0], devices={"mlx5_0": "mlx5"}, env={})
    for extra in nodes[1:]:
        fake.fabric.add_node(extra)
        fake.fabric.add_device("mlx5_0", "mlx5", node=extra)
    stores, pools = {}, {}
    for node in nodes:
        store = fake.store(node)
        assert store.setup(f"{node}-host", "P2PHANDSHAKE", 0, 0, "rdma", "", "m") == 0
        fake.cluster("m").external_segments = True   # other nodes hold the objects (§7)
        stores[node] = store
        pools[node] = allocate_pool(fake, node, geometry, real=real, label_node=len(nodes) > 1)
        for buf, mrs in zip(pools[node], layouts[node], strict=True):
            for off, size in mrs:
                assert store.register_buffer(buf.base + off, size) == 0
    return Deployment(fake, nodes, stores, pools)


def words(failure: IoFailure | None) -> str | None:
    """The failure without its call number (the selection makes fewer calls)."""
    return None if failure is None else re.sub(r" \(call #\d+\)", "", failure.sentence)


def first_failures(geometry: PoolGeometry, layouts: dict[str, Layout], *, real: bool,
                   pages: np.ndarray[Any, np.dtype[np.int64]] | None, seed: int = 0
                   ) -> tuple[str | None, str | None, int]:
    """The first store failure and the first PD failure, moving ``pages`` (None: the
    selection, computed with every threshold at zero)."""
    d = deploy(geometry, layouts, real=real)
    try:
        if pages is None:
            sel = select_pages(geometry, [d.pools[n] for n in d.nodes],
                               [mr_ranges(d.fake, n) for n in d.nodes], real=real, seed=seed,
                               walk_below=0, sample=2)
            pages = sel.pages
        node = d.nodes[0]
        _, stored = store_round_trip(d.fake, d.stores[node], node, geometry, d.pools[node],
                                     plan_io(geometry, pages))
        written = None
        if len(d.nodes) > 1:
            _, written = pd_transfer(d.fake, geometry, d.pools["prefill"], d.pools["decode"],
                                     pages)
        return words(stored), words(written), len(pages)
    finally:
        d.fake.faults.clear()
        d.fake.close_all()


@st.composite
def mr_layout(draw: st.DrawFn, geometry: PoolGeometry) -> Layout:
    """Per buffer: cuts on object boundaries (right) or anywhere (wrong), some pieces left
    unregistered (gaps)."""
    out: Layout = []
    fams = geometry.extent_families()
    for i, spec in enumerate(geometry.buffers()):
        n = spec.nbytes
        aligned = sorted({f.offset(p) for f in fams if f.buffer == i
                          for p in range(f.count)} - {0})
        cuts: set[int] = set()
        for _ in range(draw(st.integers(0, 3))):
            if aligned and draw(st.booleans()):
                cuts.add(draw(st.sampled_from(aligned)))
            elif n > 1:
                cuts.add(draw(st.integers(1, n - 1)))
        edges = [0, *sorted(c for c in cuts if 0 < c < n), n]
        pieces = list(itertools.pairwise(edges))
        keep = [draw(st.integers(0, 9)) > 0 for _ in pieces]   # mostly registered
        out.append([(lo, hi - lo) for (lo, hi), k in zip(pieces, keep, strict=True) if k])
    return out


def storable(geometry: PoolGeometry) -> bool:
    """A pool the backends store page by page (hybrid groups: SGLang members sharing the
    anchor's pages, as the hybrid pools do)."""
    if not geometry.has_page_meta or any(s.nbytes == 0 for s in geometry.buffers()):
        return False
    if isinstance(geometry, HostPoolGroup) and any(
            m.page_count != geometry.page_count or isinstance(m, FastDeployGeometry)
            for m in geometry.members):
        return False
    try:
        plan_io(geometry, [0])
    except IoPlanError:
        return False
    return True


@settings(deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_selection_finds_the_first_failure_moving_every_page_finds(data: st.DataObject
                                                                   ) -> None:
    geometry = data.draw(geometries().filter(storable), label="geometry")
    pd = data.draw(st.booleans(), label="pd")
    real = data.draw(st.booleans(), label="real")
    nodes = ("decode", "prefill") if pd else ("node0",)
    layouts = {n: data.draw(mr_layout(geometry), label=f"MRs on {n}") for n in nodes}
    seed = data.draw(st.integers(0, 2**16), label="seed")
    every = first_failures(geometry, layouts, real=real,
                           pages=np.arange(geometry.page_count, dtype=np.int64))
    chosen = first_failures(geometry, layouts, real=real, pages=None, seed=seed)
    assert chosen[:2] == every[:2]


def test_a_selection_without_the_pages_at_edges_misses_a_seam() -> None:
    """The property has teeth: first, last and a sample alone send no page cut by a seam in
    the middle of a 64-block pool, so they report success where every page fails one."""
    fd = make_geometry("fastdeploy", num_layers=2, head_num=1, head_dim=8, dtype="bfloat16",
                       page_size=4, page_num=64)
    stride = fd.buffers()[0].copy_unit
    layouts: dict[str, Layout] = {"node0": [
        [(0, 30 * stride + 8), (30 * stride + 8, s.nbytes - 30 * stride - 8)]
        if s.name == "read" else [(0, s.nbytes)] for s in fd.buffers()]}
    every = first_failures(fd, layouts, real=False, pages=np.arange(64, dtype=np.int64))
    assert every[0] is not None and "block 30 (key 'block30_k')" in every[0]
    assert "cut by the MR seam" in every[0]
    blind = first_failures(fd, layouts, real=False, pages=np.array([0, 1, 17, 63]))
    assert blind[0] is None
    assert first_failures(fd, layouts, real=False, pages=None)[0] == every[0]


def test_large_pools_send_the_pages_at_edges_and_report_them() -> None:
    """Above the threshold the selection holds the pages next to each MR edge, not every
    page; below it a virtual pool is walked and a real one sent whole."""
    fd = make_geometry("fastdeploy", num_layers=2, head_num=1, head_dim=8, dtype="bfloat16",
                       page_size=4, page_num=1000)
    stride = fd.buffers()[0].copy_unit
    cut = 500 * stride + 8          # inside block 500 of the K half
    layouts: dict[str, Layout] = {"node0": [[(0, cut), (cut, s.nbytes - cut)]
                                            for s in fd.buffers()]}
    d = deploy(fd, layouts, real=False)
    try:
        pools, ranges = [d.pools["node0"]], [mr_ranges(d.fake, "node0")]
        sel = select_pages(fd, pools, ranges, real=False, walk_below=0, sample=0)
        # block 500 holds the seam; 499 and 501 touch it but lie inside one MR, which every
        # transfer path accepts: a virtual pool sends only 500, and each family's first and
        # last block (the V half starts at the buffer's middle: its block 0 and 999)
        assert sel.pages.tolist() == [0, 500, 999]
        assert sel.as_dict() == {"pages_copied": 3, "pages_total": 1000,
                                 "method": EDGES_OUTSIDE_ONE_MR}
        # a real pool's bytes are compared: every page at an edge is sent
        at_edges = select_pages(fd, pools, ranges, real=True, walk_below=0, sample=0)
        assert {0, 499, 500, 501, 999} <= set(at_edges.pages.tolist()) and len(at_edges) < 20
        assert at_edges.method == EDGES_AND_SAMPLE
        walked = select_pages(fd, pools, ranges, real=False)
        assert walked.pages.tolist() == [0, 500, 999] and walked.method == OUTSIDE_ONE_MR
        whole = select_pages(fd, pools, ranges, real=True)
        assert len(whole) == 1000 and whole.method == EVERY_PAGE
        sampled = select_pages(fd, pools, ranges, real=False, walk_below=0, sample=64, seed=3)
        assert set(sel.pages.tolist()) < set(sampled.pages.tolist())
        assert np.array_equal(sampled.pages, select_pages(
            fd, pools, ranges, real=False, walk_below=0, sample=64, seed=3).pages)
    finally:
        d.fake.close_all()


@settings(deadline=None)
@given(geometry=geometries().filter(lambda g: g.has_page_meta))
def test_object_stride_from_families_is_the_per_page_one(geometry: PoolGeometry) -> None:
    ext = geometry.page_extents()
    fams = geometry.extent_families()
    for i, spec in enumerate(geometry.buffers()):
        assert family_object_stride(spec.copy_unit, fams, i) == object_stride(spec, ext, i)


def test_object_stride_falls_back_when_a_row_crosses_a_block() -> None:
    """Rows of 6 bytes every 4 bytes cross 6-byte blocks (period 3 pages): the copy unit."""
    straddling = ExtentFamily(0, 0, 4, 6, 10**12, 0, 1)
    assert family_object_stride(99, [straddling], 0) == 99
    aligned = ExtentFamily(0, 12, 6, 6, 10**12, 0, 1)
    assert family_object_stride(99, [aligned], 0) == 6


def test_the_result_reports_the_pages_moved() -> None:
    """A bundled scenario's result says how its I/O steps covered the pool."""
    path = bundled_root() / "mooncake" / "pd_transfer.toml"
    sc = next(s for s in load_file(path, bundled_root()) if s.name == "one-mr-per-pool")
    res = run_scenario(sc, make_implementation())
    assert res.verdict == "pass" and res.copy == {
        "pages_copied": 16, "pages_total": 16, "method": EVERY_PAGE}
