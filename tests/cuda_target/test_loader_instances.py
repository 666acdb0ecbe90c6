"""Which runtime a ctypes drain reaches is the dynamic loader's answer (docs/cuda-runtime.md §6.1).

PyPI CUDA builds of torch load the nvidia-cuda-runtime package's ``libcudart.so.<major>`` at
import (torch/__init__.py ``_load_global_deps``: libtorch_global_deps.so's needed libraries,
or ``_preload_cuda_deps`` of ``nvidia/cuda_runtime/lib``), and glibc's ``_dl_map_object``
returns an already loaded object whose names or DT_SONAME equal the name given, or, after
opening a path, whose device and inode match (elf/dl-load.c). So code that drains a failure
reported through torch with ``ctypes.CDLL("libcudart.so.<major>")`` (or the path of that file,
or ``find_library("cudart")``'s answer) clears torch's error and passes; an unversioned name
or another file is another runtime instance, and torch's error stays pending. A torch that
links cudart statically (``USE_CUDA_STATIC_LINK``, cmake/public/cuda.cmake's
``CAFFE2_STATIC_LINK_CUDA``) has no loaded libcudart to reach: the ``torch_cudart = "private"``
profile option.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import ScenarioResult

IMPL = Path(__file__).parent / "impls" / "optional_pinning_ctypes_drain.py"
SID = "mla/page_first_direct/fail-middle-chunk"


def _run(by_id, entry: str, **profile_options: str) -> ScenarioResult:  # type: ignore[no-untyped-def]
    sc = by_id[SID]
    if profile_options:
        sc = dataclasses.replace(sc, profile_options={**sc.profile_options, **profile_options})
    impl = make_implementation(f"{IMPL}:{entry}", f"{IMPL}:teardown", "generic")
    impl.pinning = "optional"
    return run_scenario(sc, impl)


@pytest.mark.parametrize("entry", ["register_soname", "register_found",
                                   "register_package_path"])
def test_a_drain_through_torchs_libcudart_clears_torchs_error(by_id, entry: str) -> None:  # type: ignore[no-untyped-def]
    result = _run(by_id, entry)
    assert result.verdict == "pass", result.violations
    assert not any(w.rule == "error-pending" for w in result.warnings), result.warnings


@pytest.mark.parametrize("entry", ["register_unversioned", "register_toolkit_path"])
def test_a_drain_through_another_file_leaves_torchs_error_pending(by_id, entry: str) -> None:  # type: ignore[no-untyped-def]
    result = _run(by_id, entry)
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations
    assert result.first_violation.startswith(
        "after register returned, torch's runtime still holds cudaErrorInvalidValue (1)")


def test_a_torch_with_a_private_runtime_cannot_be_drained_by_any_name(by_id) -> None:  # type: ignore[no-untyped-def]
    result = _run(by_id, "register_soname", torch_cudart="private")
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations


def test_older_wheels_bundle_a_renamed_libcudart(by_id) -> None:  # type: ignore[no-untyped-def]
    # libcudart-<hash>.so.13 in torch/lib (auditwheel's rename): libcudart.so.13 is then the
    # system's file, another instance
    result = _run(by_id, "register_soname", torch_cudart="bundled")
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations
