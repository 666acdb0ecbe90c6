"""The ``[host]`` options that shape what the ranks meet (docs/host.md §2, §5): a /dev/shm
file a crashed earlier run left (``stale_shm``), and which ranks the host refuses when it
cannot hold every pool (``refusal_order``). Through ``kvreg run`` on the catalog's own
scenarios (scenarios/ranks/) where one exists; the ranks are real processes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.host.fake_host import FakeHost
from kvreg.fakes.host.limits import HostLimits

from ..helpers.kvreg_cli import run_json

pytest.importorskip("torch.distributed")
IMPLS = Path(__file__).resolve().parent / "impls"
CATALOG = Path(__file__).resolve().parents[2] / "scenarios" / "ranks"
GiB, TiB = 1 << 30, 1 << 40


def _catalog(file: str, name: str, impl: str | None, *extra: str) -> dict[str, Any]:
    args = [str(CATALOG / file), "-k", name, *extra]
    if impl is not None:
        module = impl.partition(":")[0]
        args += ["--impl", str(IMPLS / impl), "--style", "generic",
                 "--teardown", f"{IMPLS / module}:teardown"]
    run = run_json(*args)
    (scenario,) = run.scenarios().values()
    return scenario


# -- a stale /dev/shm file from a crashed run --------------------------------------------------

def test_creating_the_region_exclusively_over_a_stale_file_fails_as_on_a_real_host() -> None:
    """open(O_CREAT|O_EXCL) of a name a crashed run left: EEXIST, FileExistsError (open(2);
    vllm PR #51317): the engine does not start, and the report says why."""
    s = _catalog("stale_shm.toml", "tp8-stale-engine-file", "stale_region.py:register_exclusive")
    assert s["verdict"] == "fail"
    assert s["ranks"][0]["verdict"] == "fail"
    (v,) = s["violations"]
    assert v["rule"] == "unexpected-error"
    assert v["message"].startswith("rank 0: register() of kv_buffer raised FileExistsError: "
                                   "[Errno 17] File exists: '/dev/shm/kv_cache_region'")
    assert [e["verdict"] for e in s["ranks"][1:]] == ["pass"] * 7


def test_removing_a_stale_file_first_passes() -> None:
    s = _catalog("stale_shm.toml", "tp8-stale-engine-file", "stale_region.py:register_clean_first")
    assert s["verdict"] == "pass", s


def test_code_that_never_uses_the_stale_name_passes_and_the_file_is_not_its_leak() -> None:
    """The stale file is still there after the run, but the run did not create it:
    shm-leaked does not blame the code (kvreg's reference here)."""
    s = _catalog("stale_shm.toml", "tp8-stale-engine-file", None)
    assert s["verdict"] == "pass", s


def test_a_stale_region_that_fills_dev_shm_refuses_the_new_one() -> None:
    """A crashed run's 1 TiB region in a 1.5 TiB /dev/shm: the new 1 TiB region's pins fault
    pages tmpfs cannot allocate (1, docs/host.md §5); code that goes on unpinned holds a
    region the host cannot hold beside the stale one."""
    s = _catalog("shared_region.toml", "tp8-stale-region-fills-shm", None)
    assert s["verdict"] == "pass", s
    s = _catalog("shared_region.toml", "tp8-stale-region-fills-shm",
                 "warn_and_go_on.py:register", "--pinning", "optional")
    assert s["verdict"] == "fail"
    v = next(v for v in s["violations"] if v["rule"] == "host-overcommitted")
    assert "the size of /dev/shm less the files a crashed run left in it" in v["message"]


def test_the_host_starts_with_the_stale_files_resident(tmp_path: Path) -> None:
    host = FakeHost.create(tmp_path / "host", HostLimits(
        ram=2 * TiB, stale_shm=(("kv_cache_region", 64 * GiB),)))
    assert host.shm_files() == {"kv_cache_region": {"size": 64 * GiB, "resident": 64 * GiB,
                                                    "mapped_by": [], "stale": True}}
    assert host.totals().shm == 64 * GiB
    memory = host.rank(0)
    with pytest.raises(FileExistsError):
        memory.shm_create("kv_cache_region", exclusive=True)
    memory.shm_unlink("kv_cache_region")
    assert host.shm_files() == {} and host.totals().shm == 0


# -- which rank the host refuses ---------------------------------------------------------------

def _pin_pools(order: str, arrival: list[int]) -> dict[int, int]:
    """Three ranks claim 400 GiB pools on a host that pins 1 TiB; they pin in ``arrival``
    order, 100 GiB at a time: what each pinned."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        host = FakeHost.create(Path(folder) / "host", HostLimits(ram=TiB, refusal_order=order))
        ranks = {r: host.rank(r) for r in range(3)}
        for memory in ranks.values():
            memory.claim(400 * GiB)
        for step in range(4):
            for r in arrival:
                base = (r + 1) * TiB + step * 100 * GiB
                ranks[r].pin(base, 100 * GiB)
        return {r: host.rank_pinned(r) // GiB for r in ranks}


def test_rank_order_refuses_the_highest_rank_whatever_the_arrival() -> None:
    assert _pin_pools("rank", [2, 1, 0]) == {0: 400, 1: 400, 2: 200}
    assert _pin_pools("rank", [0, 1, 2]) == {0: 400, 1: 400, 2: 200}


def test_arrival_order_refuses_whoever_comes_when_the_memory_is_gone() -> None:
    """The real host (docs/host.md §5): the pins that arrive once the memory is gone are
    refused, whichever ranks make them."""
    assert _pin_pools("arrival", [2, 1, 0]) == {0: 300, 1: 300, 2: 400}
    assert _pin_pools("arrival", [0, 1, 2]) == {0: 400, 1: 300, 2: 300}


def test_the_refused_rank_is_the_same_on_every_run() -> None:
    """The catalog's host that holds 7 of 8 pools: rank 7 is refused each time, so the
    verdict of code that goes on unpinned names the same rank on every run."""
    for _ in range(3):
        s = _catalog("per_rank_pools.toml", "tp8-host-holds-7-of-8",
                     "warn_and_go_on.py:register", "--pinning", "optional")
        v = next(v for v in s["violations"] if v["rule"] == "ranks-incoherent")
        assert "ranks 0, 1, 2, 3, 4, 5, 6 hold the pool pinned" in v["message"], v
        assert "rank 7 registered 0 bytes of 256 GiB" in v["message"], v


# -- a rank the OOM killer takes ----------------------------------------------------------------

def test_code_that_raises_where_the_host_refuses_is_never_oom_killed() -> None:
    """The catalog's first fill of eight 300 GiB pools on a 2 TiB host: the refused ranks
    (6 and 7) raise, the others' pools are pinned and so resident: the fill faults nothing."""
    s = _catalog("per_rank_pools.toml", "tp8-fill-oom-killed", None)
    assert s["verdict"] == "pass", s
    s = _catalog("per_rank_pools.toml", "tp8-fill-oom-killed", "all_or_nothing.py:register_raise")
    assert s["verdict"] == "pass", s


def test_a_rank_that_goes_on_unpinned_fills_the_host_and_the_oom_killer_takes_the_largest() -> None:
    """Ranks 0-5 pin their 300 GiB pools; rank 6 pinned 192 GiB before it was refused and
    rolled back (the pages stay resident), rank 7 nothing. Their fills do not fit the 2 TiB
    host: the OOM killer takes the task with the highest oom_badness, its RSS (mm/oom_kill.c
    ``oom_badness``: ``get_mm_rss``, docs/host.md §1), the lowest rank on a tie. The ranks
    fill in rank order once every register ended, so rank 6's fill takes rank 0 and rank
    7's rank 1; the others are stopped by rank 0's death. The same report on every run,
    whatever the load: the victims are a function of the scenario, not of the timing."""
    reports = []
    for _ in range(2):
        s = _catalog("per_rank_pools.toml", "tp8-fill-oom-killed", "warn_and_go_on.py:register",
                     "--pinning", "optional")
        assert s["verdict"] == "error", s
        assert s["violations"] == []
        ranks = [(e["rank"], e["verdict"], e.get("reason", "")) for e in s["ranks"]]
        assert [r[1] for r in ranks] == ["error"] * 8, s
        assert [r[2] for r in ranks[2:]] == ["stopped: rank 0 died"] * 6, s
        killed = [re.fullmatch(r"rank (\d) was OOM-killed by the host: out of memory: "
                               r"(\d+) bytes more did not fit", r[2]) for r in ranks[:2]]
        assert all(killed), s
        assert [int(k.group(1)) for k in killed if k] == [0, 1]
        # rank 6 lacked its pool less what it had pinned (three chunks of at most 64 GiB,
        # chunk_gb); rank 7 its whole pool
        short6, short7 = (int(k.group(2)) for k in killed if k)
        assert 190 * GiB < short7 - short6 <= 192 * GiB, s
        assert s["reason"] == ranks[0][2], s        # the host's first victim
        reports.append((s["reason"], ranks))
    assert reports[1] == reports[0]
