"""Where the tests' implementations under test live, and their ``file.py:function`` specs."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# broken and correct implementations of the `cuda` target's rules (tests/cuda_target/impls)
CUDA_IMPLS = REPO / "tests" / "cuda_target" / "impls"
# implementations that misbehave as processes: hang, exit, crash (tests/isolation/impls)
ISOLATION_IMPLS = REPO / "tests" / "isolation" / "impls"


def impl_spec(name: str, function: str = "register") -> str:
    """``file.py:function`` for an implementation under tests/cuda_target/impls."""
    return f"{CUDA_IMPLS / (name + '.py')}:{function}"


def isolation_spec(function: str, module: str = "misbehaving") -> str:
    """``file.py:function`` for an implementation under tests/isolation/impls."""
    return f"{ISOLATION_IMPLS / (module + '.py')}:{function}"
