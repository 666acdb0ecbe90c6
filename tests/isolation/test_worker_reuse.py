"""A worker serves the next process configuration only where that one is the same deployment
to the code under test (harness/run/process.py ``same_deployment``): nothing outside kvreg
read a watched variable whose value differs, and the machine is the same unless no code
outside kvreg ran in the worker. Each proof below also runs with reuse forced, to show the
verdict it protects would change."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvreg.harness.run import worker
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.process import process_config, same_deployment
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.run.target import ProcessConfig
from kvreg.harness.scenario import load_paths
from kvreg.harness.scenario.format import Scenario

from ..helpers.paths import isolation_spec
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, VIRTUAL_MLA_POOL, scenario_file

ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
H200 = ProcessConfig("cuda", ((ENV_CHUNK_GB, "1"),), ("h200-r580",))
H200_2 = ProcessConfig("cuda", ((ENV_CHUNK_GB, "2"),), ("h200-r580",))
H100_1 = ProcessConfig("cuda", ((ENV_CHUNK_GB, "1"),), ("h100-r575",))
MOONCAKE = ProcessConfig("mooncake", (("MC_MAX_MR_SIZE", "65536"),),
                         ("released", (("mlx5_0", "mlx5"),), None, False))
BASE: dict[str, str | None] = {ENV_CHUNK_GB: None, "MC_MAX_MR_SIZE": None}


def test_the_rule() -> None:
    # nothing outside kvreg read anything: another limit is the same deployment to the code
    assert same_deployment(H200, H200_2, BASE, set(), only_kvreg=False)
    # ... unless the code read that variable
    assert not same_deployment(H200, H200_2, BASE, {ENV_CHUNK_GB}, only_kvreg=False)
    # a variable the code read that both set alike does not matter
    assert same_deployment(H200, H100_1, BASE, {ENV_CHUNK_GB}, only_kvreg=True)
    # another machine: only where no code outside kvreg ran (it could keep a device fact)
    assert not same_deployment(H200, H100_1, BASE, set(), only_kvreg=False)
    assert same_deployment(H200, H100_1, BASE, set(), only_kvreg=True)
    # the cuda limit the code read is set in a cuda worker, and unset (BASE) in a Mooncake one
    assert not same_deployment(H200, MOONCAKE, BASE, {ENV_CHUNK_GB}, only_kvreg=True)
    assert same_deployment(H200, MOONCAKE, BASE, set(), only_kvreg=True)
    assert same_deployment(H200, MOONCAKE, {**BASE, ENV_CHUNK_GB: "1"}, {ENV_CHUNK_GB},
                           only_kvreg=True)


def _limits_two_then_one(tmp_path: Path) -> list[Scenario]:
    """The three-chunk pool at a 2 GiB limit first, then at a 1 GiB limit."""
    two_file = tmp_path / "two.toml"
    two_file.write_text((VIRTUAL_MLA_POOL + THREE_CHUNKS).replace("chunk_gb = 1", "chunk_gb = 2"))
    one = load_paths([scenario_file(tmp_path, THREE_CHUNKS, ONE_CHUNK, name="one")])
    return [*load_paths([two_file]), *one]


@pytest.mark.parametrize("forced", [False, True])
def test_a_variable_read_on_the_first_call_keeps_its_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: bool) -> None:
    scenarios = _limits_two_then_one(tmp_path)
    assert process_config(scenarios[0]) != process_config(scenarios[1])
    impl = make_implementation(isolation_spec("sglang_register", "read_on_first_call"),
                               isolation_spec("sglang_teardown", "read_on_first_call"), "sglang")
    if forced:   # reuse whatever was read: the worker is forked with this in place
        monkeypatch.setattr(worker, "same_deployment", lambda *a, **k: True)
    with Supervisor(impl) as sup:
        results = dict(sup.run(scenarios))
        started = sup.started
    verdicts = [results[i].verdict for i in range(3)]
    if forced:
        # the 2 GiB it read first, kept into a 1 GiB deployment: a fail that is kvreg's doing
        assert started == 1 and verdicts[0] == "pass" and verdicts[1] == "fail"
        assert any(v.rule == "chunk-over-limit" for v in results[1].violations)
    else:
        assert started == 2, "the code read the limit: a new limit is a new deployment"
        assert verdicts == ["pass"] * 3, [results[i].violations for i in range(3)]


def test_code_that_read_nothing_shares_a_worker_within_a_machine(tmp_path: Path) -> None:
    scenarios = _limits_two_then_one(tmp_path)
    # the ctypes style gets its chunk limit as an argument: this code reads no variable
    impl = make_implementation(isolation_spec("ctypes_cached", "caching"),
                               isolation_spec("ctypes_cached_teardown", "caching"), "ctypes")
    h100_file = tmp_path / "h100.toml"
    h100_file.write_text((VIRTUAL_MLA_POOL + THREE_CHUNKS).replace('"h200-r580"', '"h100-r575"'))
    scenarios += load_paths([h100_file])
    with Supervisor(impl) as sup:
        results = dict(sup.run(scenarios))
        # two limits on one machine share it; the other machine gets its own worker
        assert sup.started == 2
    assert [results[i].verdict for i in range(4)] == ["pass"] * 4


def _sample() -> list[Scenario]:
    """Two scenarios of each of the catalog's first ten configurations, interleaved."""
    by_config: dict[ProcessConfig, list[Scenario]] = {}
    for sc in load_paths():
        config = process_config(sc)
        if config in by_config or len(by_config) < 10:
            by_config.setdefault(config, []).append(sc)
    groups = list(by_config.values())
    return [g[0] for g in groups] + [g[1] for g in groups if len(g) > 1]


def test_the_reference_runs_every_configuration_in_one_worker_with_the_same_verdicts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scenarios = _sample()
    configs = Counter(process_config(sc) for sc in scenarios)
    assert len(configs) == 10 and len({c.machine for c in configs}) > 2
    impl = make_implementation()
    with Supervisor(impl) as sup:
        shared = dict(sup.run(scenarios))
        assert sup.started == 1
    monkeypatch.setattr(worker, "same_deployment", lambda *a, **k: False)
    with Supervisor(impl) as sup:
        fresh = dict(sup.run(scenarios))
        assert sup.started == len(configs)
    for i in range(len(scenarios)):
        assert (shared[i].verdict, shared[i].violations, shared[i].reason) == \
            (fresh[i].verdict, fresh[i].violations, fresh[i].reason), scenarios[i].id


def test_reads_are_noted_through_every_way_to_the_environment() -> None:
    code = """
import os
from os import environ
from kvreg.harness.run.process import note_env_reads
read = note_env_reads()
assert isinstance(os.environ, os._Environ) and os.environ is environ
os.environ["PATH"]; os.getenv("HOME")
assert not read
environ.get("MC_MAX_MR_SIZE")
assert read == {"MC_MAX_MR_SIZE"}, read
"SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB" in os.environ
assert len(read) == 2, read
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
