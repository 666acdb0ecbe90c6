"""A new target touches only its own room and the registry (ARCHITECTURE.md, "Where to add a
target").

A third target is written here as one module and named in the registry (``TARGETS``), and
nothing else changes: the loader validates the table of its own options and refuses it on
another target's scenario, ``run_scenario`` drives its world and reports its copy coverage,
and the process layer watches its environment variable and imports code under its default
machine (or the one a scenario chooses). A generic layer that still named the two bundled
targets (a hard-coded variable list, machine table or options key) fails here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run import process
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.target import ProcessConfig
from kvreg.harness.run.targets import TARGETS
from kvreg.harness.scenario import ScenarioError, load_file

THIRD = '''
from contextlib import contextmanager
from kvreg.harness.run.result import Violation
from kvreg.harness.run.target import ProcessConfig

LOG = []

class World:
    def __init__(self, sc):
        self.sc = sc
    @contextmanager
    def isolation(self):
        yield
    def set_logs(self, logs): pass
    def watch(self, progress): pass
    def register(self, impl):
        LOG.append(("register", self.sc.options["lanes"]))
        return True
    def transfer(self): LOG.append(("transfer",))
    def begin_teardown(self): pass
    def teardown(self, impl, round_, step): LOG.append(("teardown", round_))
    def budget_spent(self): pass
    def finish(self): pass
    def judge(self):
        lanes = self.sc.options["lanes"]
        return [] if lanes <= 4 else [Violation("third-lanes", f"{lanes} lanes > 4")]
    def warnings(self): return []
    def calls(self): return 3
    def trace_text(self, limit): return "third trace"
    def copy_coverage(self): return {"pages": self.sc.options["lanes"], "total": 4}

class ThirdTarget:
    name = "third"
    steps = ("register", "transfers", "teardown")
    watched_env = ("KVREG_THIRD_LANES",)
    default_machine = ("third-default",)
    title = "Third"
    options_table = "third"
    style_calls = {}
    style_contracts = {}
    takes_base_offset = False

    def validate_options(self, options):
        lanes = options.get("lanes")
        return [] if isinstance(lanes, int) and lanes > 0 else ["lanes: a positive integer"]
    def process_config(self, sc):
        return ProcessConfig("third", (("KVREG_THIRD_LANES", str(sc.options["lanes"])),),
                             ("third-machine", sc.options["lanes"]))
    @contextmanager
    def import_scope(self, config):
        LOG.append(("import", config.machine))
        yield
    def build(self, sc, impl, backend):
        return World(sc)

TARGET = ThirdTarget()
'''

POOL = ('format = 1\n[pool]\ntype = "fastdeploy"\nparams = { num_layers = 2, head_num = 1, '
        'head_dim = 128, dtype = "bfloat16", page_size = 4 }\n')


def scenario_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "third.toml"
    path.write_text(POOL + '[[scenario]]\nname = "s"\nguards = "a third target (test)"\n'
                    "pages = 4\n" + body)
    return path


@pytest.fixture
def third(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The third target, named in the registry and nowhere else."""
    (tmp_path / "kvreg_third_target.py").write_text(THIRD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(TARGETS, "third", "kvreg_third_target")
    monkeypatch.delenv("KVREG_THIRD_LANES", raising=False)
    module = __import__("kvreg_third_target")
    module.LOG.clear()
    yield module
    sys.modules.pop("kvreg_third_target", None)


@pytest.mark.parametrize(("lanes", "verdict"), [(2, "pass"), (6, "fail")])
def test_the_loader_and_the_core_run_it(third: Any, tmp_path: Path, lanes: int,
                                        verdict: str) -> None:
    path = scenario_file(tmp_path, f'target = "third"\nthird = {{ lanes = {lanes} }}\n'
                         'exercise = ["register", "transfers", "teardown"]\n')
    sc = load_file(path, tmp_path)[0]
    assert (sc.target, dict(sc.options)) == ("third", {"lanes": lanes})
    result = run_scenario(sc, make_implementation(), keep_trace=True)
    assert [("register", lanes), ("transfer",), ("teardown", 0)] == third.LOG
    assert (result.verdict, result.calls, result.copy) == (verdict, 3,
                                                           {"pages": lanes, "total": 4})
    assert [v.rule for v in result.violations] == ([] if verdict == "pass"
                                                   else ["third-lanes"])


@pytest.mark.parametrize(("body", "message"), [
    # its own validation, under its own table's name
    ('target = "third"\nthird = { lanes = 0 }\n', "third: expected lanes: a positive integer"),
    ('target = "third"\nthird = 5\n', "third: expected a table of Third options"),
    # its table on another target's scenario
    ("third = { lanes = 2 }\n", "third: expected no third table unless target = 'third'"),
    # a base offset on a target that places its buffers itself
    ('target = "third"\nthird = { lanes = 2 }\n', "(the Third target places its buffers"),
])
def test_the_loader_asks_it_about_its_own_table(third: Any, tmp_path: Path, body: str,
                                                message: str) -> None:
    path = scenario_file(tmp_path, body)
    if "places its buffers" in message:
        text = path.read_text().replace("page_size = 4 }\n", "page_size = 4 }\nbase_offset = 64\n")
        path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_file(path, tmp_path)
    assert message in str(err.value), str(err.value)


def test_the_process_layer_watches_its_variable_and_machine(third: Any, tmp_path: Path
                                                            ) -> None:
    path = scenario_file(tmp_path, 'target = "third"\nthird = { lanes = 3 }\n')
    config = process.process_config(load_file(path, tmp_path)[0])
    assert config == ProcessConfig("third", (("KVREG_THIRD_LANES", "3"),),
                                   ("third-machine", 3))
    assert "KVREG_THIRD_LANES" in process.watched_values()
    with process.watching_env() as reads:
        os.environ.get("KVREG_THIRD_LANES")
    assert [(key, seen) for key, _, seen in reads] == [("KVREG_THIRD_LANES", None)]
    other = ProcessConfig("third", (("KVREG_THIRD_LANES", "5"),), ("third-machine", 3))
    base = process.watched_values()
    assert not process.same_deployment(config, other, base, {"KVREG_THIRD_LANES"}, True)
    assert process.same_deployment(config, other, base, set(), False)
    # code imported before any scenario sees its default machine; a worker its scenario's
    with process.import_scope():
        pass
    with process.import_scope(config):
        pass
    assert [e for e in third.LOG if e[0] == "import"] == [("import", ("third-default",)),
                                                          ("import", ("third-machine", 3))]


def test_its_styles_reach_the_choices_and_each_rooms_list_is_its_own(third: Any) -> None:
    """The CLI's and the plugin's style choices are every room's ``STYLES`` (import-light),
    so a target with styles of its own adds them in its room only; each room's list is the
    styles its ``styles.py`` says how to call."""
    from kvreg.harness.run.targets import get_target, user_styles

    assert user_styles() == ("sglang", "generic", "ctypes", "driver", "mooncake",
                             "mooncake_engine", "nixl")
    third.STYLES = ("lanes",)
    assert user_styles()[-1] == "lanes"
    for name in ("cuda", "mooncake", "gpu_rdma"):
        room = __import__(f"kvreg.harness.{name}", fromlist=["STYLES"])
        assert set(room.STYLES) == set(get_target(name).style_calls) - {"reference"}
