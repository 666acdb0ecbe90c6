"""Stand-ins for the ``vllm.*`` imports of vLLM's connector files (test-only).

vLLM is never installed here (it requires a CUDA torch). Its connector file is executed from
the wheel as it ships (``vllm_source``), and every ``vllm.*`` module it imports is answered by
this importer, for the load only. What each stand-in is, and why it cannot change what the
registration does:

- **Named below** (``_NAMED``), the few names ``register_kv_caches`` itself calls or tests:
  ``init_logger`` is ``logging.getLogger`` (vLLM's is a logger with ``*_once`` helpers);
  ``extract_layer_index`` reads the one integer of a layer name (vLLM's refuses names with
  none or several, as does this one); ``is_non_overlapping_and_dense`` is the textbook check
  (sizes by stride, each stride the product of the smaller dims); ``cdiv`` is ceiling
  division; the ``kv_cache_interface`` specs are plain classes in vLLM's hierarchy
  (``MLAAttentionSpec`` and ``FullAttentionSpec`` are ``AttentionSpec``s, ``SlidingWindowMLASpec``
  an ``MLAAttentionSpec``) with the one field registration reads, ``page_size_bytes``;
  ``envs.VLLM_MOONCAKE_CONNECTOR_TIMEOUT`` (the producer's side channel only) is vLLM's
  default, 30.
- **Every other name** is an empty class made on first use (its attributes too): base
  classes the file subclasses (``KVConnectorBase_V1``, ``KVConnectorMetadata``,
  ``SupportsHMA``), types in annotations, and functions of the scheduler, metrics,
  bootstrap and network paths, which registration never calls (calling one returns an
  instance of that empty class, which fails at its first use, so a test that strays into
  them fails instead of passing).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import math
import re
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["AttentionSpec", "FullAttentionSpec", "MLAAttentionSpec", "MambaSpec",
           "SlidingWindowMLASpec", "stubbed_vllm"]


class KVCacheSpec:
    """What ``register_kv_caches`` reads of a layer's spec: its page size in bytes."""

    def __init__(self, page_size_bytes: int) -> None:
        self.page_size_bytes = page_size_bytes


class AttentionSpec(KVCacheSpec):
    pass


class FullAttentionSpec(AttentionSpec):
    pass


class SlidingWindowSpec(AttentionSpec):
    pass


class MLAAttentionSpec(FullAttentionSpec):
    pass


class SlidingWindowMLASpec(MLAAttentionSpec):
    pass


class MambaSpec(KVCacheSpec):
    pass


class CircularBufferSpec(KVCacheSpec):
    pass


def extract_layer_index(layer_name: str, num_attn_module: int = 1) -> int:
    found = [int(s) for s in re.findall(r"\.(\d+)(?=\.|$)", layer_name)]
    if len(found) != 1:
        raise AssertionError(f"layer name {layer_name!r} must hold exactly one integer")
    return found[0]


def is_non_overlapping_and_dense(t: Any) -> bool:
    dims = sorted((t.stride(d), t.shape[d]) for d in range(t.ndim) if t.shape[d] != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


_NAMED: dict[str, dict[str, Any]] = {
    "vllm.logger": {"init_logger": logging.getLogger},
    "vllm.model_executor.models.utils": {"extract_layer_index": extract_layer_index},
    "vllm.utils.torch_utils": {"is_non_overlapping_and_dense": is_non_overlapping_and_dense},
    "vllm.utils.math_utils": {"cdiv": cdiv, "round_up": lambda a, b: math.ceil(a / b) * b},
    "vllm.v1.kv_cache_interface": {c.__name__: c for c in (
        KVCacheSpec, AttentionSpec, FullAttentionSpec, SlidingWindowSpec, MLAAttentionSpec,
        SlidingWindowMLASpec, MambaSpec, CircularBufferSpec)},
    "vllm.envs": {"VLLM_MOONCAKE_CONNECTOR_TIMEOUT": 30},
}


class _Empty(type):
    """An empty class whose attributes are empty classes (``CacheHitSource.P2P``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Empty(name, (), {"__module__": cls.__module__,
                                 "__qualname__": f"{cls.__qualname__}.{name}"})


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _Empty(name, (), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, extra: dict[str, dict[str, Any]] | None = None) -> None:
        self.named = {k: dict(v) for k, v in _NAMED.items()}
        for name, names in (extra or {}).items():
            self.named.setdefault(name, {}).update(names)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "vllm" and not fullname.startswith("vllm."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _Module(spec.name)
        module.__path__ = []
        module.__dict__.update(self.named.get(spec.name, {}))
        return module

    def exec_module(self, module: Any) -> None:
        return None


@contextmanager
def stubbed_vllm(extra: dict[str, dict[str, Any]] | None = None) -> Iterator[None]:
    """``vllm.*`` answered by the stand-ins for the block (``extra``: module -> names it
    holds besides, e.g. another shipped file already loaded); afterwards sys.modules holds no
    ``vllm`` module it did not hold before (loaded code keeps its own references)."""
    before = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    finder = _Finder(extra)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[name]
        sys.modules.update(before)
