"""The implementation styles' names, in a module that imports nothing.

Each target says how the styles it runs are called on it (``Target.style_calls``); the
pytest plugin lists the names in its options and ini help at load time, when it may not
import numpy or torch.
"""

from __future__ import annotations

__all__ = ["CLOSING_STYLE", "SELF_REACHING", "STYLES", "USER_STYLES"]

STYLES = ("reference", "sglang", "generic", "mooncake", "ctypes", "driver")
# the styles an implementation under test can take (``reference`` is kvreg's own)
USER_STYLES = tuple(s for s in STYLES if s != "reference")
# styles whose code reaches CUDA by itself: register(ptr, nbytes, ...) / teardown(ranges)
SELF_REACHING = ("ctypes", "driver")
# the style whose teardown may be closing the store (``--teardown close``)
CLOSING_STYLE = "mooncake"
