"""kvreg's reference CUDA registration (kept at this path: ``kvreg.harness.reference:register``
is a documented ``--impl`` SPEC). It lives in :mod:`kvreg.harness.cuda.reference`.
"""

from __future__ import annotations

from kvreg.harness.cuda.reference import (
    RANGES_ATTR,
    RegistrationError,
    TeardownError,
    chunk_limit_from_env,
    register,
    register_buffer,
    teardown,
    teardown_buffer,
)

__all__ = ["RANGES_ATTR", "RegistrationError", "TeardownError", "chunk_limit_from_env",
           "register", "register_buffer", "teardown", "teardown_buffer"]
