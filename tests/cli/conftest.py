"""The fixtures of the ``kvreg`` command line's tests (tests/helpers/fixtures.py); the
implementations they run are the `cuda` target's (tests/cuda_target/impls)."""

from __future__ import annotations

from ..helpers.fixtures import catalog, kvreg_cli, report, spec_of

__all__ = ["catalog", "kvreg_cli", "report", "spec_of"]
