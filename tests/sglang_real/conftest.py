"""The sglang-real tier: SGLang 0.5.23's released host pools under kvreg's fakes.

Every test here is marked ``kvreg_sglang_real`` and skips, saying why, where the pinned wheel
is not installed (``tox -e sglang-real`` and ``.ci/run`` install it with ``--no-deps``) or the
tier was not asked for (``KVREG_SGLANG_REAL=1``, set by ``.ci/sglang-real``): the tier runs in
its own process, because the stand-ins ``gpu_stubs`` installs for the GPU-only modules SGLang
imports at load stay for the rest of that process.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any

import pytest

SGLANG_VERSION = "0.5.23"
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def _why_not() -> str | None:
    if os.environ.get("KVREG_SGLANG_REAL") != "1":
        return ("the sglang-real tier runs in its own process: bash .ci/sglang-real python test "
                "(or tox -e sglang-real)")
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return (f"sglang=={SGLANG_VERSION} is not installed (the sglang-real tier installs it "
                "with --no-deps: tox -e sglang-real)")
    if version != SGLANG_VERSION:
        return f"sglang {version} is installed; this tier pins {SGLANG_VERSION}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kvreg_sglang_real: runs SGLang 0.5.23's released host "
                                       "pools under kvreg's fakes (tox -e sglang-real)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = _why_not()
    ours: dict[Path, bool] = {}     # resolved once per file, not per item (3000+ items)
    for item in items:
        inside = ours.get(item.path)
        if inside is None:
            inside = ours[item.path] = HERE in item.path.resolve().parents
        if inside:
            item.add_marker(pytest.mark.kvreg_sglang_real)
            if why is not None:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def sglang() -> Any:
    """SGLang's pool modules, imported once with the GPU-only stand-ins in place."""
    import sglang_pools

    return sglang_pools.load()


@pytest.fixture
def gpu_path(sglang: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pools' CUDA gate (``_is_cuda``, read at import) set as on a CUDA machine, so
    ``destroy()`` unregisters; the JIT kernel probe that gate also enables is GPU-only."""
    for module in sglang.gated:
        monkeypatch.setattr(module, "_is_cuda", True)
        if hasattr(module, "can_use_hicache_jit_kernel"):
            monkeypatch.setattr(module, "can_use_hicache_jit_kernel", lambda **_: False)
