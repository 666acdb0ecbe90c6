"""The "looks like a CUDA machine" switch (kvreg.fakes.cuda.cuda_machine): torch's CUDA queries
answer as the profile inside the fake's scope only, and only when asked for."""

from __future__ import annotations

import pytest
import torch

from kvreg.fakes import FakeCuda
from kvreg.fakes.cuda.cuda_machine import torch_cuda_version
from kvreg.fakes.cuda.profile import PROFILES


def sglang_is_cuda() -> bool:
    # SGLang 0.5.23 srt/utils/common.py is_cuda(), the gate of pool_host/base.py destroy()
    return bool(torch.cuda.is_available() and torch.version.cuda is not None)


def test_off_by_default_keeps_the_cpu_build_answer() -> None:
    assert torch.version.cuda is None      # this suite runs on a CPU build of torch
    with FakeCuda().patch():
        assert torch.version.cuda is None
        assert not sglang_is_cuda()


def test_on_answers_as_the_profile_and_is_undone_after() -> None:
    before = (torch.version.cuda, torch.cuda.is_available, torch.cuda.device_count)
    with FakeCuda("h200-r580").patch(cuda_machine=True):
        assert torch.version.cuda == "13.0"          # runtime_version 13000, a cu130 wheel
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert sglang_is_cuda()
        assert torch.version.hip is None
    assert (torch.version.cuda, torch.cuda.is_available, torch.cuda.device_count) == before
    assert not sglang_is_cuda()


def test_a_failed_block_still_restores() -> None:
    with pytest.raises(KeyError), FakeCuda().patch(cuda_machine=True):
        raise KeyError("boom")
    assert torch.version.cuda is None


@pytest.mark.parametrize(("profile", "available", "count"), [
    ("no-driver", False, 0), ("no-gpu", False, 0), ("h100-r575", True, 1)])
def test_machines_without_a_usable_device_say_so(profile: str, available: bool,
                                                 count: int) -> None:
    p = PROFILES[profile]
    with FakeCuda(p).patch(cuda_machine=True):
        assert torch.cuda.is_available() is available
        assert torch.cuda.device_count() == count
        assert torch.version.cuda == torch_cuda_version(p.runtime_version)


@pytest.mark.parametrize(("version", "text"), [(13000, "13.0"), (12090, "12.9"),
                                               (12080, "12.8"), (11080, "11.8")])
def test_version_string_is_torch_s(version: int, text: str) -> None:
    assert torch_cuda_version(version) == text


def test_bad_runtime_version_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        torch_cuda_version(0)


def test_marker_and_option_turn_it_on_for_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest, torch

@pytest.mark.kvreg_cuda_machine
def test_marked(fake_cudart):
    assert torch.version.cuda == "13.0" and torch.cuda.is_available()

def test_unmarked(fake_cudart):
    assert torch.version.cuda is None
''')
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    pytester.makepyfile(test_all='''
import torch

def test_every_fixture(fake_cudart):
    assert torch.version.cuda == "13.0"
''')
    pytester.runpytest("-p", "no:cacheprovider", "--kvreg-cuda-machine",
                       "test_all.py").assert_outcomes(passed=1)
