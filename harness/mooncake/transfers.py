"""Every page through a Mooncake store: keys, packing, the round trip, failures in words.

Keys follow the upstream backends: SGLang stores one object per page and component, packed
into a multi-buffer object when a page has more pointers than keys (docs/mooncake-verbs.md §3.3,
§3.4); FastDeploy stores a K and a V object per block, puts them from the write buffer and
reads them back into the read buffer (§2.3). The PD transfer is in :mod:`.pd`.

Which pages are sent is :mod:`.selection`'s answer: a small virtual pool (it moves no bytes)
sends the pages not inside one MR plus the first and the last, a small real pool every page
(and the bytes are compared); a large pool the pages that decide, from the extent families.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvreg.fakes.mooncake import FakeMooncake, ReplicateConfig
from kvreg.fakes.mooncake.errors import error_name
from kvreg.fakes.verbs.fabric import MrRecord
from kvreg.harness.pools import (
    BufferSpec,
    FastDeployGeometry,
    HostPoolGroup,
    PageExtents,
    PoolGeometry,
)
from kvreg.harness.run.rules import ORDER_TRANSFER

from .reference import pack_multi_buffer_meta
from .selection import select_pages

__all__ = ["Batch", "IoFailure", "IoPlanError", "MrRange", "PageObject", "PoolBuffer",
           "allocate_pool", "failure_cause", "fill_pattern", "last_seq", "mr_ranges",
           "object_stride", "pages_to_send", "part_words", "plan_io", "store_round_trip"]

REAL_LIMIT = 256 << 20          # real pools are for small scenarios only
Part = tuple[int, int, int]     # (buffer index, offset, size)
MrRange = tuple[int, int, MrRecord | None]   # start, end, the MR on the first device
Bytes = npt.NDArray[np.uint8]
Int64s = npt.NDArray[np.int64]
# objects per page (§3.3): MHA stores a K and a V object, Mamba one per state buffer
_KEYS_PER_PAGE = {"mha": 2, "mha_asymmetric": 2}


class IoPlanError(ValueError):
    """A pool the backends cannot store page by page (e.g. MHA layer_first, §3.4)."""


@dataclass
class PoolBuffer:
    """One allocation of the pool on one node (``array`` for real memory)."""

    node: str
    index: int
    spec: BufferSpec
    base: int
    array: Bytes | None
    label: str

    @property
    def nbytes(self) -> int:
        return self.spec.nbytes

    def holds(self, ptr: int, size: int) -> bool:
        return self.base <= ptr and ptr + size <= self.base + self.nbytes


def allocate_pool(fake: FakeMooncake, node: str, geometry: PoolGeometry, *, real: bool,
                  label_node: bool) -> list[PoolBuffer]:
    """The pool's buffers on ``node``: tracked numpy bytes (real) or virtual memory (a CPU
    tensor over reserved memory, whose bytes the fakes never move)."""
    specs = geometry.buffers()
    if real and sum(s.nbytes for s in specs) > REAL_LIMIT:
        raise ValueError(f"the pool needs {sum(s.nbytes for s in specs)} bytes; real memory is "
                         f"limited to {REAL_LIMIT} (use memory = \"virtual\")")
    host = fake.node(node)
    out = []
    for i, spec in enumerate(specs):
        array: Bytes | None = None
        if real:
            array = np.zeros(spec.nbytes, dtype=np.uint8)
            host.track(array, name=spec.name)
            base = int(array.ctypes.data)
        else:
            # a tensor over reserved memory; the node's space keeps it mapped until release
            base = int(host.virtual(spec.shape, spec.dtype, name=spec.name).data_ptr())
        out.append(PoolBuffer(node, i, spec, base, array,
                              f"{spec.name} on {node}" if label_node else spec.name))
    return out


def object_stride(spec: BufferSpec, extents: PageExtents | None, index: int) -> int:
    """The unit MR seams must be a multiple of (§6 item 5): the page-extent size when every
    extent of the buffer sits inside one block of that size, else the buffer's copy unit."""
    if extents is not None and len(extents):
        rows = extents.buffer == index
        if rows.any():
            off, size = extents.offset[rows], extents.size[rows]
            unit = int(size.max())
            if unit > 0 and bool(np.all(off // unit == (off + size - 1) // unit)):
                return unit
    return spec.copy_unit


# -- which objects, under which keys ---------------------------------------------------------

@dataclass(frozen=True)
class PageObject:
    """One stored object: put from ``src`` parts, read back into ``dst`` parts."""

    key: str
    page: int
    src: tuple[Part, ...]
    dst: tuple[Part, ...]

    @property
    def size(self) -> int:
        return sum(n for _, _, n in self.src)


@dataclass(frozen=True)
class Batch:
    """One batch call; each segment has the same number of parts per key."""

    segments: tuple[tuple[PageObject, ...], ...]
    multi: bool

    @property
    def objects(self) -> list[PageObject]:
        return [o for seg in self.segments for o in seg]


def _suffixes(member: PoolGeometry, count: int, role: str | None) -> list[str]:
    kind = member.pool_type
    if kind in _KEYS_PER_PAGE:
        names = ["0_k", "0_v"]
    elif kind == "mha_k_only":
        names = ["0_k"]
    elif kind == "mla":
        names = ["_k"]                       # "{key}__k" with an empty mla suffix (§3.3)
    elif kind == "mamba":
        names = ["0_temporal"] + [f"0_conv_{i}" for i in range(count - 1)]
    else:
        names = [f"_{kind}"]
    return [f"{role}_{n}" for n in names] if role else names


def _member_segment(member: PoolGeometry, offset: int, role: str | None,
                    pages: Int64s) -> tuple[tuple[PageObject, ...], bool]:
    per_page = len(member.page_extents(np.zeros(1, np.int64)))
    kpp = per_page if member.pool_type == "mamba" else _KEYS_PER_PAGE.get(member.pool_type, 1)
    if member.pool_type in _KEYS_PER_PAGE and per_page != kpp:
        raise IoPlanError(f"{member.pool_type} {member.layout}: {per_page} pointers per page "
                          "for a K and a V key; SGLang raises 'layer_first multi-buffer is only "
                          "supported for MLA' (docs/mooncake-verbs.md §3.4)")
    nbuf = per_page // kpp
    ext = member.page_extents(pages)
    names = _suffixes(member, kpp, role)
    objs = []
    for r0 in range(0, len(ext), per_page):
        page = int(ext.page[r0])
        for j in range(kpp):
            rows = range(r0 + j * nbuf, r0 + (j + 1) * nbuf)
            parts = tuple((int(ext.buffer[r]) + offset, int(ext.offset[r]), int(ext.size[r]))
                          for r in rows)
            objs.append(PageObject(f"{page}_{names[j]}", page, parts, parts))
    return tuple(objs), nbuf > 1


def _fastdeploy_batch(geo: FastDeployGeometry, pages: Int64s) -> Batch:
    src, dst = geo.page_extents(pages, side="write"), geo.page_extents(pages, side="read")
    specs = geo.buffers()
    objs = []
    for r in range(len(src)):
        b, off, page = int(src.buffer[r]), int(src.offset[r]), int(src.page[r])
        half = "v" if off >= specs[b].regions[1].offset else "k"
        scale = "_scale" if specs[b].name.endswith("_scale") else ""
        objs.append(PageObject(f"block{page}_{half}{scale}", page,
                               ((b, off, int(src.size[r])),),
                               ((int(dst.buffer[r]), int(dst.offset[r]), int(dst.size[r])),)))
    return Batch((tuple(objs),), False)


def plan_io(geometry: PoolGeometry, pages: Sequence[int] | Int64s, *, io: str = "auto",
            merged: bool = False) -> list[Batch]:
    """The batch calls that store ``pages``: one per pool member, or one merged call (newer
    SGLang: flat pools normalised to one-buffer lists when any member is multi-buffer)."""
    sel = np.asarray(pages, dtype=np.int64)
    if isinstance(geometry, FastDeployGeometry):
        if io == "multi":
            raise IoPlanError("FastDeploy stores one flat object per block half (§2.3); "
                              "io = 'multi' does not apply")
        return [_fastdeploy_batch(geometry, sel)]
    if not geometry.has_page_meta:
        raise IoPlanError(f"{geometry.pool_type} {geometry.layout} has no page buffer meta: "
                          "the backends cannot store it page by page (docs/pools.md §4)")
    if isinstance(geometry, HostPoolGroup):
        members = list(zip(geometry.members, geometry.buffer_offsets, geometry.roles,
                           strict=True))
    else:
        members = [(geometry, 0, "")]
    segments = [_member_segment(m, off, role or None, sel) for m, off, role in members]
    if io == "flat" and any(multi for _, multi in segments):
        raise IoPlanError("io = 'flat' but a page has more pointers than keys: SGLang packs "
                          "those into multi-buffer objects (§3.4)")
    if merged:
        return [Batch(tuple(s for s, _ in segments),
                      io == "multi" or any(m for _, m in segments))]
    return [Batch((s,), io == "multi" or multi) for s, multi in segments]


# -- where MRs are, and which pages to send ----------------------------------------------------

def mr_ranges(fake: FakeMooncake, node: str) -> list[MrRange]:
    """(start, end, MR on the first device) of every published buffer of the node's stores:
    the units a slice or an SGE must stay inside (§1.5, §1.7). A buffer whose MRs are
    shorter than it (a released engine shrinks an MR above max_mr_size while publishing the
    whole buffer, §1.6: reached where the store does not check the limit) ends where its
    longest MR ends: a slice past that lies in no MR and fails."""
    out: list[MrRange] = []
    for store in fake.stores:
        client = store.client
        if client is None or client.te.node.name != node:
            continue
        out += [(d.addr, min(d.end, max(m.end for m in d.mrs)) if d.mrs else d.end,
                 d.mrs[0] if d.mrs else None) for d in client.te.published()]
    return sorted(out, key=lambda r: r[0])


def pages_to_send(geometry: PoolGeometry, pools: Sequence[Sequence[PoolBuffer]],
                  ranges: Sequence[list[MrRange]], *,
                  real: bool) -> Int64s:
    """The pages the I/O steps move: :func:`.selection.select_pages` (every page of a small
    real pool, the pages not inside one MR of a small virtual one, the pages that decide of a
    large one)."""
    return select_pages(geometry, pools, ranges, real=real).pages


# -- failures, in words -----------------------------------------------------------------------

@dataclass(frozen=True)
class IoFailure:
    """The first page that failed: what, why (seam or gap), and the call that said so."""

    rule: str
    what: str
    cause: str
    call: str
    seq: int

    @property
    def sentence(self) -> str:
        return f"{self.what} {self.cause}: {self.call}" if self.cause else \
            f"{self.what}: {self.call}"


def _word(geometry: PoolGeometry) -> str:
    return "block" if isinstance(geometry, FastDeployGeometry) else "page"


def part_words(geometry: PoolGeometry, bufs: Sequence[PoolBuffer], page: int, key: str | None,
                part: Part) -> str:
    b, off, size = part
    spec = bufs[b].spec
    region = next((r.name for r in spec.regions if r.offset <= off < r.end), "")
    where = "" if not region or len(spec.regions) == 1 else \
        f" in {region}" if region.startswith("layer") else f" of the {region}"
    named = f" (key {key!r})" if key else ""
    return (f"{_word(geometry)} {page}{named}{where} of {bufs[b].label} "
            f"[{off}, {off + size})")


def failure_cause(ranges: list[MrRange], buf: PoolBuffer, off: int,
           size: int) -> str:
    start, end = buf.base + off, buf.base + off + size
    inside = [r for r in ranges if r[0] <= start < r[1]]
    if not inside:
        return f"lies in no registered MR (nothing covers offset {off})"
    seam = inside[0][1]
    if seam < end:
        return f"is cut by the MR seam at offset {seam - buf.base}"
    return ""


def last_seq(fake: FakeMooncake) -> int:
    return fake.trace[len(fake.trace) - 1].seq if len(fake.trace) else 0


def _find_row(fake: FakeMooncake, start: int, face: str, key: str) -> tuple[int, bool]:
    trace = fake.trace
    for i in range(start, len(trace)):
        e = trace[i]
        if e.face == face and e.args and e.args[0] == key:
            return e.seq, e.injected
    return last_seq(fake), False


# -- the store round trip ---------------------------------------------------------------------

def _call(store: Any, batch: Batch, bufs: Sequence[PoolBuffer], put: bool
          ) -> tuple[str, list[int]]:
    keys = [o.key for o in batch.objects]
    if not batch.multi:
        parts = [o.src[0] if put else o.dst[0] for o in batch.objects]
        ptrs = [bufs[b].base + off for b, off, _ in parts]
        sizes = [n for _, _, n in parts]
        if put:
            return "batch_put_from", list(store.batch_put_from(keys, ptrs, sizes))
        return "batch_get_into", list(store.batch_get_into(keys, ptrs, sizes))
    all_ptrs: list[list[int]] = []
    all_sizes: list[list[int]] = []
    for seg in batch.segments:
        flat = [p for o in seg for p in (o.src if put else o.dst)]
        packed = pack_multi_buffer_meta([o.key for o in seg],
                                        [bufs[b].base + off for b, off, _ in flat],
                                        [n for _, _, n in flat])
        all_ptrs += packed[0]
        all_sizes += packed[1]
    if put:
        return "batch_put_from_multi_buffers", list(store.batch_put_from_multi_buffers(
            keys, all_ptrs, all_sizes, ReplicateConfig()))
    return "batch_get_into_multi_buffers", list(store.batch_get_into_multi_buffers(
        keys, all_ptrs, all_sizes))


# the byte patterns drawn so far, by (seed, buffer sizes): the catalog's Mooncake scenarios
# share a few pool sizes, and drawing the random bytes was a quarter of such a scenario
_PATTERNS: OrderedDict[tuple[int, tuple[int, ...]], tuple[Bytes, ...]] = OrderedDict()
_PATTERN_BYTES = 64 << 20   # what the kept patterns may hold together


def _patterns(seed: int, sizes: tuple[int, ...]) -> tuple[Bytes, ...]:
    """Random bytes for buffers of ``sizes``, drawn in order from one generator of ``seed``
    (read-only arrays, kept for the next pool of the same sizes)."""
    key = (seed, sizes)
    hit = _PATTERNS.get(key)
    if hit is not None:
        _PATTERNS.move_to_end(key)
        return hit
    rng = np.random.default_rng(seed)
    # random bytes drawn whole (rng.integers per byte cost 5-10x as much)
    drawn = tuple(np.frombuffer(rng.bytes(n), dtype=np.uint8) for n in sizes)
    _PATTERNS[key] = drawn
    while len(_PATTERNS) > 1 and sum(sum(k[1]) for k in _PATTERNS) > _PATTERN_BYTES:
        _PATTERNS.popitem(last=False)
    return drawn


def fill_pattern(bufs: Sequence[PoolBuffer], seed: int) -> dict[int, Bytes]:
    """Fill every buffer that has bytes with the pattern of ``seed``; returns the pattern
    per buffer index (read-only: what a round trip must bring back)."""
    filled = [b for b in bufs if b.array is not None]
    drawn = _patterns(seed, tuple(b.nbytes for b in filled))
    for b, pattern in zip(filled, drawn, strict=True):
        assert b.array is not None
        b.array[:] = pattern
    return {b.index: pattern for b, pattern in zip(filled, drawn, strict=True)}


def store_round_trip(fake: FakeMooncake, store: Any, node: str, geometry: PoolGeometry,
                     bufs: Sequence[PoolBuffer], batches: Sequence[Batch],
                     ranges: list[MrRange] | None = None) -> tuple[int, IoFailure | None]:
    """Put every object, clear the destinations, get them back, compare the bytes.

    ``ranges``: the node's :func:`mr_ranges`, if the caller has them. Returns the number of
    objects stored and the first failure (None when all went well).
    """
    face = f"mooncake:{node}"
    fresh = isinstance(geometry, FastDeployGeometry)   # put from write, get into read
    expected = fill_pattern(bufs, 7)
    ranges = mr_ranges(fake, node) if ranges is None else ranges
    done = 0
    for put in (True, False):
        if not put and not fresh:
            for b in bufs:
                if b.array is not None:
                    b.array[:] = 0
        for batch in batches:
            start = len(fake.trace)
            api, results = _call(store, batch, bufs, put)
            objs = batch.objects
            if len(results) != len(objs):
                return done, IoFailure("transfer-failed", f"{api} of {len(objs)} keys",
                                       "", f"returned {len(results)} results", ORDER_TRANSFER)
            for obj, rc in zip(objs, results, strict=True):
                want = 0 if put else obj.size
                if rc == want:
                    continue
                seq, injected = _find_row(fake, start, face, obj.key)
                parts = obj.src if put else obj.dst
                bad, cause = parts[0], ""
                for part in parts:
                    cause = failure_cause(ranges, bufs[part[0]], part[1], part[2])
                    if cause:
                        bad = part
                        break
                got = (f"returned {rc} {error_name(rc)}" if rc <= 0
                       else f"read {rc} of {obj.size} bytes")
                return done, IoFailure(
                    "transfer-failed", part_words(geometry, bufs, obj.page, obj.key, bad),
                    cause, f"{api} (call #{seq + 1}) {got}" + (" [injected]" if injected else ""),
                    seq)
            done += 0 if put else len(objs)
    for batch in batches:
        for obj in batch.objects:
            failure = _compare(geometry, bufs, expected, obj)
            if failure is not None:
                return done, failure
    return done, None


def _compare(geometry: PoolGeometry, bufs: Sequence[PoolBuffer], expected: dict[int, Bytes],
             obj: PageObject) -> IoFailure | None:
    for (sb, soff, n), (db, doff, _) in zip(obj.src, obj.dst, strict=True):
        arr = bufs[db].array
        if arr is None or sb not in expected:
            continue
        got, want = arr[doff:doff + n], expected[sb][soff:soff + n]
        if not np.array_equal(got, want):
            first = int(np.nonzero(got != want)[0][0])
            return IoFailure("round-trip-mismatch",
                             part_words(geometry, bufs, obj.page, obj.key, (db, doff, n)),
                             f"came back different at byte {first}",
                             "the bytes read back are not the bytes put", ORDER_TRANSFER)
    return None
