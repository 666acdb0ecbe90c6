"""Workers started before the scenarios are loaded (``Supervisor.start_early``, what ``kvreg
run`` does): they import torch themselves while kvreg's process loads the catalog, so that
process never imports torch; each is prepared for the configuration of the first scenario it
is given exactly as a worker forked for that configuration is, and one never given any is
stopped with the run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvreg.harness.run import worker
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.limits import Limits
from kvreg.harness.run.process import process_config
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.scenario import load_paths

from ..helpers.paths import REPO, isolation_spec
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, VIRTUAL_MLA_POOL, scenario_file
from .test_worker_reuse import _sample

ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"


def _verdicts(sup: Supervisor, scenarios: list) -> list[tuple]:  # type: ignore[type-arg]
    results = dict(sup.run(scenarios))
    return [(results[i].verdict, results[i].violations, results[i].reason)
            for i in range(len(scenarios))]


def test_early_workers_give_the_verdicts_of_forked_ones() -> None:
    scenarios = _sample()      # ten configurations, interleaved
    impl = make_implementation()
    with Supervisor(impl) as sup:
        forked = _verdicts(sup, scenarios)
    with Supervisor(impl) as sup:
        sup.start_early()
        early = _verdicts(sup, scenarios)
        assert sup.started == 1, "the reference's early worker serves every configuration"
    assert early == forked


def test_an_early_worker_takes_its_first_scenarios_configuration(tmp_path: Path) -> None:
    """The implementation reads the chunk limit at import: the early worker must import it
    anew with the first scenario's 2 GiB set (the one loaded in kvreg's process, with no
    limit set, registers in one call: chunk-over-limit), and the 1 GiB scenarios need a
    worker of their own."""
    two_file = tmp_path / "two.toml"
    two_file.write_text((VIRTUAL_MLA_POOL + THREE_CHUNKS).replace("chunk_gb = 1",
                                                                  "chunk_gb = 2"))
    scenarios = [*load_paths([two_file]),
                 *load_paths([scenario_file(tmp_path, THREE_CHUNKS, ONE_CHUNK, name="one")])]
    assert dict(process_config(scenarios[0]).env)[ENV_CHUNK_GB] == "2"
    impl = make_implementation(isolation_spec("sglang_register", "bound_at_import"),
                               isolation_spec("sglang_teardown", "bound_at_import"), "sglang")
    with Supervisor(impl) as sup:
        sup.start_early()
        results = dict(sup.run(scenarios))
        assert sup.started == 2
    assert [results[i].verdict for i in range(3)] == ["pass"] * 3, \
        [results[i].violations for i in range(3)]


def test_an_early_workers_imports_are_no_scenarios_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing torch on a loaded machine can take longer than a scenario's time limit: the
    supervisor waits for it as it waits for its own import before forking, and the first
    scenario's limit starts when the worker is prepared (else: an error verdict blaming the
    implementation for kvreg's import)."""
    imports = worker.preload

    def slow_imports() -> None:
        imports()
        time.sleep(4.0)

    monkeypatch.setattr(worker, "preload", slow_imports)   # the fork inherits it
    scenarios = load_paths([scenario_file(tmp_path, ONE_CHUNK)])
    with Supervisor(make_implementation(), limits=Limits(timeout=2.0)) as sup:
        sup.start_early()
        (result,) = [r for _, r in sup.run(scenarios)]
    assert result.verdict == "pass", result.reason


def test_early_workers_never_given_a_scenario_are_stopped() -> None:
    impl = make_implementation()
    sup = Supervisor(impl, jobs=4)
    sup.start_early()
    processes = [w.process for w in sup._workers]
    assert 1 <= len(processes) <= 4
    sup.close()        # still importing, or waiting for a first configuration: killed
    assert all(p.exitcode is not None for p in processes)
    assert sup._workers == []


def _torch_in_kvregs_process(*args: str) -> str:
    code = ("import sys; from kvreg.harness.cli.main import main; "
            f"code = main(['run', '-q', *{list(args)!r}]); "
            "print('torch' in sys.modules, code)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_a_supervised_run_leaves_torchs_import_to_its_workers() -> None:
    one = "-k=mla/chunk_env/unset-default-256gib"
    assert _torch_in_kvregs_process(one) == "False 0"
    # what the check tells apart: a run in kvreg's own process imports torch
    assert _torch_in_kvregs_process(one, "--in-process") == "True 0"
