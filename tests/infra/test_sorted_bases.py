"""The sorted set behind the pinned-range table: a model-checked property test."""

from __future__ import annotations

import bisect

from hypothesis import given
from hypothesis import strategies as st

from kvreg.fakes.cuda import sorted_bases
from kvreg.fakes.cuda.sorted_bases import SortedBases


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3000)), max_size=400),
       st.lists(st.integers(-5, 3005), max_size=20))
def test_matches_a_sorted_list(ops: list[tuple[bool, int]], queries: list[int]) -> None:
    old = sorted_bases.LOAD
    sorted_bases.LOAD = 4  # tiny blocks so splits and empty blocks happen
    try:
        s, model = SortedBases(), []
        for add, v in ops:
            if add and v not in model:
                s.add(v)
                bisect.insort(model, v)
            elif not add and v in model:
                s.remove(v)
                model.remove(v)
        assert list(s) == model and len(s) == len(model)
        for q in queries:
            i = bisect.bisect_right(model, q)
            assert s.floor(q) == (model[i - 1] if i else None)
            j = bisect.bisect_left(model, q)
            assert s.floor(q, strict=True) == (model[j - 1] if j else None)
            start = model[i - 1] if i else None
            expect = model[model.index(start):] if start is not None else model
            assert list(s.iter_from(q)) == expect
    finally:
        sorted_bases.LOAD = old


def test_remove_absent_raises_keyerror() -> None:
    s = SortedBases()
    s.add(5)
    for bad in (4, 6):
        try:
            s.remove(bad)
        except KeyError:
            pass
        else:
            raise AssertionError("remove of an absent value must raise")
    assert list(s) == [5]
