"""The pytest plugin as a downstream project sees it (pytester)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules after
# each run, and a C extension like torch cannot be imported a second time in one process.
import torch  # noqa: F401

SGLANG_STYLE = '''
import torch

def register(buf, limit):
    cudart = torch.cuda.cudart()
    ranges = []
    for off in range(0, buf.nbytes, limit):
        size = min(limit, buf.nbytes - off)
        rc = cudart.cudaHostRegister(buf.data_ptr() + off, size, 0)
        if int(rc) != 0:
            for p, _ in reversed(ranges):
                cudart.cudaHostUnregister(p)
            raise RuntimeError(f"cudaHostRegister failed (rc={int(rc)}) at offset={off}")
        ranges.append((buf.data_ptr() + off, size))
    return ranges
'''


def test_fixture_gives_fresh_patched_fake(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SGLANG_STYLE + '''
def test_ok(fake_cudart):
    buf = fake_cudart.virtual(3 << 30, name="pool")
    ranges = register(buf, 1 << 30)
    assert len(fake_cudart.live_registrations()) == 3
    for p, _ in ranges:
        assert torch.cuda.cudart().cudaHostUnregister(p) == 0

def test_fresh(fake_cudart):
    assert fake_cudart.live_registrations() == []
    assert len(fake_cudart.trace) == 0
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_leak_fails_the_test_with_the_buffer_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SGLANG_STYLE + '''
def test_leaky(fake_cudart):
    register(fake_cudart.virtual(2 << 30, name="kv_pool"), 1 << 30)
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*2 host registration(s) still live*",
                                 "*kv_pool + 0x40000000*", "*kvreg_allow_leaks*"])


def test_allow_leaks_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SGLANG_STYLE + '''
import pytest

@pytest.mark.kvreg_allow_leaks
def test_leaky(fake_cudart):
    register(fake_cudart.virtual(2 << 30), 1 << 30)
''')
    pytester.runpytest("-p", "no:cacheprovider", "--strict-markers").assert_outcomes(passed=1)


def test_inject_reaches_the_code_under_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SGLANG_STYLE + '''
import pytest

def test_rollback(fake_cudart):
    fake_cudart.inject("cudaHostRegister", nth=2, error=2)
    with pytest.raises(RuntimeError, match="rc=2.*offset=1073741824"):
        register(fake_cudart.virtual(3 << 30), 1 << 30)
    assert fake_cudart.live_registrations() == []
''')
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_profile_marker_and_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest

@pytest.mark.kvreg_profile("h100-r575")
def test_marker(fake_cudart):
    assert fake_cudart.profile.per_call_limit is None

def test_option(fake_cudart):
    assert fake_cudart.profile.name == "wsl2"
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "test_marker")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "test_option",
                                "--kvreg-profile", "wsl2")
    result.assert_outcomes(passed=1)


def test_report_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["kvreg *: backend fake, device profile h200-r580*"])


def test_hw_markers_skip_with_reason_or_fail_under_require_hw(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest

@pytest.mark.kvreg_gpu
def test_gpu():
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kvreg_gpu: no NVIDIA driver*35*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--kvreg-require-hw")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--kvreg-require-hw is set*"])


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    for name in ("kvreg_allow_leaks", "kvreg_profile", "kvreg_gpu", "kvreg_rdma"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}*"])


def test_xdist_runs_fixtures_in_parallel(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SGLANG_STYLE + '''
import pytest

@pytest.mark.parametrize("i", range(8))
def test_many(fake_cudart, i):
    buf = fake_cudart.virtual((i + 1) << 30)
    for p, _ in reversed(register(buf, 1 << 30)):
        torch.cuda.cudart().cudaHostUnregister(p)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-n", "2")
    result.assert_outcomes(passed=8)


ENTRY_MODULE = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml")
                            .read_text())["project"]["entry-points"]["pytest11"]["kvreg"]


def test_the_entry_point_is_the_plugin_itself() -> None:
    """The pytest11 entry module defines the hooks (no re-export module between) and serves
    every fixture it lists."""
    plugin = importlib.import_module(ENTRY_MODULE)
    assert ENTRY_MODULE == "kvreg.harness.plugin"
    for name in ("pytest_addoption", "pytest_configure", "pytest_runtest_call"):
        assert getattr(plugin, name).__module__ == ENTRY_MODULE
    for name in plugin.__all__:
        assert hasattr(plugin, name), name


def test_plugin_module_imports_nothing_heavy() -> None:
    code = (f"import sys, {ENTRY_MODULE}; "
            "heavy = [m for m in ('torch', 'cuda', 'cuda.bindings', 'pyverbs', 'numpy') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
