"""Workers serve one process configuration (harness/run/process.py): what code may read once
per process (the chunk-limit and MR-limit variables, the device and NIC profile) is fixed
for a worker, set before it imports the implementation anew; what an installed package read
at import with another value is an ``error`` naming it, never a ``fail``."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.process import import_conflict, process_config
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.run.target import ProcessConfig
from kvreg.harness.scenario import load_paths
from kvreg.harness.scenario.format import Scenario

from ..helpers.paths import isolation_spec
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, VIRTUAL_MLA_POOL, scenario_file

ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"


def _two_configs(tmp_path: Path) -> list[Scenario]:
    """A B A B: scenarios of 1 GiB and 2 GiB chunk limits, interleaved."""
    one = load_paths([scenario_file(tmp_path, THREE_CHUNKS, ONE_CHUNK, name="one")])
    two_file = tmp_path / "two.toml"
    two_file.write_text((VIRTUAL_MLA_POOL + THREE_CHUNKS + ONE_CHUNK).replace("chunk_gb = 1",
                                                                              "chunk_gb = 2"))
    two = load_paths([two_file])
    return [one[0], two[0], one[1], two[1]]


def test_a_worker_per_configuration_reused_within_it(tmp_path: Path) -> None:
    scenarios = _two_configs(tmp_path)
    configs = [process_config(sc) for sc in scenarios]
    assert configs[0] == configs[2] != configs[1] == configs[3]
    assert dict(configs[0].env)[ENV_CHUNK_GB] == "1" and dict(configs[1].env)[ENV_CHUNK_GB] == "2"
    impl = make_implementation(isolation_spec("sglang_register", "bound_at_import"),
                               isolation_spec("sglang_teardown", "bound_at_import"), "sglang")
    # the module read the variable at import, and kvreg sees it when it imports it anew
    # (as a worker does; an earlier test may have imported it in this process already)
    assert any(key == ENV_CHUNK_GB and module.startswith("kvreg_user_")
               for key, module, _ in impl.reloaded().import_reads)
    with Supervisor(impl) as sup:
        results = dict(sup.run(scenarios))
        assert sup.started == 2          # one worker per configuration, not per scenario
    assert [results[i].verdict for i in range(4)] == ["pass"] * 4, [
        results[i].violations for i in range(4)]


def test_an_installed_module_that_read_another_value_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = ProcessConfig("cuda", ((ENV_CHUNK_GB, "1"),), ("h200-r580",))
    # json stands for an installed package (it lives in the interpreter's library)
    assert import_conflict([(ENV_CHUNK_GB, "json", "1")], config) is None
    why = import_conflict([(ENV_CHUNK_GB, "json", "4")], config)
    assert why is not None and "json (an installed package) read " \
        "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB='4'" in why and "sets " in why
    # the code's own modules are imported anew per configuration: no conflict to report
    mine = types.ModuleType("kvreg_user_0")
    mine.__file__ = str(tmp_path / "mine.py")
    monkeypatch.setitem(sys.modules, "kvreg_user_0", mine)
    assert import_conflict([(ENV_CHUNK_GB, "kvreg_user_0", "4")], config) is None

    sc = load_paths([scenario_file(tmp_path, THREE_CHUNKS)])[0]
    impl = Implementation("reference", "kvreg reference",
                          import_reads=((ENV_CHUNK_GB, "json", "4"),))
    with Supervisor(impl) as sup:
        result = sup.run_one(sc)
    assert result.verdict == "error" and not result.violations
    assert result.reason.startswith("kvreg cannot run this scenario: json (an installed")
