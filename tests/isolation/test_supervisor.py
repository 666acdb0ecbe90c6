"""The supervisor itself: healthy workers are reused, dead ones replaced, and a verdict does
not depend on the order of the scenarios or on what ran before it in the same worker."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.limits import Limits, format_size, parse_size, parse_timeout
from kvreg.harness.run.progress import describe_calls
from kvreg.harness.run.supervisor import Supervisor, death_reason
from kvreg.harness.scenario import load_paths

from ..helpers.paths import isolation_spec
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, scenario_file

UPSTREAM = Path(__file__).resolve().parents[1] / "cuda_target" / "impls" / "sglang_upstream.py"


def _generic(function: str):
    return make_implementation(isolation_spec(function), isolation_spec("teardown"), "generic")


def test_a_healthy_worker_is_reused_and_a_dead_one_replaced(tmp_path: Path) -> None:
    small = [ONE_CHUNK.replace("one-chunk", f"small-{i}") for i in range(3)]
    scenario_file(tmp_path, small[0], THREE_CHUNKS, small[1], THREE_CHUNKS.replace(
        "three-chunks", "three-again"), small[2])
    scenarios = load_paths([tmp_path])
    with Supervisor(_generic("register")) as sup:
        verdicts = [r.verdict for _, r in sup.run(scenarios)]
        assert verdicts == ["pass"] * 5 and sup.started == 1
    with Supervisor(_generic("register_dies_when_chunked")) as sup:
        results = dict(sup.run(scenarios))
        assert [results[i].verdict for i in range(5)] == ["pass", "error", "pass", "error",
                                                          "pass"]
        assert sup.started == 3          # the first worker and one per death
        assert sup.in_flight() == []


def test_the_catalog_shuffled_gives_the_same_report_as_in_process() -> None:
    """Faithful upstream SGLang (failures, skips and passes) over the whole catalog: two
    workers in a shuffled order agree with one in-process run in catalog order."""
    catalog = load_paths()
    impl = make_implementation(f"{UPSTREAM}:register", None, "sglang")
    expected = [run_scenario(sc, impl).as_dict() for sc in catalog]
    order = list(range(len(catalog)))
    random.Random(20261130).shuffle(order)
    got: dict[int, dict] = {}
    with Supervisor(impl, jobs=2) as sup:
        for pos, result in sup.run([catalog[i] for i in order]):
            got[order[pos]] = result.as_dict()
    assert [_stable(got[i]) for i in range(len(catalog))] == [_stable(d) for d in expected]
    assert {d["verdict"] for d in expected} == {"pass", "fail", "skip"}


def _stable(report: dict) -> dict:  # type: ignore[type-arg]
    """A scenario's report as order and jobs cannot change it: in a many-rank scenario the
    ranks race for the host's last pages, as on the real machine, so which rank the host
    refuses (named in the messages) is the race's; its verdict and rules are not."""
    if "ranks" not in report:
        return report
    return {"id": report["id"], "verdict": report["verdict"],
            "violations": sorted({v["rule"] for v in report["violations"]}),
            "warnings": sorted({w["rule"] for w in report["warnings"]})}


@pytest.mark.parametrize(("text", "size"), [("512M", 512 << 20), ("2G", 2 << 30),
                                            ("2GiB", 2 << 30), ("1.5g", 3 << 29),
                                            ("3GB", 3 * 10**9), ("1073741824", 1 << 30)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "2X", "-1G", "1M"])
def test_bad_sizes_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        parse_size(text)


@pytest.mark.parametrize("text", ["0", "-3", "nan", "inf", "soon"])
def test_bad_timeouts_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="expected a"):
        parse_timeout(text)


def test_messages() -> None:
    assert format_size(2 << 30) == "2 GiB" and format_size(3 << 29) == "1.5 GiB"
    assert Limits(timeout=0.5).time_text() == "the time limit of 0.5 s (--timeout)"
    assert describe_calls([]) == "before any runtime call"
    assert describe_calls([("cudaHostRegister", 1)]) == "after 1 cudaHostRegister call"
    assert describe_calls([("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 1)]) == \
        "after 1 a call, 2 b calls, 3 c calls and 5 other calls"
    assert death_reason(-9, timed_out=False, limits=Limits()) == \
        "the implementation's process was killed by SIGKILL (Killed)"
    assert death_reason(3, timed_out=False, limits=Limits()) == \
        "the implementation ended the process with os._exit(3)"


def test_a_mooncake_run_that_ends_its_process_says_how_far_it_got() -> None:
    (sc,) = [s for s in load_paths() if s.id == "mooncake/sglang_mla_layer_first/above-limit"]
    impl = make_implementation(isolation_spec("register", "mooncake_exits"), None, "mooncake")
    with Supervisor(impl) as sup:
        result = sup.run_one(sc)
    assert result.verdict == "error"
    assert result.reason.startswith("the implementation ended the process with os._exit(0) "
                                    "during register of kv_buffer, after ")
    assert "2 register_buffer calls" in result.reason


def test_a_worker_left_with_running_threads_is_replaced(tmp_path: Path) -> None:
    """The verdict stands (the run completed), but no later scenario shares a process with
    the implementation's leftover thread."""
    scenario_file(tmp_path, ONE_CHUNK, THREE_CHUNKS)
    with Supervisor(_generic("register_leaves_a_thread")) as sup:
        verdicts = [r.verdict for _, r in sup.run(load_paths([tmp_path]))]
        assert verdicts == ["pass", "pass"]
        assert sup.started == 2


def test_a_worker_whose_pipe_the_implementation_closed_is_stopped(tmp_path: Path) -> None:
    scenario_file(tmp_path, THREE_CHUNKS)
    with Supervisor(_generic("register_closes_fds"), limits=Limits(timeout=600)) as sup:
        (result,) = [r for _, r in sup.run(load_paths([tmp_path]))]
    assert result.verdict == "error"
    assert result.reason == ("the implementation broke the pipe between kvreg and its worker "
                             "process during register of kv_buffer, after 2 cudaHostRegister "
                             "calls")
