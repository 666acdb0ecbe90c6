"""Which frames are the bindings': the installed packages (torch, cuda-python, pytest), found
by where they are installed, not by a folder name. Code of the user's in a folder that happens
to be called ``torch`` (a thin adapter over ``torch.cuda._pin_memory_utils`` kept next to
other torch helpers, say) is the user's: its lines are where causes are placed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch.cuda._pin_memory_utils as pin_memory_utils

from kvreg.harness.run import callsite
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import Scenario

OVER_LIMIT = "mha/layer_first/last-partial-chunk"
ONE_CALL = textwrap.dedent("""\
    def register(cudart, ptr, nbytes, *, granularity, chunk_limit):
        cudart.cudaHostRegister(ptr, nbytes, 0)  # one call, whatever the limit
        return [(ptr, nbytes)]


    def teardown(cudart, ranges):
        while ranges:
            cudart.cudaHostUnregister(ranges.pop()[0])
    """)


def test_installed_bindings_are_foreign_and_a_folder_named_torch_is_not(
        tmp_path: Path) -> None:
    assert callsite._foreign(pin_memory_utils.__file__)
    mine = tmp_path / "torch" / "adapter.py"
    mine.parent.mkdir()
    mine.write_text("x = 1\n")
    assert not callsite._foreign(str(mine))
    assert not callsite._foreign(str(tmp_path / "adapter.py"))


def test_a_call_rule_is_placed_in_a_users_file_under_a_folder_named_torch(
        tmp_path: Path, by_id: dict[str, Scenario]) -> None:
    folder = tmp_path / "torch"
    folder.mkdir()
    impl_file = folder / "one_call.py"
    impl_file.write_text(ONE_CALL)
    impl = make_implementation(f"{impl_file}:register", None, "generic")
    result = run_scenario(by_id[OVER_LIMIT], impl)
    over = [v for v in result.violations if v.rule == "chunk-over-limit"]
    assert over, result.as_dict()
    path, _, line = over[0].where.rpartition(":")
    assert Path(path).resolve() == impl_file.resolve() and line == "2", over[0].where
    assert over[0].code.startswith("cudart.cudaHostRegister(ptr, nbytes, 0)")
