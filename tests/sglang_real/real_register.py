"""SGLang 0.5.23's installed registration functions, as a kvreg implementation (sglang style).

``kvreg run --impl tests/sglang_real/real_register.py:register`` runs the wheel's own
``pool_host/common.py`` ``_cuda_host_register`` / ``_cuda_host_unregister`` through the catalog;
its known failures are recorded in ``kvreg-baseline.txt`` beside this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_stubs
import torch

gpu_stubs.install()

# kvreg imports an implementation with its fakes patched in, where torch.cuda.is_available()
# is True; SGLang's platform probe (sglang/srt/platforms/__init__.py) then asks
# torch.cuda.get_device_name(), which the fake does not answer. The probe is import-time
# machinery, not the registration under test: it runs with CPU torch's own answer.
_fake_is_available = torch.cuda.is_available
torch.cuda.is_available = lambda: False   # what CPU torch answers
try:
    from sglang.srt.mem_cache.pool_host.common import (
        _cuda_host_register as register,
    )
    from sglang.srt.mem_cache.pool_host.common import (
        _cuda_host_unregister as teardown,
    )
finally:
    torch.cuda.is_available = _fake_is_available

__all__ = ["register", "teardown"]
