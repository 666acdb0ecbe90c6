"""The fake's registry against a pure-Python model, driven by Hypothesis.

The model is docs/cuda-runtime.md §11 written as plainly as possible: a dict of live ranges
(offset -> size) and a per-range copy classifier. Random sequences of register (both faces),
overlapping register, unregister (exact base, interior, unknown, twice) and copy
(cudaMemcpyAsync and cudaMemcpyBatchAsync) must give the model's codes, leave the model's live
set, and put the model's code in the calling runtime's last-error slot.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES

PAGE = 4096
REGION = 16 * PAGE          # small, so random ranges collide often

offsets = st.one_of(
    st.integers(0, 15).map(lambda p: p * PAGE),              # page starts
    st.integers(0, REGION // 512 - 1).map(lambda k: k * 512),  # sub-page starts
    st.integers(0, REGION - 1),                              # anywhere
)
sizes = st.one_of(
    st.integers(1, 4).map(lambda p: p * PAGE),
    st.sampled_from([0, 1, 100, 512]),
    st.integers(1, 3 * PAGE),
)


def _page_span(off: int, size: int) -> tuple[int, int]:
    return off // PAGE * PAGE, -(-(off + size) // PAGE) * PAGE


class RegistryModel:
    """docs/cuda-runtime.md §11.1-§11.3 in a dozen lines."""

    def __init__(self, granularity: str, across: str) -> None:
        self.live: dict[int, int] = {}
        self.granularity = granularity
        self.across = across

    def register(self, off: int, size: int) -> int:
        if size == 0:                                   # docs/cuda-runtime.md §2.2 size 0 -> 1
            return 1
        for b, s in self.live.items():
            # docs/cuda-runtime.md §2.2 same-page row [UNC]
            if self.granularity == "page":
                (lo1, hi1), (lo2, hi2) = _page_span(off, size), _page_span(b, s)
            # docs/cuda-runtime.md §2.2 overlap by byte -> 712
            else:
                lo1, hi1, lo2, hi2 = off, off + size, b, b + s
            if lo1 < hi2 and lo2 < hi1:
                return 712
        self.live[off] = size
        return 0

    def unregister(self, off: int) -> int:
        if off in self.live:                            # docs/cuda-runtime.md §3 exact base -> 0
            del self.live[off]
            return 0
        if any(b < off < b + s for b, s in self.live.items()):
            return 1                                    # docs/cuda-runtime.md §3 interior -> 1
        # docs/cuda-runtime.md §3 unknown / twice -> 713
        return 713

    def copy(self, off: int, size: int) -> int:
        end = off + size
        touched = [(b, s) for b, s in self.live.items() if b < end and off < b + s]
        if not touched:
            return 0                                    # docs/cuda-runtime.md §5.2 wholly pageable
        covered = sum(min(end, b + s) - max(off, b) for b, s in touched)
        if covered < size:
            return 1                                    # docs/cuda-runtime.md §5.1 mixed -> 1 [DOC]
        if len(touched) == 1:
            return 0                                    # docs/cuda-runtime.md §5.2 one registration
        return 0 if self.across == "allow" else 1       # docs/cuda-runtime.md §5.4 [UNC]


class RegistryMachine(RuleBasedStateMachine):
    removed = Bundle("removed")

    @initialize(granularity=st.sampled_from(["byte", "page"]),
                across=st.sampled_from(["reject", "allow"]))
    def setup(self, granularity: str, across: str) -> None:
        profile = PROFILES["h200-r580"].replace(overlap_granularity=granularity,
                                                copy_across_registrations=across)
        self.fake = FakeCuda(profile)
        self.rt = self.fake.runtime
        self.base = self.fake.virtual(REGION + 8 * PAGE, name="region").data_ptr()
        self.model = RegistryModel(granularity, across)
        _, self.dev = self.rt.cudaMalloc(4 * REGION)
        _, self.stream = self.rt.cudaStreamCreate()
        self.attrs = self.rt.cudaMemcpyAttributes()
        self.attrs.srcAccessOrder = 1

    # -- helpers --------------------------------------------------------------------------
    def _check_last_error(self, face: str, code: int) -> None:
        runtime = self.fake.torch_runtime if face == "torch" else self.fake.cuda_runtime
        # docs/cuda-runtime.md §6: the failure lands in that runtime
        assert runtime.get_last_error() == code
        assert runtime.get_last_error() == 0

    def _register(self, face: str, off: int, size: int) -> None:
        expected = self.model.register(off, size)
        if face == "torch":
            got = int(self.fake.torch.cudaHostRegister(self.base + off, size, 0))
        else:
            got = int(self.rt.cudaHostRegister(self.base + off, size, 0)[0])
        assert got == expected, (off, size, self.model.live)
        self._check_last_error(face, expected)

    def _unregister(self, face: str, off: int) -> int:
        expected = self.model.unregister(off)
        if face == "torch":
            got = int(self.fake.torch.cudaHostUnregister(self.base + off))
        else:
            got = int(self.rt.cudaHostUnregister(self.base + off)[0])
        assert got == expected, (off, self.model.live)
        self._check_last_error(face, expected)
        return got

    # -- rules ------------------------------------------------------------------------------
    @rule(off=offsets, size=sizes, face=st.sampled_from(["torch", "cuda"]))
    def register(self, off: int, size: int, face: str) -> None:
        self._register(face, off, size)

    @precondition(lambda self: bool(self.model.live))
    @rule(data=st.data())
    def register_overlapping(self, data: st.DataObject) -> None:
        b = data.draw(st.sampled_from(sorted(self.model.live)))
        s = self.model.live[b]
        start = data.draw(st.integers(max(b - PAGE, 0), b + s - 1))
        size = data.draw(st.integers(max(b + 1 - start, 1), b + s - start + PAGE))
        assert self.model.register(start, size) == 712      # the model agrees it overlaps
        self._register_expected_712(start, size)

    def _register_expected_712(self, start: int, size: int) -> None:
        got = int(self.rt.cudaHostRegister(self.base + start, size, 0)[0])
        assert got == 712
        self._check_last_error("cuda", 712)

    @precondition(lambda self: bool(self.model.live))
    @rule(target=removed, data=st.data(), face=st.sampled_from(["torch", "cuda"]))
    def unregister_exact(self, data: st.DataObject, face: str) -> int:
        off = data.draw(st.sampled_from(sorted(self.model.live)))
        assert self._unregister(face, off) == 0
        return off

    @precondition(lambda self: any(s > 1 for s in self.model.live.values()))
    @rule(data=st.data())
    def unregister_interior(self, data: st.DataObject) -> None:
        b = data.draw(st.sampled_from(sorted(o for o, s in self.model.live.items() if s > 1)))
        off = data.draw(st.integers(b + 1, b + self.model.live[b] - 1))
        assert self._unregister("cuda", off) == 1

    @rule(off=offsets)
    def unregister_anywhere(self, off: int) -> None:
        self._unregister("cuda", off)                   # 0, 1 or 713, as the model says

    @rule(off=consumes(removed), face=st.sampled_from(["torch", "cuda"]))
    def unregister_twice(self, off: int, face: str) -> None:
        self._unregister(face, off)                     # 713 unless re-registered since

    @precondition(lambda self: bool(self.model.live))
    @rule(data=st.data(), size=sizes)
    def register_adjacent(self, data: st.DataObject, size: int) -> None:
        b = data.draw(st.sampled_from(sorted(self.model.live)))
        self._register("cuda", b + self.model.live[b], size)   # starts at the byte after it

    def _seams(self) -> list[int]:
        ends = {b + s for b, s in self.model.live.items()}
        return sorted(ends & set(self.model.live))

    @precondition(lambda self: bool(self._seams()))
    @rule(data=st.data(), batch=st.booleans())
    def copy_across_seam(self, data: st.DataObject, batch: bool) -> None:
        seam = data.draw(st.sampled_from(self._seams()))
        before = data.draw(st.integers(1, 2 * PAGE))
        after = data.draw(st.integers(1, 2 * PAGE))
        self.copy(max(seam - before, 0), seam - max(seam - before, 0) + after, batch)

    @rule(off=offsets, size=st.integers(1, 3 * PAGE), batch=st.booleans())
    def copy(self, off: int, size: int, batch: bool) -> None:
        expected = self.model.copy(off, size)
        src = self.base + off
        if batch:
            res = self.rt.cudaMemcpyBatchAsync([self.dev], [src], [size], 1, [self.attrs], [0],
                                               1, self.stream)
        else:
            res = self.rt.cudaMemcpyAsync(self.dev, src, size, 1, self.stream)
        assert int(res[0]) == expected, (off, size, self.model.live)
        self._check_last_error("cuda", expected)
        fault = self.fake.cuda_runtime.last_copy_fault
        assert (fault is None) == (expected == 0)
        if fault is not None:
            # the report names every registration the copy touched
            named = {r.base - self.base for r in fault.registrations}
            assert named == {b for b, s in self.model.live.items()
                             if b < off + size and off < b + s}

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def live_set_matches_model(self) -> None:
        got = {(r.base - self.base, r.size) for r in self.fake.live_registrations()}
        assert got == set(self.model.live.items())

    @invariant()
    def pointer_attributes_match_model(self) -> None:
        for b, s in self.model.live.items():
            _, attrs = self.rt.cudaPointerGetAttributes(self.base + b + s - 1)
            assert int(attrs.type) == 1
            assert int(attrs.hostPointer) == self.base + b + s - 1

    def teardown(self) -> None:
        for b in list(getattr(self, "model", RegistryModel("byte", "reject")).live):
            assert int(self.rt.cudaHostUnregister(self.base + b)[0]) == 0
        if hasattr(self, "fake"):
            assert self.fake.live_registrations() == []


TestRegistryStateMachine = RegistryMachine.TestCase
# examples come from the loaded Hypothesis profile (conftest.py: "ci" / "dev"); only the
# length of each run is fixed here, so a run stays short
TestRegistryStateMachine.settings = settings(stateful_step_count=30, deadline=None)

