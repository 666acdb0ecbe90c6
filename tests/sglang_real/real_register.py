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

gpu_stubs.install()

from sglang.srt.mem_cache.pool_host.common import (  # noqa: E402
    _cuda_host_register as register,
)
from sglang.srt.mem_cache.pool_host.common import (  # noqa: E402
    _cuda_host_unregister as teardown,
)

__all__ = ["register", "teardown"]
