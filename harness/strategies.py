"""Hypothesis strategies for downstream property tests (kept at this path for users' imports).

- ``geometries(pool_type=None, layout=None, groups=True)`` / ``registered_geometries()``:
  valid pool geometries of every type and layout, hybrid groups included;
- ``chunk_limits(geometry)``: chunk limits **in bytes** (generic and mooncake styles);
- ``chunk_gb(geometry)``: chunk limits **in whole GiB**, as the sglang style reads them from
  ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``;
- ``fault_specs(points, max_rules)``: fault plans as scenario-file tables.

They live in :mod:`kvreg.harness.pytest.strategies`; every choice is drawn through
Hypothesis, so failures replay from a shared example database.
"""

from __future__ import annotations

from kvreg.harness.pytest.strategies import (
    CEILING,
    GEOMETRIES,
    ceiling_limits,
    chunk_gb,
    chunk_limits,
    fault_specs,
    geometries,
    huge_geometries,
    registered_geometries,
)

__all__ = ["CEILING", "GEOMETRIES", "ceiling_limits", "chunk_gb", "chunk_limits",
           "fault_specs", "geometries", "huge_geometries", "registered_geometries"]
