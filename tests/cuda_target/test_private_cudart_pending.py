"""Who reads a private libcudart instance's last error (docs/cuda-runtime.md §6.2, [UNC]).

A libcudart that ``ctypes.CDLL`` maps apart from torch's object (an unversioned
``libcudart.so`` from a toolkit: another file, so another object and runtime instance, glibc
elf/dl-load.c ``_dl_map_object_from_fd``, §6.1) keeps its own last error. torch's
kernel-launch checks (``C10_CUDA_KERNEL_LAUNCH_CHECK``: ``cudaGetLastError`` in torch's
instance) never read it, and every later runtime call reports its own result
(``cudaGetLastError``: "the last error that has been produced by any of the runtime calls in
the same instance of the CUDA Runtime library in the host thread", CUDA Runtime API); only a
handle opening the same library does. So an error left there is a warning under the profile
default ``private_cudart_error = "unread"`` and ``error-pending`` under ``"read"``; torch's
own instance reached through ctypes (its soname) fails either way, and a drain passes either
way. The exllamav3 pinning of docs/real-code-trials.md §3 (``ctypes.CDLL("libcudart.so")``,
no drain) is the shape of ``register_private``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvreg.fakes.cuda.profile import PROFILES, UNC_OPTIONS, DeviceProfile
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.endstate import (
    PRIVATE_READ,
    PRIVATE_UNREAD,
    Pending,
    check_error_pending,
)
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario

PIN = Path(__file__).parent / "impls" / "ctypes_private_pin.py"
TRANSIENT = "mla/persistent_and_transient/transient-middle-chunk"
HEAD = ("after register raised, libcudart's runtime (a libcudart loaded apart from torch's) "
        "still holds cudaErrorMemoryAllocation (2) as its last error")


def _run(by_id: dict[str, Scenario], entry: str, setting: str | None) -> ScenarioResult:
    sc = by_id[TRANSIENT]
    if setting is not None:
        sc = dataclasses.replace(sc, profile_options={**sc.profile_options,
                                                      "private_cudart_error": setting})
    return run_scenario(sc, make_implementation(f"{PIN}:{entry}", f"{PIN}:teardown", "ctypes"))


def test_the_option_and_its_default() -> None:
    assert UNC_OPTIONS["private_cudart_error"] == ("unread", "read")
    assert DeviceProfile().private_cudart_error == "unread"
    assert {p.private_cudart_error for p in PROFILES.values()} == {"unread"}


@pytest.mark.parametrize("setting", [None, "unread"])
def test_an_error_left_in_a_private_libcudart_is_a_warning_by_default(
        by_id: dict[str, Scenario], setting: str | None) -> None:
    result = _run(by_id, "register_private", setting)
    assert result.verdict == "pass", result.violations
    (w,) = [w for w in result.warnings if w.rule == "error-pending"]
    assert w.message.startswith(HEAD + "; no kernel-launch check of torch's reads that "
                                "instance, only handles that open the same library")
    assert PRIVATE_UNREAD in w.message


def test_an_error_left_in_a_private_libcudart_fails_where_it_is_read(
        by_id: dict[str, Scenario]) -> None:
    result = _run(by_id, "register_private", "read")
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations
    assert result.first_violation.startswith(HEAD + ": the next last-error check through "
                                             "that library reports it")
    assert PRIVATE_READ in result.first_violation
    assert not any(w.rule == "error-pending" for w in result.warnings)


@pytest.mark.parametrize("setting", ["unread", "read"])
def test_torchs_instance_through_its_soname_fails_under_either_setting(
        by_id: dict[str, Scenario], setting: str) -> None:
    result = _run(by_id, "register_torch_soname", setting)
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations
    assert result.first_violation.startswith(
        "after register raised, libcudart's runtime still holds cudaErrorMemoryAllocation (2) "
        "as its last error: the next kernel-launch check reports it against an unrelated op")


@pytest.mark.parametrize("setting", ["unread", "read"])
def test_a_drained_private_handle_passes_under_either_setting(
        by_id: dict[str, Scenario], setting: str) -> None:
    result = _run(by_id, "register_private_drained", setting)
    assert result.verdict == "pass", result.violations
    assert not any(w.rule == "error-pending" for w in result.warnings), result.warnings


def test_the_rule_on_plain_records() -> None:
    private = [Pending("register", "libcudart", 2, "cudaErrorMemoryAllocation", False, True)]
    shared = [Pending("register", "libcudart", 2, "cudaErrorMemoryAllocation", False)]
    for fallback in (False, True):      # a pageable fallback changes nothing nobody reads
        assert [len(x) for x in check_error_pending(private, fallback=fallback)] == [0, 1]
        assert [len(x) for x in check_error_pending(private, fallback=fallback,
                                                    private_read=True)] == [1, 0]
        assert [len(x) for x in check_error_pending(shared, fallback=fallback)] == [1, 0]
    # the same code in both instances: two lines, one per instance
    both = check_error_pending(private + shared, fallback=False)
    assert [len(x) for x in both] == [1, 1]
