"""The ``kvreg_ranks`` fixture: a test runs one function on N rank processes of one fake host.

Each call of ``kvreg_ranks.run(fn, ranks=N, host=...)`` creates a fresh fake host (RAM, the
cgroup's ``memory.max``, ``/dev/shm``, ``RLIMIT_MEMLOCK``: docs/host.md) and runs ``fn`` in
N real processes (:class:`~kvreg.harness.ranks.RankGroup`: torchrun's variables, gloo over
127.0.0.1), each with its own fake CUDA process attached to that host
(:mod:`.rank_side`). It returns every rank's outcome and the host's end state; a rank that
raised, died or hung fails the test with one line per rank (``check=False`` returns it
instead), and a hang never outlasts ``timeout``. Imports nothing heavy at load, like the
rest of the plugin.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kvreg.fakes.host.fake_host import FakeHost, HostTotals
    from kvreg.fakes.host.limits import HostLimits
    from kvreg.harness.ranks import RankGroup, RankOutcome

__all__ = ["RankRuns", "RanksResult", "host_limits", "kvreg_ranks"]

_SIZED = ("ram", "cgroup_memory_max", "shm", "memlock", "other_used", "page_cache", "reserve",
          "wmark_low", "movable")
DEFAULT_TIMEOUT_S = 60.0


def host_limits(spec: HostLimits | Mapping[str, Any]) -> HostLimits:
    """A host from ``HostLimits`` or a mapping of its fields, sizes as bytes or ``"2TiB"``."""
    from kvreg.fakes.host.limits import HostLimits
    from kvreg.harness.run.limits import parse_size

    if isinstance(spec, HostLimits):
        return spec
    fields = dict(spec)
    for key in _SIZED:
        value = fields.get(key)
        if isinstance(value, str):
            fields[key] = 0 if value.strip() in ("0", "0B") else parse_size(value)
    return HostLimits(**fields)


@dataclass
class RanksResult:
    """One call's end: ``outcomes`` by rank (``kind``: returned, raised, exited, killed,
    hung, stopped), ``pinned`` (bytes each rank held pinned when it ended), ``shm_files``
    (``/dev/shm`` then: name -> size, resident, mapped_by), ``shm_left`` (what stays once
    every rank's process is gone: files nobody unlinked), ``oom_killed`` (rank -> why, the
    host's OOM killer), ``totals`` (the host's figures at the end) and the ``host`` itself."""

    outcomes: list[RankOutcome]
    pinned: dict[int, int]
    shm_files: dict[str, dict[str, Any]]
    shm_left: dict[str, dict[str, Any]]
    oom_killed: dict[int, str]
    totals: HostTotals
    host: FakeHost
    timeout: float = DEFAULT_TIMEOUT_S

    @property
    def values(self) -> list[Any]:
        """What each rank's function returned (None where it did not return)."""
        return [o.value for o in self.outcomes]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def failures(self) -> list[str]:
        """One line per rank that did not return."""
        lines = []
        for o in self.outcomes:
            if o.ok:
                continue
            why = o.reason or f"rank {o.rank}: {o.kind}"
            if o.kind == "hung":
                why = (f"rank {o.rank}: hung: it had not returned when the call's timeout of "
                       f"{self.timeout:g} s ran out (kvreg_ranks.run(timeout=)); killed")
            if o.rank in self.oom_killed:
                why += f" (the fake host's OOM killer: {self.oom_killed[o.rank]})"
            lines.append(why)
        return lines

    def report(self) -> str:
        """The failures, then the first raised traceback, for a test's failure message."""
        first = next((o for o in self.outcomes if o.traceback), None)
        text = "\n".join(self.failures())
        return text + (f"\n\nrank {first.rank}'s traceback:\n{first.traceback}" if first
                       else "")


@dataclass
class RankRuns:
    """What the fixture gives: :meth:`run`, and the groups it started (closed at the end)."""

    folder: Path
    profile: str
    groups: dict[tuple[int, tuple[tuple[str, str], ...]], RankGroup] = field(
        default_factory=dict)
    calls: int = 0

    def run(self, fn: Callable[..., Any] | str, *, ranks: int,
            host: HostLimits | Mapping[str, Any], args: Sequence[Any] = (),
            args_per_rank: Sequence[Sequence[Any]] | None = None,
            timeout: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None,
            check: bool = True, before: Callable[[FakeHost], None] | None = None,
            cuda_machine: bool = True, setup: Callable[[], Any] | str | None = None
            ) -> RanksResult:
        """Run ``fn`` (a module-level function, or ``"module:function"``) on ``ranks``
        processes of a fresh host ``host`` (``before(host)`` may prepare it: a stale
        ``/dev/shm`` file from a crashed run), ``args`` to every rank or ``args_per_rank``.
        ``check``: a rank that did not return fails the test (pytest.fail, one line a rank).
        ``cuda_machine=False``: torch's device queries stay the CPU build's (for code whose
        imports ask the device more than kvreg models: ``get_device_name``). ``setup`` (a
        module-level function) runs in each rank before the fakes answer (its imports)."""
        from kvreg.fakes.host.fake_host import FakeHost

        spec = _spec(fn)
        self.calls += 1
        path = self.folder / f"host-{self.calls}.json"
        fake_host = FakeHost.create(path, host_limits(host))
        if before is not None:
            before(fake_host)
        per_rank = ([tuple(a) for a in args_per_rank] if args_per_rank is not None
                    else [tuple(args)] * ranks)
        first = None if setup is None else _spec(setup)
        calls = [(str(path), spec, a, self.profile, cuda_machine, first) for a in per_rank]
        outcomes = self._group(ranks, env).run("kvreg.harness.plugin.rank_side:run_on_host",
                                               calls, timeout=timeout)
        result = _end_state(fake_host, outcomes, timeout)
        if check and not result.ok:
            pytest.fail(f"kvreg_ranks: {spec} on {ranks} ranks did not return on every "
                        f"rank:\n{result.report()}", pytrace=False)
        return result

    def _group(self, ranks: int, env: Mapping[str, str] | None) -> RankGroup:
        from kvreg.harness.ranks import RankGroup

        key = (ranks, tuple(sorted((env or {}).items())))
        if key not in self.groups:
            self.groups[key] = RankGroup(ranks, env=dict(env or {}))
        return self.groups[key]

    def close(self) -> None:
        from kvreg.harness.ranks import close_all

        close_all(list(self.groups.values()), kill=True)
        self.groups.clear()


def _spec(fn: Callable[..., Any] | str) -> str:
    if isinstance(fn, str):
        return fn
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if not module or not qualname or "<" in qualname:
        raise ValueError(f"kvreg_ranks runs a module-level function the ranks can import by "
                         f"name; got {fn!r} (a lambda or a nested function is not)")
    return f"{module}:{qualname}"


def _end_state(host: FakeHost, outcomes: list[RankOutcome], timeout: float) -> RanksResult:
    """The host when the call ended, then once every rank's process is gone (each rank
    exits on the host: its pins and mappings go, its /dev/shm files stay)."""
    from kvreg.harness.ranks.outcome import died

    ranks = range(len(outcomes))
    pinned = {r: host.rank_pinned(r) for r in ranks}
    files = host.shm_files()
    oom = host.killed()
    for r in ranks:
        host.rank(r).exit()
    # the host's SIGKILL, not kvreg's stop, ended a victim whose death kvreg saw only after
    # another rank's failure (gloo raises in its peers first on a loaded machine)
    outcomes = [died(o.rank, -signal.SIGKILL, "the implementation's process was killed by "
                     f"SIGKILL (the fake host's OOM killer: {oom[o.rank]})")
                if o.kind == "stopped" and o.rank in oom else o for o in outcomes]
    return RanksResult(outcomes, pinned, files, host.shm_files(), oom, host.totals(), host,
                       timeout)


@pytest.fixture
def kvreg_ranks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[RankRuns]:
    """Run one function on N real rank processes sharing one fake host:
    ``result = kvreg_ranks.run(fn, ranks=8, host={"ram": "2TiB", "shm": "1TiB"}, args=(...))``.
    Every rank has ``torch.distributed`` initialised as torchrun would (gloo over 127.0.0.1;
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), its own fake CUDA process
    whose ``cudaHostRegister`` pins on the host, ``psutil`` / ``/proc/meminfo`` answering from
    the host and ``/dev/shm`` served by it (TiB without RAM). ``result.outcomes`` (per rank),
    ``result.values``, ``result.pinned`` (bytes per rank), ``result.shm_files``,
    ``result.shm_left`` (files no rank unlinked) and ``result.oom_killed`` show the end. A
    rank that raised, died or hung (past ``timeout``, default 60 s) fails the test with one
    line per rank unless ``check=False``; the test never hangs.
    """
    config = request.config
    profile = str(config.getoption("--kvreg-profile") or config.getini("kvreg_profile"))
    runs = RankRuns(tmp_path_factory.mktemp("kvreg-ranks"), profile)
    try:
        yield runs
    finally:
        runs.close()
