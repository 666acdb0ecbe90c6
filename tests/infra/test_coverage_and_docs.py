"""COVERAGE.md, the error table helpers, profiles, dtypes, the demo and the README example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvreg.fakes.cuda import coverage
from kvreg.fakes.cuda.cuda_python_face import NotModelledError
from kvreg.fakes.cuda.errors import code_for, error_name, error_string, valid_errors
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES, DeviceProfile, get_profile
from kvreg.fakes.dtypes import as_dtype

ROOT = Path(__file__).resolve().parents[2]


def test_coverage_md_is_fresh() -> None:
    on_disk = (ROOT / "COVERAGE.md").read_text()
    assert on_disk == coverage.render(), (
        "COVERAGE.md is stale: run `python -m kvreg.fakes.cuda.coverage`")


def test_symbol_snapshot_matches_installed_cuda_bindings() -> None:
    pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    from importlib import metadata

    header, names = coverage.runtime_symbols()
    if metadata.version("cuda-bindings") not in header:
        pytest.skip(f"snapshot is of {header}; installed cuda-bindings "
                    f"{metadata.version('cuda-bindings')} (refresh with --refresh-symbols)")
    assert names == coverage.live_runtime_symbols()


def test_every_modelled_api_exists_in_the_real_module() -> None:
    _, names = coverage.runtime_symbols()
    assert set(coverage.modelled_cuda_python()) <= set(names)


def test_unmodelled_api_names_the_coverage_table() -> None:
    # every unmodelled call raises (never silent success); the name itself is present, as on
    # the real module, so hasattr/dir probes see it
    fake = FakeCuda()
    _, names = coverage.runtime_symbols()
    missing = sorted(set(names) - set(coverage.modelled_cuda_python())
                     - set(coverage.passed_through()))
    assert "cudaMemcpy2D" in missing
    for name in missing:
        assert hasattr(fake.runtime, name) and name in dir(fake.runtime)
        with pytest.raises(NotModelledError, match=r"COVERAGE\.md"):
            getattr(fake.runtime, name)(0, 0)
    assert len(fake.trace) == 0


def test_coverage_lists_every_function_with_one_answer() -> None:
    text = coverage.render()
    _, names = coverage.runtime_symbols()
    modelled, through = set(coverage.modelled_cuda_python()), set(coverage.passed_through())
    assert not modelled & through
    assert through <= set(names) | {"make_cudaExtent", "make_cudaPitchedPtr", "make_cudaPos",
                                    "sizeof", "getLocalRuntimeVersion"}
    not_modelled = text.split("## `cuda.bindings.runtime`: not modelled (")[1]
    for name in names:
        listed_as = [name in modelled, name in through, f"\n{name}\n" in not_modelled]
        assert sum(listed_as) == 1, name


def test_error_helpers() -> None:
    # docs/cuda-runtime.md §1: names/strings, and the fallback for unknown codes [OBS-local]
    assert error_name(712) == "cudaErrorHostMemoryAlreadyRegistered"
    assert error_string(2) == "out of memory"
    assert error_name(5555) == error_string(5555) == "unrecognized error code"
    assert code_for("HostMemoryNotRegistered") == 713
    assert code_for("cudaErrorInvalidValue") == 1
    with pytest.raises(ValueError):
        code_for("cudaErrorDoesNotExist")
    with pytest.raises(TypeError):
        code_for(True)
    assert valid_errors("cudaHostUnregister") >= {1, 713, 35}
    with pytest.raises(KeyError, match="cudaHostRegister"):
        valid_errors("cudaNope")


def test_profiles_and_their_unc_switches() -> None:
    p = get_profile()
    assert p.name == "h200-r580" and p.per_call_limit == 512 << 30
    # conservative default, docs/cuda-runtime.md §11.3
    assert p.copy_across_registrations == "reject"
    assert get_profile("h100-r575").per_call_limit is None
    with pytest.raises(ValueError, match="known"):
        get_profile("h300")
    with pytest.raises(TypeError, match="nonsense"):
        p.replace(nonsense=1)
    # a profile can be rebuilt from a real run's answers
    settled = DeviceProfile.from_dict({"name": "lab-h200", "copy_across_registrations": "allow"})
    assert settled.copy_across_registrations == "allow" and settled.per_call_limit == 512 << 30
    assert all(name == prof.name for name, prof in PROFILES.items())


def test_dtypes() -> None:
    import numpy as np
    import torch

    assert as_dtype(torch.bfloat16).itemsize == 2
    assert as_dtype("fp8").name == "float8_e4m3fn"
    assert as_dtype(np.dtype("float32")).itemsize == 4
    with pytest.raises(ValueError, match="known dtypes"):
        as_dtype("float13")
    with pytest.raises(TypeError):
        as_dtype(3)


def test_demo_catches_the_pr_36798_bug(capsys: pytest.CaptureFixture[str]) -> None:
    from kvreg.harness.cli import main

    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "[FAIL] byte-offset chunks" in out
    assert "page 238" in out and "error=invalid argument" in out
    assert "[pass] page-aligned chunks" in out


def test_readme_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    fake = namespace["fake"]
    assert isinstance(fake, FakeCuda)
    # the 1.2 TiB single call hit the 512 GiB ceiling (docs/cuda-runtime.md §2.2) -> 2
    assert fake.trace.codes("cudaHostRegister") == [2]


def test_architecture_names_only_paths_that_exist() -> None:
    """ARCHITECTURE.md's rooms and places to add things must be where it says."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    paths = set(re.findall(r"`((?:harness|fakes|realhw|tests|scenarios)/[^`<>]*)`", text))
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def test_driver_and_ctypes_faces_model_real_names_only() -> None:
    _, runtime_names = coverage.runtime_symbols()
    assert set(coverage.modelled_driver()) <= set(coverage.driver_symbols())
    assert {"cuMemHostRegister", "cuMemHostUnregister", "cuMemHostGetFlags",
            "cuPointerGetAttribute"} <= set(coverage.modelled_driver())
    assert set(coverage.modelled_ctypes()) <= set(runtime_names)
    text = coverage.render()
    assert "## `cuda.bindings.driver` face" in text and "cuMemHostRegister" in text
