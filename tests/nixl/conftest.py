"""Fixtures for the fake NIXL agent's tests (tests/helpers/nixl_pair.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..helpers.nixl_pair import Pair, make_pair


@pytest.fixture
def pair() -> Iterator[Pair]:
    yield from make_pair()
