"""What a ``cuda`` scenario fixes besides its pool: the chunk-limit variable the sglang style
reads and the machine (the device profile and the profile options that decide what code binds
once), set for the whole process (harness/run/process.py). The cuda target reads no options
table of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.profile import DeviceProfile, profile_with_options
from kvreg.harness.run.target import ProcessConfig

from .reference import ENV_CHUNK_GB

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["ENV_CHUNK_GB", "MACHINE_OPTIONS", "chunk_env", "machine", "machine_profile",
           "process_config", "validate_options"]

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


# profile options that decide what code binds once per process (a libcudart handle it
# loads and caches: which names load is a fact of the machine, docs/cuda-runtime.md §6.3),
# so a scenario that sets one gets a worker of its own; the defaults keep the profile alone
MACHINE_OPTIONS = {"libcudart_install": "toolkit"}


def machine(sc: Scenario) -> tuple[Any, ...]:
    """The device profile, and each machine option ``sc`` sets away from its default as a
    ``(name, value)`` pair (:func:`machine_profile` reads it back)."""
    chosen = tuple((key, sc.profile_options[key]) for key, default in MACHINE_OPTIONS.items()
                   if sc.profile_options.get(key, default) != default)
    return (sc.profile, *chosen)


def machine_profile(config: ProcessConfig) -> DeviceProfile | None:
    """The profile a worker of ``config`` imports code under (None: the default one)."""
    if not config.machine:
        return None
    return profile_with_options(config.machine[0], dict(config.machine[1:]))


def process_config(sc: Scenario) -> ProcessConfig:
    """The chunk-limit variable and the machine (code may read both once)."""
    return ProcessConfig("cuda", ((ENV_CHUNK_GB, chunk_env(sc)),), machine(sc))
