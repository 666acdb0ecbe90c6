"""The helpers as pytest fixtures; a folder's conftest imports the ones its tests ask for
(``from ..helpers.fixtures import kvreg_cli``), so each is defined once."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.scenario import Scenario, load_paths

from .kvreg_cli import run_checked, run_kvreg
from .paths import impl_spec
from .report_schema import check_report


@pytest.fixture(scope="session")
def catalog() -> list[Scenario]:
    """The bundled catalog, loaded once per worker."""
    scenarios: list[Scenario] = load_paths()
    return scenarios


@pytest.fixture(scope="session")
def by_id(catalog: list[Scenario]) -> dict[str, Scenario]:
    return {s.id: s for s in catalog}


@pytest.fixture
def spec_of() -> Callable[..., str]:
    """``impl_spec``: ``file.py:function`` of an implementation under tests/cuda_target/impls."""
    return impl_spec


@pytest.fixture
def load_impl() -> Callable[[str, str], Implementation]:
    def load(name: str, style: str = "sglang") -> Implementation:
        return make_implementation(impl_spec(name), None, style)

    return load


@pytest.fixture
def kvreg_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_kvreg``: ``kvreg ARGS`` in a process of its own."""
    return run_kvreg


@pytest.fixture
def report() -> Callable[[Any], dict[str, dict[str, Any]]]:
    """The schema check of a parsed JSON report (returns its scenarios by id)."""
    return check_report


@pytest.fixture
def kvreg_json() -> Callable[..., tuple[int, dict[str, dict[str, Any]], dict[str, int], str]]:
    """``run_checked``: exit status, scenarios by id, summary and stderr of one
    ``kvreg run --json``."""
    return run_checked
