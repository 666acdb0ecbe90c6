"""The "looks like a CUDA machine" switch: torch's CUDA queries answer as the device profile.

Real pool code gates its GPU path on these queries, often once at import — SGLang 0.5.23's
``is_cuda()`` is ``torch.cuda.is_available() and torch.version.cuda is not None``
(``srt/utils/common.py``) and ``pool_host/base.py`` only unregisters in ``destroy()`` when it
held. On a CPU build of torch ``torch.version.cuda`` is None, so such code takes its CPU path
under the fake and leaks every registration. With the switch on, for the fake's scope only:

- ``torch.version.cuda`` is the CUDA version of torch's bundled runtime, ``"13.0"`` for a
  profile runtime version of 13000 (what a cu130 wheel reports); ``torch.version.hip`` stays;
- ``torch.cuda.is_available()`` is True exactly when the profile's machine has a driver and a
  device, and ``torch.cuda.device_count()`` is the profile's count (0 without a driver).

Nothing else changes and no real CUDA call is made. Default off (``FakeCuda.patch(
cuda_machine=True)``; the plugin's ``kvreg_cuda_machine`` marker or ``--kvreg-cuda-machine``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from ..patching import patch_attr
from .profile import DeviceProfile

__all__ = ["looks_like_cuda", "torch_cuda_version"]


def torch_cuda_version(runtime_version: int) -> str:
    """``torch.version.cuda`` for a bundled runtime version: 13000 -> "13.0", 12090 -> "12.9"."""
    if runtime_version <= 0:
        raise ValueError(f"runtime version must be positive, got {runtime_version}")
    return f"{runtime_version // 1000}.{runtime_version % 1000 // 10}"


@contextmanager
def looks_like_cuda(profile: DeviceProfile) -> Iterator[bool]:
    """For the block torch answers its CUDA queries as ``profile``'s machine; yields False
    (and changes nothing) when torch is not installed."""
    try:
        import torch
        import torch.cuda
        import torch.version
    except ImportError:
        yield False
        return
    usable = profile.env == "ok" and profile.device_count > 0
    count = profile.device_count if profile.env == "ok" else 0
    with ExitStack() as stack:
        stack.enter_context(patch_attr(torch.version, "cuda",
                                       torch_cuda_version(profile.runtime_version)))
        stack.enter_context(patch_attr(torch.cuda, "is_available", lambda: usable))
        stack.enter_context(patch_attr(torch.cuda, "device_count", lambda: count))
        yield True
