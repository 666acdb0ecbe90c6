"""vLLM's connector files, executed from the wheel as they ship (test-only).

``.ci/vllm-connectors PYTHON DIR`` downloads the pinned wheel (``pip download --no-deps``,
nothing installed) and extracts its ``kv_connector/v1/mooncake`` and ``nixl`` folders into
DIR; ``KVREG_VLLM_SRC=DIR`` points the tests at it. :func:`load` compiles a file's bytes
under its own module name and path (tracebacks name the shipped file), with ``vllm.*``
answered by ``vllm_stubs`` for the load only, and ``mooncake.engine`` by whatever is patched
in at that moment (``FakeMooncake.patch()``: the fake's door class, which later patches
redirect).
"""

from __future__ import annotations

import hashlib
import os
import sys
import types
from pathlib import Path
from typing import Any

from vllm_stubs import stubbed_vllm

__all__ = ["MOONCAKE", "NIXL_METADATA", "NIXL_WORKER", "VLLM_VERSION", "load", "source_root",
           "why_not"]

VLLM_VERSION = "0.33.0"
CONNECTORS = "vllm/distributed/kv_transfer/kv_connector/v1"
MOONCAKE = f"{CONNECTORS}/mooncake/mooncake_connector.py"
NIXL_WORKER = f"{CONNECTORS}/nixl/base_worker.py"
NIXL_METADATA = f"{CONNECTORS}/nixl/metadata.py"
# sha256 of the files in vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl (PyPI)
SHA256 = {MOONCAKE: "ff017f4f5f2916259399595a62c76e57c3743b3edf6b0213d4ea32e1116a2079",
          NIXL_WORKER: "db9cc20aafb0be220b0d9ddbc94ac1f6495f02956c7e480901b394d6bfff5cd9",
          NIXL_METADATA: "a4e61de873eb505f3928d25f74ee8761eff1db4eae955be15ed2de8ed8c3ebad"}


def source_root() -> Path | None:
    root = os.environ.get("KVREG_VLLM_SRC")
    return Path(root) if root else None


def why_not() -> str | None:
    root = source_root()
    if root is None:
        return (f"vLLM {VLLM_VERSION}'s connector files are not here: bash .ci/vllm-connectors "
                "python DIR, then KVREG_VLLM_SRC=DIR")
    if not (root / MOONCAKE).is_file():
        return f"KVREG_VLLM_SRC={root} holds no {MOONCAKE}"
    return None


def load(relpath: str, extra: dict[str, dict[str, Any]] | None = None) -> types.ModuleType:
    """The shipped file ``relpath`` (under ``KVREG_VLLM_SRC``) as its own module, checked
    against the wheel's bytes (``extra``: names some ``vllm.*`` modules hold for the load,
    vllm_stubs.stubbed_vllm)."""
    root = source_root()
    assert root is not None, why_not()
    path = root / relpath
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if relpath in SHA256 and digest != SHA256[relpath]:
        raise AssertionError(f"{path} is not vLLM {VLLM_VERSION}'s file (sha256 {digest})")
    name = relpath.removesuffix(".py").replace("/", ".")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    with stubbed_vllm(extra):
        sys.modules[name] = module
        try:
            exec(compile(data, str(path), "exec"), module.__dict__)
        finally:
            del sys.modules[name]
    return module
