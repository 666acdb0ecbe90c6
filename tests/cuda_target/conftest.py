"""The fixtures of the `cuda` target's tests (tests/helpers/fixtures.py).

``impls/`` holds implementations under test: deliberately broken ones (one per rule of
``kvreg.harness.cuda.checks``), correct variants that must not be flagged, and a faithful copy of
upstream SGLang's algorithm. The fixtures load them, run the ``kvreg`` CLI in a process of
its own, and check a JSON report against the public contract (ARCHITECTURE.md#public-contract).
"""

from __future__ import annotations

from ..helpers.fixtures import by_id, catalog, kvreg_cli, kvreg_json, load_impl, report, spec_of

__all__ = ["by_id", "catalog", "kvreg_cli", "kvreg_json", "load_impl", "report", "spec_of"]
