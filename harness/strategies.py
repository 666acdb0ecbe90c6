"""Hypothesis strategies for pool geometries (kept at this path for users' imports).

They live in :mod:`kvreg.harness.pytest.strategies`.
"""

from __future__ import annotations

from kvreg.harness.pytest.strategies import (
    GEOMETRIES,
    chunk_limits,
    fault_specs,
    geometries,
    registered_geometries,
)

__all__ = ["GEOMETRIES", "chunk_limits", "fault_specs", "geometries", "registered_geometries"]
