"""Per-scenario limits of a supervised run: wall time and memory, with their option names.

Defaults are sized for the bundled catalog: its slowest scenario takes about 1 s on an idle
core and 5 s on a runner loaded five times over, and its largest (the real-memory DeepSeek V4
pools, the copy validation of a million pages) grow a worker's data segment by between
512 MiB and 1 GiB (the whole catalog passes with ``--memory-limit 1G``, not with 512M).
60 s and 2 GiB leave that margin twice over and still stop an endless loop or an unbounded
allocation within a minute.

The memory limit bounds how much a worker's data segment (heap and private writable
mappings, ``RLIMIT_DATA``) may grow during one scenario. ``RLIMIT_AS`` would count the
address space torch and the CUDA libraries reserve without using, and break their import;
``RLIMIT_DATA`` counts what an allocation really takes: ``bytearray(n)``, numpy arrays,
``malloc``. Past it, an allocation fails with ``MemoryError`` and the verdict names the limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT_MEMORY", "DEFAULT_TIMEOUT_S", "Limits", "TimeLimitExceeded", "format_size",
           "parse_size", "parse_timeout"]

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY = 2 << 30
MIN_MEMORY = 16 << 20
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40,
          "tb": 10**12, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """``512M``, ``2GiB``, ``1.5G``, ``1000000`` -> bytes; ValueError names what is expected."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise ValueError(f"expected a size such as 512M, 2G or 2GiB (bytes without a unit); "
                         f"got {text!r}")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value < MIN_MEMORY:
        raise ValueError(f"expected at least {format_size(MIN_MEMORY)}; got {text!r}")
    return value


def parse_timeout(text: str) -> float:
    """Seconds, a positive number."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds; got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"expected a positive number of seconds; got {text!r}")
    return value


def format_size(n: int) -> str:
    """Bytes in the largest binary unit that keeps a short number (``2 GiB``)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Limits:
    """What one scenario may take, and the names of the options that set it (for messages)."""

    timeout: float = DEFAULT_TIMEOUT_S
    memory: int = DEFAULT_MEMORY
    timeout_option: str = "--timeout"
    memory_option: str = "--memory-limit"

    def time_text(self) -> str:
        shown = f"{self.timeout:g}"
        return f"the time limit of {shown} s ({self.timeout_option})"

    def memory_text(self) -> str:
        return f"the memory limit of {format_size(self.memory)} ({self.memory_option})"


class TimeLimitExceeded(BaseException):
    """Raised in an unsupervised run when its time limit is up (a BaseException, so an
    implementation's ``except Exception`` cannot swallow it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"still running after {seconds:g} s")
        self.seconds = seconds
