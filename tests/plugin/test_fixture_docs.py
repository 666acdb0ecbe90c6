"""What ``pytest --fixtures`` and ``help()`` show is enough to use kvreg without its source."""

from __future__ import annotations

import pydoc

import pytest
from hypothesis import given

from kvreg.harness import strategies


def test_fixtures_listing_shows_each_fixture_in_full(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--fixtures")
    text = result.stdout.str()
    # pytest prints only the first paragraph of a fixture's docstring without -v: these
    # phrases sit at the end of kvreg's docstrings, so they show only if nothing is cut
    for phrase in ("unless it is marked ``kvreg_allow_leaks``",          # fake_cudart
                   "-600 (INVALID_PARAMS)", "kvreg_mooncake_store",      # fake_mooncake
                   "every page's byte range",                            # kvreg_pool
                   "raise, or delay",                                    # kvreg_faults
                   "register_buffer(ptr, size)`` works at once",         # kvreg_mooncake_store
                   "the test never hangs"):                              # kvreg_ranks
        assert phrase in text, phrase


def test_mooncake_store_fixture_needs_no_hidden_call(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
def test_store(kvreg_mooncake_store, fake_mooncake):
    buf = fake_mooncake.virtual(1 << 20, name="pool")
    assert kvreg_mooncake_store.register_buffer(buf.data_ptr(), 1 << 20) == 0
    assert kvreg_mooncake_store.unregister_buffer(buf.data_ptr()) == 0

def test_unset_store_crashes_loudly(fake_mooncake):
    # docs/mooncake-verbs.md §7: the real store segfaults on this call before setup()
    import pytest
    from kvreg.fakes.mooncake import StoreCrash
    buf = fake_mooncake.virtual(1 << 20, name="pool")
    with pytest.raises(StoreCrash):
        fake_mooncake.store().register_buffer(buf.data_ptr(), 1 << 20)
''')
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_help_of_the_strategies_names_units() -> None:
    text = pydoc.render_doc(strategies, renderer=pydoc.plaintext)
    assert "in bytes" in text and "whole GiB" in text and "chunk_gb" in text


@given(strategies.registered_geometries().flatmap(
    lambda g: strategies.chunk_gb(g).map(lambda n: (g, n))))
def test_chunk_gb_draws_whole_gib(pair) -> None:
    _, n = pair
    assert isinstance(n, int) and 1 <= n <= 1024
