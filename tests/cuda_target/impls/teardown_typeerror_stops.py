"""SGLang's algorithm (sglang_upstream.py) with a teardown whose error path is broken as
SGLang 0.5.23's ``_cuda_host_unregister`` is: the failing code is formatted with
``cudaGetErrorString(int(rc))``, which torch's binding rejects with TypeError
(docs/cuda-runtime.md §7), so teardown stops at the first failed unregister and never tries
the chunks after it. Expected rule: teardown-raised. Whether the chunks never tried are a
leak depends on why the unregister failed (docs/cuda-runtime.md §3.1): after
cudaErrorCudartUnloading the runtime is going away and releases them (a warning,
unregister-unloading); after cudaErrorInvalidValue they stay pinned (leak).
"""

from __future__ import annotations

from typing import Any

import torch
from sglang_upstream import ATTR, register

__all__ = ["register", "teardown"]


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    ranges = getattr(buffer, ATTR, None) or []
    for ptr, _ in reversed(ranges):
        rc = int(cudart.cudaHostUnregister(ptr))
        if rc != 0:
            raise RuntimeError(f"cudaHostUnregister failed: {cudart.cudaGetErrorString(rc)}")
    setattr(buffer, ATTR, [])
