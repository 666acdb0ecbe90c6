"""Hypothesis strategies for pool geometries (kept at this path for users' imports).

They live in :mod:`kvreg.harness.pytest.strategies`.
"""

from __future__ import annotations

from kvreg.harness.pytest.strategies import (
    CEILING,
    GEOMETRIES,
    ceiling_limits,
    chunk_limits,
    fault_specs,
    geometries,
    huge_geometries,
    registered_geometries,
)

__all__ = ["CEILING", "GEOMETRIES", "ceiling_limits", "chunk_limits", "fault_specs",
           "geometries", "huge_geometries", "registered_geometries"]
