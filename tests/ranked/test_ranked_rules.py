"""Many-rank scenarios through ``kvreg run`` (harness/ranks/scenario.py): each cross-rank
rule catches a broken implementation and passes correct ones written differently, among
them code that agrees through real torch.distributed collectives (an all-reduce MIN of a
budget, an all-or-nothing registration); a rank killed or hung is an ``error`` naming the
rank, never a hung run. The ranks are real processes (gloo over 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..helpers.kvreg_cli import run_json

pytest.importorskip("torch.distributed")
IMPLS = Path(__file__).resolve().parent / "impls"
POOL = '''format = 1
[pool]
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
[host]
ram = "2TiB"
[defaults]
chunk_gb = 64
backends = ["fake"]
'''
# rank 1's second chunk fails; its peers pin theirs (vLLM #51762)
ONE_RANK_FAILS = '''[[scenario]]
name = "one-rank-fails"
guards = "one rank's registration fails while its peers pin (vllm #51762)"
ranks = 4
total_gib = 200
faults = [{ point = "cudart.cudaHostRegister", nth = 2, error = 1, rank = 1 }]
expect = "register-error"
'''
# a host that can pin three of four 600 GiB pools
THREE_OF_FOUR = '''[[scenario]]
name = "three-of-four"
guards = "the host pins three of four pools: the fourth is refused (vllm PR #57160)"
ranks = 4
total_gib = 600
expect = "register-error"
'''
PLAIN = '''[[scenario]]
name = "plain"
guards = "two ranks pin their pools and tear them down (vllm #51762)"
ranks = 2
total_gib = 100
'''


def _run(tmp_path: Path, scenarios: str, impl: str, *extra: str) -> dict[str, Any]:
    path = tmp_path / "ranked.toml"
    path.write_text(POOL + scenarios)
    run = run_json(str(path), "--impl", f"{IMPLS / impl}", "--style", "generic", *extra)
    (scenario,) = run.scenarios().values()
    return scenario


def _rules(scenario: dict[str, Any]) -> set[str]:
    return {v["rule"] for v in scenario["violations"]}


@pytest.mark.parametrize("pinning", ["required", "optional"])
def test_a_rank_that_goes_on_unpinned_is_incoherent(tmp_path: Path, pinning: str) -> None:
    s = _run(tmp_path, ONE_RANK_FAILS, "warn_and_go_on.py:register", "--pinning", pinning)
    assert s["verdict"] == "fail"
    assert "ranks-incoherent" in _rules(s)
    incoherent = next(v for v in s["violations"] if v["rule"] == "ranks-incoherent")
    assert "ranks 0, 2, 3 hold the pool pinned" in incoherent["message"]
    assert "rank 1 registered 0 bytes of 200 GiB" in incoherent["message"]
    assert [s["ranks"][r]["verdict"] for r in (0, 2, 3)] == ["pass"] * 3
    assert s["ranks"][1]["verdict"] == "fail"
    if pinning == "required":
        assert any(v["rule"] == "error-swallowed" for v in s["ranks"][1]["violations"])


@pytest.mark.parametrize(("impl", "pinning"), [
    ("all_or_nothing.py:register_raise", "required"),
    ("all_or_nothing.py:register_fallback", "optional"),
])
def test_an_all_or_nothing_registration_agreed_by_all_reduce_passes(
        tmp_path: Path, impl: str, pinning: str) -> None:
    s = _run(tmp_path, ONE_RANK_FAILS, impl, "--pinning", pinning)
    assert s["verdict"] == "pass", s
    assert [e["verdict"] for e in s["ranks"]] == ["pass"] * 4


def test_a_host_that_cannot_hold_the_pools_is_overcommitted_when_nothing_refuses(
        tmp_path: Path) -> None:
    s = _run(tmp_path, THREE_OF_FOUR, "warn_and_go_on.py:register", "--pinning", "optional")
    assert "host-overcommitted" in _rules(s)
    message = next(v for v in s["violations"] if v["rule"] == "host-overcommitted")["message"]
    assert "4 pools of 600 GiB (2.344 TiB)" in message and "holds 2 TiB" in message


@pytest.mark.parametrize("impl", ["min_budget.py:register", "all_or_nothing.py:register_raise"])
def test_refusing_a_host_that_cannot_hold_the_pools_passes(tmp_path: Path, impl: str) -> None:
    """A MIN all-reduce of psutil's available memory (the fake host's /proc/meminfo) refuses
    before any call; an all-or-nothing registration raises after the host's refusal."""
    s = _run(tmp_path, THREE_OF_FOUR, impl)
    assert s["verdict"] == "pass", s
    assert "host-overcommitted" not in _rules(s)


def test_an_engine_file_left_in_dev_shm_is_leaked(tmp_path: Path) -> None:
    s = _run(tmp_path, PLAIN, "engine_shm.py:register_kept", "--teardown",
             f"{IMPLS / 'engine_shm.py'}:teardown")
    assert _rules(s) == {"shm-leaked"}
    messages = sorted(v["message"] for v in s["violations"])
    assert messages[0].startswith("/dev/shm/engine-0 (1 MiB, 0 bytes resident) is still "
                                  "there after teardown on every rank")


@pytest.mark.parametrize(("impl", "teardown"), [
    ("register_unlink_at_teardown", "teardown_unlink"),
    ("register_unlink_once_mapped", "teardown"),
])
def test_an_engine_file_unlinked_passes(tmp_path: Path, impl: str, teardown: str) -> None:
    s = _run(tmp_path, PLAIN, f"engine_shm.py:{impl}", "--teardown",
             f"{IMPLS / 'engine_shm.py'}:{teardown}")
    assert s["verdict"] == "pass", s


@pytest.mark.parametrize("in_process", [False, True])
def test_a_killed_rank_is_an_error_naming_it(tmp_path: Path, in_process: bool) -> None:
    s = _run(tmp_path, PLAIN, "dying_rank.py:register_killed",
             *(["--in-process"] if in_process else []))
    assert s["verdict"] == "error"
    assert s["reason"].startswith("rank 1: the implementation's process was killed by SIGKILL")
    assert s["ranks"][1]["verdict"] == "error"


@pytest.mark.parametrize("in_process", [False, True])
def test_a_hung_rank_is_an_error_naming_it(tmp_path: Path, in_process: bool) -> None:
    s = _run(tmp_path, PLAIN, "dying_rank.py:register_hangs", "--timeout", "20",
             *(["--in-process"] if in_process else []))
    assert s["verdict"] == "error"
    assert s["reason"].startswith("rank 1: the implementation did not finish within"), s
    assert s["ranks"][1]["verdict"] == "error"


def test_the_group_is_reused_across_scenarios_and_jobs(tmp_path: Path) -> None:
    s = PLAIN + PLAIN.replace('"plain"', '"plain-2"') + ONE_RANK_FAILS
    path = tmp_path / "many.toml"
    path.write_text(POOL + s)
    run = run_json(str(path), "-j", "2")
    assert {v["verdict"] for v in run.scenarios().values()} == {"pass"}


def test_a_rank_the_host_oom_killed_is_an_error_naming_it(tmp_path: Path) -> None:
    """Rank 0 fills 600 GiB, then rank 1's 600 GiB fill does not fit a 1 TiB host: the OOM
    killer takes rank 0 (the most resident memory, docs/host.md §1); rank 1 waits for it in
    a barrier and is stopped."""
    scenario = PLAIN.replace("total_gib = 100", 'total_gib = 600\nhost = { ram = "1TiB" }')
    s = _run(tmp_path, scenario, "touches_its_pool.py:register")
    assert s["verdict"] == "error"
    assert s["reason"].startswith("rank 0 was OOM-killed by the host: out of memory"), s
    assert [e["verdict"] for e in s["ranks"]] == ["error", "error"]


FOUR_FIT = '''[[scenario]]
name = "four-fit"
guards = "four 400 GiB pools fit a 2 TiB host (sglang #38156)"
ranks = 4
total_gib = 400
'''


def test_a_budget_read_after_the_peers_pinned_is_caught(tmp_path: Path) -> None:
    """Ranks 2 and 3 read `available` after their peers pinned and count them twice."""
    s = _run(tmp_path, FOUR_FIT, "budget_read_late.py:register")
    assert s["verdict"] == "fail"
    assert [e["verdict"] for e in s["ranks"]] == ["pass", "pass", "fail", "fail"]
    assert {v["rule"] for v in s["ranks"][2]["violations"]} == {"unexpected-error"}


def test_a_budget_agreed_by_min_all_reduce_passes_where_the_pools_fit(tmp_path: Path) -> None:
    s = _run(tmp_path, FOUR_FIT, "min_budget.py:register")
    assert s["verdict"] == "pass", s
