"""The doors' cost (fakes/doors.py): a register/unregister pair through what code keeps
(``torch.cuda.cudart()``, a libcudart ``ctypes.CDLL``), which forwards to the fake patched
in, against the same pair on the fake's own faces. Ratios are printed, never asserted."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda

from .conftest import MEDIANS

torch = pytest.importorskip("torch")
GiB = 1 << 30


def _pair(cudart: Any, ptr: int) -> None:
    cudart.cudaHostRegister(ptr, 4096, 0)
    cudart.cudaHostUnregister(ptr)


@pytest.mark.parametrize("door", ["direct-torch", "door-torch", "direct-ctypes", "door-ctypes"])
def test_register_pair_through_a_door(benchmark: Any, door: str) -> None:
    fake = FakeCuda()
    with fake.patch():
        ptr = fake.virtual(GiB, name="b").data_ptr()
        if door.endswith("torch"):
            handle = fake.torch if door.startswith("direct") else torch.cuda.cudart()
        else:
            handle = (fake.load_libcudart("libcudart.so") if door.startswith("direct")
                      else ctypes.CDLL("libcudart.so"))
            handle.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.c_uint]
            handle.cudaHostUnregister.argtypes = [ctypes.c_void_p]
        benchmark(_pair, handle, ptr)
    MEDIANS[f"doors_{door}"] = benchmark.stats.stats.median


def pytest_terminal_summary(terminalreporter: Any) -> None:   # pragma: no cover - report only
    for kind in ("torch", "ctypes"):
        num, den = MEDIANS.get(f"doors_door-{kind}"), MEDIANS.get(f"doors_direct-{kind}")
        if num and den:
            terminalreporter.write_line(f"doors: {kind} pair through the door / direct = "
                                        f"{num / den:.2f}x (report)")
