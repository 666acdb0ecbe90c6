"""The implementation styles' names, in a module that imports nothing.

:mod:`.adapters` says how each style is called; the pytest plugin lists the names in its
options and ini help at load time, when it may not import numpy or torch.
"""

from __future__ import annotations

__all__ = ["SELF_REACHING", "STYLES", "USER_STYLES"]

STYLES = ("reference", "sglang", "generic", "mooncake", "ctypes", "driver")
# the styles an implementation under test can take (``reference`` is kvreg's own)
USER_STYLES = tuple(s for s in STYLES if s != "reference")
# styles whose code reaches CUDA by itself: register(ptr, nbytes, ...) / teardown(ranges)
SELF_REACHING = ("ctypes", "driver")
