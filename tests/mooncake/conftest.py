"""Fixtures for the fake Mooncake tests: a set-up store on a chosen profile and NICs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.mooncake import FakeMooncake

MiB = 1 << 20


def make_store(profile: str = "released", *, protocol: str = "rdma",
               devices: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
               gseg: int = 4 * MiB, lbuf: int = MiB, rdma_devices: str = "",
               master: str = "master:50051") -> tuple[FakeMooncake, Any]:
    fake = FakeMooncake(profile, devices=devices, env=env or {})
    store = fake.store()
    rc = store.setup("host0", "P2PHANDSHAKE", gseg, lbuf, protocol, rdma_devices, master)
    assert rc == 0, rc
    return fake, store


def real(fake: FakeMooncake, nbytes: int, fill: int | None = None, name: str = "") -> Any:
    """A tracked numpy buffer (patterned when ``fill`` is given)."""
    arr = np.zeros(nbytes, np.uint8) if fill is None else \
        ((np.arange(nbytes) * 31 + fill) % 251).astype(np.uint8)
    return fake.track(arr, name=name)


@pytest.fixture
def mk() -> Callable[..., tuple[FakeMooncake, Any]]:
    return make_store


@pytest.fixture
def buf() -> Callable[..., Any]:
    return real
