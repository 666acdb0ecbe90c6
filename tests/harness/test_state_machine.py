"""The exported RegistrationMachine: it passes kvreg's reference and catches broken code."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from kvreg.harness.run.implementation import load_callable
from kvreg.harness.state_machine import RegistrationMachine


class ReferenceMachine(RegistrationMachine):
    pass


TestReference = ReferenceMachine.TestCase
TestReference.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)


def byte_offset_register(buffer: Any, granularity: int | None) -> None:
    """SGLang style, but cuts at the limit: the PR #36798 bug."""
    cudart = torch.cuda.cudart()
    limit = int(os.environ["SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"]) << 30
    ranges = []
    for off in range(0, buffer.nbytes, limit):
        size = min(limit, buffer.nbytes - off)
        if int(cudart.cudaHostRegister(buffer.data_ptr() + off, size, 0)):
            for p in reversed(ranges):
                cudart.cudaHostUnregister(p)
            raise RuntimeError("cudaHostRegister failed")
        ranges.append(buffer.data_ptr() + off)
    buffer.ranges = ranges


def sglang_teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for p in reversed(getattr(buffer, "ranges", [])):
        cudart.cudaHostUnregister(p)
    buffer.ranges = []


def no_rollback_register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                         chunk_limit: int) -> list[tuple[int, int]]:
    chunk = chunk_limit // granularity * granularity if granularity else chunk_limit
    out = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        if int(cudart.cudaHostRegister(ptr + off, size, 0)):
            raise RuntimeError("failed")   # forgets the chunks before it
        out.append((ptr + off, size))
    return out


def test_machine_catches_byte_offset_seams() -> None:
    class Broken(RegistrationMachine):
        style = "sglang"
        register_impl = staticmethod(byte_offset_register)
        teardown_impl = staticmethod(sglang_teardown)

    # the invariant after register sees the seam before any copy could
    with pytest.raises(AssertionError, match=r"^\[seams-aligned\] a seam at offset \d+ cuts "
                                             r"page \d+ of \d+ bytes"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=40, deadline=None,
                                                            stateful_step_count=8))


def test_machine_catches_missing_rollback() -> None:
    class Broken(RegistrationMachine):
        register_impl = staticmethod(no_rollback_register)

    with pytest.raises(AssertionError, match=r"^\[not-rolled-back\] failed register left "
                                             r"\d+ chunk\(s\) registered"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=50, deadline=None,
                                                            stateful_step_count=8))


# -- the self-reaching doors: libcudart through ctypes, cuda.bindings.driver ------------------
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "runtime_doors"
ctypes_example = load_callable(f"{EXAMPLES / 'ctypes_register.py'}:register")
ctypes_example_teardown = load_callable(f"{EXAMPLES / 'ctypes_register.py'}:teardown")
driver_example = load_callable(f"{EXAMPLES / 'driver_register.py'}:register")
driver_example_teardown = load_callable(f"{EXAMPLES / 'driver_register.py'}:teardown")
DOOR_SETTINGS = settings(max_examples=15, stateful_step_count=10, deadline=None)


class CtypesExampleMachine(RegistrationMachine):
    style = "ctypes"
    register_impl = staticmethod(ctypes_example)
    teardown_impl = staticmethod(ctypes_example_teardown)


class DriverExampleMachine(RegistrationMachine):
    style = "driver"
    register_impl = staticmethod(driver_example)
    teardown_impl = staticmethod(driver_example_teardown)


TestCtypesExample = CtypesExampleMachine.TestCase
TestCtypesExample.settings = DOOR_SETTINGS
TestDriverExample = DriverExampleMachine.TestCase
TestDriverExample.settings = DOOR_SETTINGS


def _libcudart() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    return lib


def ctypes_no_rollback_register(ptr: int, nbytes: int, *, granularity: int | None,
                                chunk_limit: int) -> list[tuple[int, int]]:
    """Seams on the copy unit, but a failed chunk leaves the ones before it pinned."""
    lib = _libcudart()
    chunk = chunk_limit // granularity * granularity if granularity else chunk_limit
    out = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        if lib.cudaHostRegister(ptr + off, size, 0):
            lib.cudaGetLastError()
            raise RuntimeError("cudaHostRegister failed")   # forgets the chunks before it
        out.append((ptr + off, size))
    return out


def ctypes_teardown(ranges: list[tuple[int, int]]) -> None:
    lib = _libcudart()
    while ranges:
        lib.cudaHostUnregister(ranges.pop()[0])


def driver_byte_offset_register(ptr: int, nbytes: int, *, granularity: int | None,
                                chunk_limit: int) -> list[tuple[int, int]]:
    """cuMemHostRegister in chunks of exactly the limit, ignoring the copy unit (PR #36798's
    bug at the driver door)."""
    from cuda.bindings import driver

    driver.cuInit(0)
    out: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk_limit):
        size = min(chunk_limit, nbytes - off)
        (err,) = driver.cuMemHostRegister(ptr + off, size, 0)
        if int(err):
            for base, _ in reversed(out):
                driver.cuMemHostUnregister(base)
            raise RuntimeError(f"cuMemHostRegister failed: {int(err)}")
        out.append((ptr + off, size))
    return out


def driver_teardown(ranges: list[tuple[int, int]]) -> None:
    from cuda.bindings import driver

    while ranges:
        driver.cuMemHostUnregister(ranges.pop()[0])


def test_machine_catches_missing_rollback_through_ctypes() -> None:
    class Broken(RegistrationMachine):
        style = "ctypes"
        register_impl = staticmethod(ctypes_no_rollback_register)
        teardown_impl = staticmethod(ctypes_teardown)

    with pytest.raises(AssertionError, match=r"^\[not-rolled-back\] failed register left "
                                             r"\d+ chunk\(s\) registered"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=50, deadline=None,
                                                            stateful_step_count=8))


def test_machine_catches_byte_offset_seams_through_the_driver() -> None:
    class Broken(RegistrationMachine):
        style = "driver"
        register_impl = staticmethod(driver_byte_offset_register)
        teardown_impl = staticmethod(driver_teardown)

    with pytest.raises(AssertionError, match=r"^\[seams-aligned\] a seam at offset \d+ cuts "
                                             r"page \d+ of \d+ bytes"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=40, deadline=None,
                                                            stateful_step_count=8))


def test_driver_failures_are_injected_at_the_driver_door() -> None:
    """A driver-door register that swallows cuMemHostRegister's error is caught: the machine
    arms its faults on the driver twin too, not only on cudaHostRegister."""
    def swallowing(ptr: int, nbytes: int, *, granularity: int | None,
                   chunk_limit: int) -> list[tuple[int, int]]:
        from cuda.bindings import driver

        driver.cuInit(0)
        chunk = chunk_limit // granularity * granularity if granularity else chunk_limit
        out = []
        for off in range(0, nbytes, chunk):
            size = min(chunk, nbytes - off)
            (err,) = driver.cuMemHostRegister(ptr + off, size, 0)
            if not int(err):
                out.append((ptr + off, size))
        return out

    class Broken(RegistrationMachine):
        style = "driver"
        register_impl = staticmethod(swallowing)
        teardown_impl = staticmethod(driver_teardown)

    with pytest.raises(AssertionError, match=r"^\[error-swallowed\] a registration call "
                                             r"failed but register\(\) returned normally"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=50, deadline=None,
                                                            stateful_step_count=8))


def test_an_unknown_style_is_refused() -> None:
    class Misnamed(RegistrationMachine):
        style = "cuda"

    with pytest.raises(ValueError, match=r"^Misnamed\.style must be one of generic, sglang, "
                                         r"ctypes, driver, mooncake; got 'cuda'$"):
        Misnamed()


def test_a_second_driver_unregister_is_caught() -> None:
    """cuMemHostUnregister counts as an unregister: a teardown that forgets what it released
    but declares a repeatable teardown unregisters twice and gets 713 (docs/cuda-runtime.md
    §3)."""
    def forgetful_teardown(ranges: list[tuple[int, int]]) -> None:
        from cuda.bindings import driver

        for base, _ in reversed(ranges):
            driver.cuMemHostUnregister(base)

    class OnceOnly(RegistrationMachine):
        style = "driver"
        register_impl = staticmethod(driver_example)
        teardown_impl = staticmethod(forgetful_teardown)

    # without a repeatable-teardown declaration the machine tears down once, as the code's
    # own caller would: nothing is unregistered twice
    run_state_machine_as_test(OnceOnly, settings=settings(max_examples=10, deadline=None,
                                                          stateful_step_count=8))

    def claims_repeatable(ranges: list[tuple[int, int]]) -> None:
        forgetful_teardown(ranges)

    claims_repeatable.repeatable = True   # type: ignore[attr-defined]

    class Broken(OnceOnly):
        teardown_impl = staticmethod(claims_repeatable)

    with pytest.raises(AssertionError, match=r"^\[unregister-not-a-live-base\] an unregister "
                                             r"failed: \[.*713"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=20, deadline=None,
                                                            stateful_step_count=8))
