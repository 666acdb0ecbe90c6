"""Hypothesis strategies for downstream property tests: geometries, chunk limits, fault plans.

``from kvreg.harness.strategies import geometries, chunk_limits, chunk_gb, fault_specs``:

- ``geometries(pool_type=None, layout=None, groups=True)`` — valid pool geometries of every
  type and layout (``GEOMETRIES`` maps each type to its strategy), hybrid groups included;
  ``registered_geometries()`` — those with at least one CUDA-registered, non-empty buffer.
- ``chunk_limits(geometry)`` — chunk limits **in bytes** (for the generic and mooncake
  styles, and kvreg's reference): one copy unit up to past the largest buffer.
- ``chunk_gb(geometry)`` — limits **in whole GiB** as the sglang style reads them from
  ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB`` (set the variable to the drawn value).
- ``fault_specs(points, max_rules)`` — fault plans as scenario-file tables.
- ``huge_geometries()`` — production-shaped virtual pools of 1 GiB to several TiB, and
  ``ceiling_limits()`` — chunk limits on both sides of the 512 GiB per-call ceiling of R580+
  drivers: the bugs live at scale (offsets past 2^31, single calls at the ceiling).

Geometries are small (a few pages of a few bytes to KiB) so that properties can be checked on
real buffers too; the byte arithmetic is the same as for TiB pools. Every choice is drawn
through Hypothesis, so failures replay from a shared example database (examples/README.md).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kvreg.harness.pools import (
    AsymmetricMHAGeometry,
    DeepSeekV4PagedGeometry,
    DeepSeekV4StateGeometry,
    DSAIndexerGeometry,
    FastDeployGeometry,
    HostPoolGroup,
    KOnlyMHAGeometry,
    MambaGeometry,
    MHAGeometry,
    MLAGeometry,
    MLAKVSplitGeometry,
    PoolGeometry,
)

__all__ = ["CEILING", "GEOMETRIES", "ceiling_limits", "chunk_gb", "chunk_limits",
           "fault_specs", "geometries", "huge_geometries", "registered_geometries"]

_GiB = 1 << 30
_TiB = 1 << 40
CEILING = 512 * _GiB     # one cudaHostRegister call of this size or more fails on R580+

_small = st.integers(1, 5)
_pages = st.integers(1, 7)
_dtypes = st.sampled_from(["float16", "bfloat16", "float32", "uint8", "float8_e4m3fn"])
_PAGE_LAYOUTS = ["page_first", "page_first_direct"]


def _shape(min_value: int = 1) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(min_value, 4), min_size=1, max_size=3).map(tuple)


GEOMETRIES: dict[str, st.SearchStrategy[PoolGeometry]] = {
    "mha": st.builds(
        MHAGeometry,
        st.sampled_from(["layer_first", "page_first", "page_first_direct", "page_head"]),
        _small, _small, _small, _dtypes, _small, _pages,
    ),
    "mha_k_only": st.builds(
        KOnlyMHAGeometry, st.sampled_from(["layer_first", *_PAGE_LAYOUTS]),
        _small, _small, _small, _dtypes, _small, _pages,
    ),
    "mha_asymmetric": st.builds(
        AsymmetricMHAGeometry, st.sampled_from(_PAGE_LAYOUTS),
        _small, _small, _small, _small, _dtypes, _small, _pages,
    ),
    "mla": st.builds(
        MLAGeometry, st.sampled_from(["layer_first", *_PAGE_LAYOUTS]),
        _small, _small, st.integers(0, 4), _dtypes, _small, _pages, st.none() | _small,
    ),
    "mla_kv_split": st.builds(
        MLAKVSplitGeometry, _small, _small, _small, _dtypes, _small, _pages,
        index_layer_num=st.just(0),
    )
    | st.builds(
        MLAKVSplitGeometry, _small, _small, _small, _dtypes, _small, _pages,
        k_width=_small, k_dtype=_dtypes, fp8_dsa=st.booleans(), index_layer_num=_small,
        index_head_dim=_small, index_dtype=_dtypes, index_scale=st.booleans(),
    ),
    "dsa_indexer": st.builds(
        DSAIndexerGeometry, st.sampled_from(["layer_first", *_PAGE_LAYOUTS]),
        _small, st.integers(1, 16), st.integers(1, 16), _small, _pages,
    ),
    "mamba": st.builds(
        MambaGeometry, st.sampled_from(_PAGE_LAYOUTS), _small, _shape(0), _dtypes,
        st.lists(_shape(1), min_size=1, max_size=3), _dtypes, _pages,
    ),
    "deepseek_v4_paged": st.builds(
        DeepSeekV4PagedGeometry, st.sampled_from(["layer_first", *_PAGE_LAYOUTS]),
        _small, st.integers(1, 40), _small, _pages,
    ),
    "deepseek_v4_state": st.builds(
        lambda layout, n, row, ring, p, num, dt: DeepSeekV4StateGeometry(
            layout, [(2, *row)] * n, ring, p, num, dt
        ),
        st.sampled_from(["layer_first", *_PAGE_LAYOUTS]), _small, _shape(1), _small, _small, _pages,
        _dtypes,
    ),
    "fastdeploy": st.builds(
        FastDeployGeometry, _small, _small, _small,
        st.sampled_from(["float32", "bfloat16", "float16", "uint8"]), _small, _pages,
        st.integers(0, 2),
    )
    | st.builds(
        FastDeployGeometry, _small, _small, _small, st.just("block_wise_fp8"), _small, _pages,
        st.integers(0, 2), _small,
    ),
}  # fmt: skip


def geometries(pool_type: str | None = None, *, layout: str | None = None,
               groups: bool = True) -> st.SearchStrategy[PoolGeometry]:
    """Random valid geometries of one pool type (all types when None), optionally one layout.

    With ``groups`` (and no pool_type) hybrid groups of 1-3 pools are drawn too.
    """
    if pool_type is not None:
        if pool_type not in GEOMETRIES:
            raise ValueError(f"unknown pool type {pool_type!r}; known: {sorted(GEOMETRIES)}")
        strategy = GEOMETRIES[pool_type]
    else:
        single = st.one_of(*GEOMETRIES.values())
        strategy = single
        if groups:
            strategy = single | st.builds(lambda ms: HostPoolGroup(ms),
                                          st.lists(single, min_size=1, max_size=3))
    if layout is not None:
        strategy = strategy.filter(lambda g: g.layout == layout)
    return strategy


def registered_geometries() -> st.SearchStrategy[PoolGeometry]:
    """Geometries with at least one CUDA-registered, non-empty buffer."""
    return geometries().filter(
        lambda g: any(b.cuda_registered and b.nbytes for b in g.buffers()))


def chunk_limits(geometry: PoolGeometry) -> st.SearchStrategy[int]:
    """Chunk limits in **bytes**, from one copy unit up to past the largest buffer.

    Below, at and just above the largest buffer are always among the candidates. For the
    sglang style, which takes whole GiB, draw from :func:`chunk_gb` instead.
    """
    specs = [b for b in geometry.buffers() if b.cuda_registered and b.nbytes]
    unit = max((b.copy_unit for b in specs), default=1)
    largest = max((b.nbytes for b in specs), default=1)
    return st.one_of(st.integers(unit, max(unit, largest) * 2),
                     st.sampled_from([unit, largest, largest + 1]).filter(lambda v: v >= unit))


def chunk_gb(geometry: PoolGeometry | None = None, *, max_gb: int = 1024
             ) -> st.SearchStrategy[int]:
    """Chunk limits in **whole GiB** (>= 1), as ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``.

    With a geometry, the values that put a seam inside its largest buffer (below its size in
    GiB) are drawn more often; small test geometries fit in one GiB, so use virtual buffers
    of GiB sizes (``fake_cudart.virtual``) to see seams.
    """
    if geometry is None:
        return st.integers(1, max_gb)
    specs = [b for b in geometry.buffers() if b.cuda_registered and b.nbytes]
    largest_gb = max((b.nbytes for b in specs), default=1) >> 30
    inside = st.integers(1, max(1, min(largest_gb, max_gb)))
    return st.one_of(inside, st.integers(1, max_gb))


def fault_specs(points: tuple[str, ...] = ("cudart.cudaHostRegister",
                                           "cudart.cudaHostUnregister"),
                max_rules: int = 2) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Fault plans as scenario-file tables (``FaultPlan.arm_from_dict`` accepts each).

    Each plan has 1..``max_rules`` rules on ``points``; each rule returns an error code the
    API can really return (never the environment codes 3, 35, 100), optionally on the
    ``nth`` call and ``times`` times.
    """
    from kvreg.fakes.cuda.errors import API_ERRORS

    def rule(point: str) -> st.SearchStrategy[dict[str, Any]]:
        api = point.split(".", 1)[1]
        codes = sorted(c for c in API_ERRORS[api] if c not in (3, 35, 100))
        return st.fixed_dictionaries(
            {"point": st.just(point), "error": st.sampled_from(codes)},
            optional={"nth": st.integers(1, 6), "times": st.integers(1, 3)})

    return st.lists(st.one_of(*(rule(p) for p in points)), min_size=1, max_size=max_rules)


@st.composite
def huge_geometries(draw: st.DrawFn, max_total: int = 8 * _TiB) -> PoolGeometry:
    """Production-shaped pools (MHA, MLA, DSA indexer, FastDeploy; every layout) of 1 GiB to
    ``max_total`` bytes: page counts in the millions, offsets far past 2^31, buffers on both
    sides of the 512 GiB ceiling. Use them with virtual memory only."""
    kind = draw(st.sampled_from(["mha", "mla", "dsa", "fastdeploy"]))
    page_size = draw(st.sampled_from([1, 16, 64, 256]))
    layers = draw(st.integers(1, 96))
    if kind == "mha":
        layout = draw(st.sampled_from(["layer_first", "page_first", "page_first_direct",
                                       "page_head"]))
        heads, dim = draw(st.sampled_from([1, 2, 8, 16])), draw(st.sampled_from([64, 128, 256]))
        dtype = draw(st.sampled_from(["bfloat16", "float8_e4m3fn", "float32"]))

        def make(n: int) -> PoolGeometry:
            return MHAGeometry(layout, layers, heads, dim, dtype, page_size, n)
    elif kind == "mla":
        layout = draw(st.sampled_from(["layer_first", *_PAGE_LAYOUTS]))
        dtype = draw(st.sampled_from(["bfloat16", "float8_e4m3fn"]))

        def make(n: int) -> PoolGeometry:
            return MLAGeometry(layout, layers, 512, 64, dtype, page_size, n)
    elif kind == "dsa":
        layout = draw(st.sampled_from(["layer_first", *_PAGE_LAYOUTS]))

        def make(n: int) -> PoolGeometry:
            return DSAIndexerGeometry(layout, layers, 128, 128, page_size, n)
    else:
        heads = draw(st.sampled_from([1, 4, 8]))

        def make(n: int) -> PoolGeometry:
            return FastDeployGeometry(layers, heads, 128, "bfloat16", page_size, n)
    one = make(1).total_nbytes
    per_page = max(make(2).total_nbytes - one, 1)
    lo = max(1, _GiB // per_page)
    hi = max(lo, (max_total - one) // per_page + 1)
    pages_ = draw(st.integers(lo, hi) | st.sampled_from([lo, hi]))
    return make(pages_)


def ceiling_limits(geometry: PoolGeometry, *, minimum: int = _GiB
                   ) -> st.SearchStrategy[int]:
    """Chunk limits on both sides of the 512 GiB per-call ceiling (and right at it), never
    below one copy unit or ``minimum``."""
    specs = [b for b in geometry.buffers() if b.cuda_registered and b.nbytes]
    unit = max((b.copy_unit for b in specs), default=1)
    low = max(unit, minimum)
    near = [CEILING - _GiB, CEILING - unit, CEILING - 1, CEILING, CEILING + 1, CEILING + unit,
            CEILING + _GiB]
    below = st.integers(low, CEILING - 1) if low < CEILING else st.nothing()
    return st.one_of(below, st.integers(max(low, CEILING), max(low, CEILING, 2 * _TiB)),
                     st.sampled_from([v for v in near if v >= low] or [low]))

