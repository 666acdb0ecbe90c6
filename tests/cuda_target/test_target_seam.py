"""The runner core knows a target only through the Target / World seam (harness/run/target.py).

A stub target registered under a new name is driven exactly as the core promises: build,
then inside the isolation register, transfers (only when registering succeeded and the
scenario asks), the teardown mark and one teardown per teardown step, then finish and judge.
Scenario validation asks the named target for its steps and options and runs no runner code.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import CallBudgetExceeded, Violation
from kvreg.harness.run.target import CannotRun, SkipScenario
from kvreg.harness.run.targets import TARGETS, get_target
from kvreg.harness.scenario import Scenario, ScenarioError, bundled_root, load_file

STUB = '''
from contextlib import contextmanager
from kvreg.harness.run.result import Violation

LOG = []

class World:
    def __init__(self, ok, raise_in):
        self.ok, self.raise_in = ok, raise_in
    @contextmanager
    def isolation(self):
        LOG.append("enter")
        try:
            yield
        finally:
            LOG.append("exit")
    def set_logs(self, logs): LOG.append("logs")
    def watch(self, progress): pass
    def register(self, impl):
        LOG.append("register")
        if self.raise_in == "register":
            raise self.exc
        return self.ok
    def transfer(self): LOG.append("transfer")
    def begin_teardown(self): LOG.append("begin_teardown")
    def teardown(self, impl, round_, step): LOG.append(f"teardown {round_} {step}")
    def budget_spent(self): LOG.append("budget")
    def finish(self): LOG.append("finish")
    def judge(self):
        LOG.append("judge")
        return [] if self.ok else [Violation("stub", "registering failed")]
    def warnings(self):
        LOG.append("warnings")
        return [Violation("stub-note", "recovered")] if self.ok else []
    def calls(self): return 7
    def trace_text(self, limit): return f"trace {limit}"
    def copy_coverage(self): return None

class Target:
    name = "stub"
    steps = ("register", "transfers", "teardown")
    watched_env = ()
    default_machine = ()
    title = "Stub"
    options_table = None
    style_calls = {}
    style_contracts = {}
    takes_base_offset = True
    world = None
    def validate_options(self, options): return []
    def build(self, sc, impl, backend):
        LOG.append(f"build {backend}")
        if isinstance(self.world, BaseException):
            raise self.world
        return self.world

TARGET = Target()
'''


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "kvreg_stub_target.py").write_text(STUB)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(TARGETS, "stub", "kvreg_stub_target")
    module = __import__("kvreg_stub_target")
    module.LOG.clear()
    yield module
    sys.modules.pop("kvreg_stub_target", None)


def stub_scenario(exercise: tuple[str, ...]) -> Scenario:
    sc = load_file(bundled_root() / "mla" / "page_first_direct.toml", bundled_root())[0]
    return dataclasses.replace(sc, target="stub", exercise=exercise)


def test_core_drives_a_stub_target_in_order(stub: Any) -> None:
    stub.TARGET.world = stub.World(ok=True, raise_in=None)
    sc = stub_scenario(("register", "transfers", "teardown", "teardown"))
    result = run_scenario(sc, make_implementation(), keep_trace=True, backend="fake")
    assert stub.LOG == ["build fake", "enter", "logs", "register", "transfer",
                        "begin_teardown", "teardown 0 teardown", "teardown 1 teardown", "exit",
                        "finish", "judge", "warnings"]
    assert (result.verdict, result.calls, result.trace_text) == ("pass", 7, "trace 200")
    # a pass may still carry the target's warnings into the report
    assert result.warnings == [Violation("stub-note", "recovered")]
    assert result.as_dict()["warnings"] == [{"rule": "stub-note", "message": "recovered"}]


def test_no_transfer_after_a_failed_register_and_the_judgement_is_the_targets(stub: Any
                                                                               ) -> None:
    stub.TARGET.world = stub.World(ok=False, raise_in=None)
    result = run_scenario(stub_scenario(("register", "transfers", "teardown")),
                          make_implementation())
    assert "transfer" not in stub.LOG
    assert "teardown 0 teardown" in stub.LOG
    assert result.verdict == "fail"
    assert result.violations == [Violation("stub", "registering failed")]


@pytest.mark.parametrize(("raised", "verdict", "reason"), [
    (SkipScenario("no GPU here"), "skip", "no GPU here"),
    (CannotRun("bad plan"), "error", "kvreg cannot run this scenario: bad plan"),
])
def test_build_can_skip_or_refuse(stub: Any, raised: Exception, verdict: str,
                                  reason: str) -> None:
    stub.TARGET.world = raised
    result = run_scenario(stub_scenario(("register",)), make_implementation())
    assert (result.verdict, result.reason) == (verdict, reason)
    assert stub.LOG == ["build fake"]


@pytest.mark.parametrize(("exc", "verdict"), [
    (CallBudgetExceeded("spent"), "pass"),
    (RuntimeError("kvreg broke"), "internal-error"),
])
def test_budget_and_internal_errors(stub: Any, exc: BaseException, verdict: str) -> None:
    world = stub.World(ok=True, raise_in="register")
    world.exc = exc
    stub.TARGET.world = world
    result = run_scenario(stub_scenario(("register", "teardown")), make_implementation())
    assert result.verdict == verdict
    assert "exit" in stub.LOG                     # the isolation was left either way
    if verdict == "pass":
        assert stub.LOG[-4:] == ["budget", "finish", "judge", "warnings"]
    else:
        assert result.reason.startswith("kvreg internal error while kvreg set the run up: ")
        assert "RuntimeError: kvreg broke (this is a bug in kvreg, not in the code under " \
            "test: please report it" in result.reason
        assert "raise self.exc" in result.tb or "RuntimeError: kvreg broke" in result.tb
        assert "finish" not in stub.LOG


def test_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="unknown target 'nope'; known: cuda, mooncake"):
        get_target("nope")


def test_validation_asks_the_target_for_its_steps(tmp_path: Path) -> None:
    path = tmp_path / "mc.toml"
    path.write_text('format = 1\n[pool]\ntype = "fastdeploy"\nparams = { num_layers = 2, '
                    'head_num = 1, head_dim = 128, dtype = "bfloat16", page_size = 4 }\n'
                    '[[scenario]]\nname = "s"\nguards = "steps a target lacks (test)"\n'
                    'pages = 4\ntarget = "mooncake"\n'
                    'exercise = ["register", "teardown-after-failure"]\n')
    with pytest.raises(ScenarioError) as err:
        load_file(path, tmp_path)
    assert ("steps the mooncake target offers: ['register', 'transfers', 'teardown']"
            in str(err.value))


def test_loading_scenarios_runs_no_runner_code() -> None:
    code = ("import sys; from kvreg.harness.scenario import load_paths; load_paths([]); "
            "print(sorted(m for m in sys.modules if m.startswith('kvreg.harness.run.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout
    assert "kvreg.harness.run.targets" in loaded       # validation asked the registry
    assert "kvreg.harness.run.core" not in loaded      # ... and ran no runner
    assert "kvreg.harness.run.implementation" not in loaded
