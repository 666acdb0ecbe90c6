"""What a ``cuda`` scenario fixes besides its pool: the chunk-limit variable the sglang style
reads and the device profile, set for the whole process (harness/run/process.py). The cuda
target reads no options table of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvreg.harness.run.target import ProcessConfig

from .reference import ENV_CHUNK_GB

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["ENV_CHUNK_GB", "chunk_env", "process_config", "validate_options"]

GiB = 1 << 30


def chunk_env(sc: Scenario) -> str | None:
    """The chunk-limit variable's value for ``sc``: the one it sets (``chunk_gb`` 0, "" or
    "unset"), else its limit in whole GiB (None: unset, the limit is no whole GiB)."""
    if sc.chunk_var:
        return sc.chunk_var[0]
    return str(sc.chunk_limit // GiB) if sc.chunk_limit % GiB == 0 else None


def validate_options(options: Mapping[str, Any]) -> list[str]:
    """The cuda target reads no table of its own."""
    return []


def process_config(sc: Scenario) -> ProcessConfig:
    """The chunk-limit variable and the device profile (code may read both once)."""
    return ProcessConfig("cuda", ((ENV_CHUNK_GB, chunk_env(sc)),), (sc.profile,))
