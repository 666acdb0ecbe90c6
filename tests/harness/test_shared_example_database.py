"""kvreg's state machine and strategies replay from Hypothesis's shared example databases.

A failure found on one CI runner is saved in the example database; another machine that
reads the same database (a shared directory, or GitHub's artifact database) replays it first.
That only works if every choice the machine and the strategies make comes from Hypothesis
(no unseeded randomness, no machine state), which is what these tests pin: a run that does
nothing but replay the saved examples (``phases=[Phase.reuse]``) fails again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)
from hypothesis.stateful import run_state_machine_as_test

from kvreg.harness import strategies
from kvreg.harness.state_machine import RegistrationMachine


def no_rollback_register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                         chunk_limit: int) -> list[tuple[int, int]]:
    """Forgets the chunks before a failing one (the bug the machine must catch)."""
    chunk = chunk_limit // granularity * granularity if granularity else chunk_limit
    out = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        if int(cudart.cudaHostRegister(ptr + off, size, 0)):
            raise RuntimeError("failed")
        out.append((ptr + off, size))
    return out


class NoRollback(RegistrationMachine):
    register_impl = staticmethod(no_rollback_register)


def _saved(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


@pytest.mark.expensive_property
def test_a_state_machine_failure_replays_from_a_shared_directory(tmp_path: Path) -> None:
    shared = tmp_path / "hypothesis-db"
    # a random search (a shared database needs derandomize=False): enough examples that
    # the planted bug is found on every run, not only on most
    find = settings(max_examples=400, stateful_step_count=8, deadline=None,
                    database=DirectoryBasedExampleDatabase(shared), derandomize=False)
    with pytest.raises(AssertionError, match=r"left .* chunk"):
        run_state_machine_as_test(NoRollback, settings=find)
    assert _saved(shared) >= 1
    # "another machine": a fresh database object over the same directory, read-only, and
    # nothing but the replay phase — the saved failure alone must reproduce it
    replay = settings(max_examples=40, stateful_step_count=8, deadline=None,
                      phases=[Phase.reuse],
                      database=ReadOnlyDatabase(DirectoryBasedExampleDatabase(shared)))
    with pytest.raises(AssertionError, match=r"left .* chunk"):
        run_state_machine_as_test(NoRollback, settings=replay)


def test_strategy_examples_replay_through_a_multiplexed_database(tmp_path: Path) -> None:
    local, shared = tmp_path / "local", tmp_path / "shared"
    db = MultiplexedDatabase(DirectoryBasedExampleDatabase(local),
                             DirectoryBasedExampleDatabase(shared))
    seen: list[tuple[str, int]] = []

    def body(geometry: Any, limit: int) -> None:
        seen.append((repr(geometry.describe()), limit))
        # a property that fails for some drawn geometries: more than one buffer
        assert len(geometry.buffers()) == 1, "several buffers"

    def run(db_: Any, phases: list[Phase]) -> None:
        @settings(database=db_, phases=phases, max_examples=50, deadline=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(strategies.registered_geometries().flatmap(
            lambda g: strategies.chunk_limits(g).map(lambda lim: (g, lim))))
        def prop(pair: tuple[Any, int]) -> None:
            body(*pair)

        prop()

    with pytest.raises(AssertionError, match="several buffers"):
        run(db, [Phase.generate, Phase.shrink])
    assert _saved(shared) >= 1 and _saved(local) >= 1
    failing = seen[-1]
    seen.clear()
    with pytest.raises(AssertionError, match="several buffers"):
        run(ReadOnlyDatabase(DirectoryBasedExampleDatabase(shared)), [Phase.reuse])
    assert seen[0] == failing            # the same shrunk example, replayed first
