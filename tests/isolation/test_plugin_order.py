"""The plugin's scenario items share workers as ``kvreg run`` does, and a verdict there does
not depend on the items before it either: implementations that keep a libcudart
``ctypes.CDLL``, or take ``torch.cuda.cudart()`` and the chunk limit at import, pass every
item of two files with different chunk limits (two process configurations), as their
verdict alone is (a pass: test_order_independence.py compares with runs alone). Before
fakes/doors.py the second item of each file failed."""

from __future__ import annotations

import shutil

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

from ..helpers.paths import ISOLATION_IMPLS
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, VIRTUAL_MLA_POOL

TWO_GB = VIRTUAL_MLA_POOL.replace("chunk_gb = 1", "chunk_gb = 2")


@pytest.mark.parametrize(("register", "teardown", "style"), [
    ("caching.py:ctypes_cached", "caching.py:ctypes_cached_teardown", "ctypes"),
    ("bound_at_import.py:sglang_register", "bound_at_import.py:sglang_teardown", "sglang"),
])
def test_items_after_others_pass_as_alone(pytester: pytest.Pytester, register: str,
                                           teardown: str, style: str) -> None:
    folder = pytester.mkdir("kv_scenarios")
    (folder / "a_one_gib.toml").write_text(VIRTUAL_MLA_POOL + THREE_CHUNKS + ONE_CHUNK)
    (folder / "b_two_gib.toml").write_text(TWO_GB + THREE_CHUNKS + ONE_CHUNK)
    for name in ("caching.py", "bound_at_import.py"):
        shutil.copy(ISOLATION_IMPLS / name, pytester.path / name)
    pytester.makeini("\n".join(["[pytest]", "kvreg_scenarios = kv_scenarios",
                                f"kvreg_impl = {register}", f"kvreg_teardown = {teardown}",
                                f"kvreg_style = {style}"]) + "\n")
    together = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    together.assert_outcomes(passed=4)
