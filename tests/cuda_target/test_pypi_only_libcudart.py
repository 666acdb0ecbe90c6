"""A machine without a CUDA toolkit: PyPI's wheels alone (docs/cuda-runtime.md §6.3).

The nvidia-cuda-runtime wheels ship ``libcudart.so.<major>`` and nothing else (12.9.79:
``nvidia/cuda_runtime/lib/libcudart.so.12``; 13.5.37: ``nvidia/cu13/lib/libcudart.so.13``,
[OBS-local]), which torch loads by path at import. With no toolkit on the loader path,
``ctypes.CDLL("libcudart.so")`` raises ``OSError: libcudart.so: cannot open shared object
file: No such file or directory`` and ``ctypes.CDLL("libcudart.so.12")`` returns the wheel's
object, torch's (glibc matches a loaded object's soname first, elf/dl-load.c
``_dl_map_object``) [OBS-local]; ``find_library("cudart")`` has no ld.so cache entry to
answer [INF]. The profile option ``libcudart_install = "pypi-only"`` models that machine, so
code with a fallback list (exllamav3's ``model_tp_cuda.py``: ``libcudart.so``, then
``libcudart.so.12``, ``.11``, ``find_library``; docs/real-code-trials.md §3) runs its fallback
and is judged where it lands.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES, UNC_OPTIONS, DeviceProfile, profile_with_options
from kvreg.harness.cuda.options import process_config
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario

PIN = Path(__file__).parent / "impls" / "ctypes_fallback_pin.py"
TRANSIENT = "mla/persistent_and_transient/transient-middle-chunk"
CANNOT = "{}: cannot open shared object file: No such file or directory"


def _scenario(by_id: dict[str, Scenario], install: str | None, profile: str) -> Scenario:
    sc = by_id[TRANSIENT]
    options = dict(sc.profile_options)
    if install is not None:
        options["libcudart_install"] = install
    return dataclasses.replace(sc, profile=profile, profile_options=options)


def _run(sc: Scenario) -> tuple[ScenarioResult, list[str]]:
    impl = make_implementation(f"{PIN}:register", f"{PIN}:teardown", "ctypes")
    assert impl.register_fn is not None
    module: Any = importlib.import_module(impl.register_fn.__module__)
    module.loaded.clear()
    return run_scenario(sc, impl), list(module.loaded)


def test_the_option_and_its_default() -> None:
    assert UNC_OPTIONS["libcudart_install"] == ("toolkit", "pypi-only")
    assert DeviceProfile().libcudart_install == "toolkit"
    assert {p.libcudart_install for p in PROFILES.values()} == {"toolkit"}


@pytest.mark.parametrize(("profile", "torchs"), [("h100-r575", "libcudart.so.12"),
                                                  ("h200-r580", "libcudart.so.13")])
def test_only_torchs_object_loads_without_a_toolkit(profile: str, torchs: str) -> None:
    fake = FakeCuda(profile_with_options(profile, {"libcudart_install": "pypi-only"}))
    others = ["libcudart.so", "libcudart.so.11", "/usr/local/cuda/lib64/libcudart.so",
              f"/usr/local/cuda/lib64/{torchs}.9.79"]
    with fake.patch():
        assert ctypes.util.find_library("cudart") is None
        assert ctypes.CDLL(torchs).cudaGetLastError() == 0
        for name in others:
            with pytest.raises(OSError) as info:
                ctypes.CDLL(name)
            assert str(info.value) == CANNOT.format(name)
        with pytest.raises(OSError, match="cannot open shared object file"):
            fake.load_libcudart("libcudart.so")
    with FakeCuda(profile).patch():      # a toolkit: every name loads, the cache answers
        assert ctypes.util.find_library("cudart") == torchs
        for name in others:
            ctypes.CDLL(name)


def test_with_a_toolkit_the_unversioned_name_loads_a_private_instance(
        by_id: dict[str, Scenario]) -> None:
    result, loaded = _run(_scenario(by_id, None, "h100-r575"))
    assert loaded == ["libcudart.so"]
    assert result.verdict == "pass", result.violations
    (w,) = [w for w in result.warnings if w.rule == "error-pending"]
    assert "libcudart's runtime (a libcudart loaded apart from torch's)" in w.message


def test_without_a_toolkit_the_fallback_reaches_torchs_instance(
        by_id: dict[str, Scenario]) -> None:
    result, loaded = _run(_scenario(by_id, "pypi-only", "h100-r575"))
    assert loaded == ["libcudart.so.12"]
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations
    # torch's instance through its soname: no "loaded apart from torch's", no option named
    assert result.first_violation.startswith(
        "after register raised, libcudart's runtime still holds cudaErrorMemoryAllocation (2) "
        "as its last error: the next kernel-launch check reports it against an unrelated op")


def test_without_a_toolkit_a_list_missing_torchs_major_loads_nothing(
        by_id: dict[str, Scenario]) -> None:
    result, loaded = _run(_scenario(by_id, "pypi-only", "h200-r580"))
    assert loaded == []
    assert [v.rule for v in result.violations] == ["unexpected-error"], result.violations
    assert "OSError: no libcudart among libcudart.so" in result.first_violation


def test_the_option_gets_a_worker_of_its_own(by_id: dict[str, Scenario]) -> None:
    plain = process_config(_scenario(by_id, None, "h100-r575"))
    toolkit = process_config(_scenario(by_id, "toolkit", "h100-r575"))
    pypi = process_config(_scenario(by_id, "pypi-only", "h100-r575"))
    assert plain.machine == toolkit.machine == ("h100-r575",)
    assert pypi.machine == ("h100-r575", ("libcudart_install", "pypi-only"))
