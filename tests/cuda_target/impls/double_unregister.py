"""BROKEN: teardown never forgets what it released, so a second teardown unregisters every
chunk base again (cudaHostUnregister returns 713). Failures are logged, not raised.

Expected rule: unregister-not-a-live-base ("which was already released").
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from page_aligned import register_chunks

ATTR = "_broken_ranges"
log = logging.getLogger("kvreg_tests.double_unregister")


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    """Correct, as SGLang's (page_aligned/): the bug is in teardown."""
    register_chunks(buffer, registration_granularity_bytes, ATTR)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):   # the bug: the list is never cleared
        rc = int(cudart.cudaHostUnregister(ptr))
        if rc:
            log.warning("cudaHostUnregister(%#x) failed with rc=%d", ptr, rc)
