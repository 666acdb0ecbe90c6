"""Fidelity probes: each open question of the spec, asked the same way of the fake and the hardware.

A probe is written once against the backend interface (``CudaBackend`` for CUDA, a
``VerbsBackend`` for RDMA) and runs unchanged on ``FakeCuda(profile)`` and on ``RealCuda``.
It records *codes and normalised values*, never message text or raw pointers (compare
codes exactly, normalise what may legitimately differ), so two
observations are equal exactly when the fake behaved like the machine. Each probe names
the ``DeviceProfile`` field(s) it settles and says how an observation maps to a value:
that mapping is what lets ``profile_from_report`` turn a real run into a profile.

The probe bodies live in :mod:`.probes_cuda` (docs/cuda-runtime.md §12, in order) and
:mod:`.probes_rdma` (docs/mooncake-verbs.md §5); this module holds the registry
(:func:`all_probes`); the shared machinery is :mod:`.probe` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Iterable

from .probe_types import Family, Outcome, Probe, ProbeError, ProbeSkipped, compare, run_probe
from .probes_cuda import CUDA_PROBES
from .probes_rdma import RDMA_PROBES

__all__ = ["Outcome", "Probe", "ProbeError", "ProbeSkipped", "all_probes", "compare",
           "get_probe", "run_probe"]

_REGISTRY: dict[str, Probe] = {}


def _load() -> dict[str, Probe]:
    if not _REGISTRY:
        for probe in (*CUDA_PROBES, *RDMA_PROBES):
            if probe.name in _REGISTRY:
                raise RuntimeError(f"duplicate probe name {probe.name!r}")
            _REGISTRY[probe.name] = probe
    return _REGISTRY


def all_probes(family: Family | None = None, names: Iterable[str] | None = None
               ) -> list[Probe]:
    """The probes in run order, optionally of one family or by name (ValueError on unknown)."""
    registry = _load()
    if names is not None:
        wanted = list(names)
        unknown = [n for n in wanted if n not in registry]
        if unknown:
            raise ValueError(f"unknown probe(s): {', '.join(unknown)}; known: "
                             f"{', '.join(registry)}")
        return [registry[n] for n in wanted if family is None or registry[n].family == family]
    return [p for p in registry.values() if family is None or p.family == family]


def get_probe(name: str) -> Probe:
    return all_probes(names=[name])[0]
