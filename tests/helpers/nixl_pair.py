"""What the fake NIXL agent's tests share: two agents of one patched fake over real buffers
(numpy arrays the fake moves real bytes in), and the nixl-real tier's sequence counts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvreg.fakes.nixl import FakeNixl

KiB = 1024
SEEDS = range(24)        # the nixl-real differential's sequences
LENGTH = 40


@dataclass
class Pair:
    """Agents ``A`` and ``B`` of one fake, each with a 64 KiB buffer."""

    fake: FakeNixl
    api: Any          # the patched ``nixl._api``
    bind: Any         # the patched ``nixl._bindings``
    a: Any
    b: Any
    abuf: np.ndarray
    bbuf: np.ndarray

    @property
    def pa(self) -> int:
        return int(self.abuf.ctypes.data)

    @property
    def pb(self) -> int:
        return int(self.bbuf.ctypes.data)

    def xd(self, agent: Any, rows: list[tuple[int, int, int]]) -> Any:
        return agent.get_xfer_descs(rows, "DRAM")

    def rd(self, agent: Any, rows: list[tuple[int, int, int]]) -> Any:
        return agent.get_reg_descs([(*r, "") for r in rows], "DRAM")


def make_pair(profile: str = "ucx-host", **kw: Any) -> Iterator[Pair]:
    fake = FakeNixl(profile, **kw)
    with fake.patch():
        import nixl._api as api
        import nixl._bindings as bind

        a = api.nixl_agent("A", api.nixl_agent_config(backends=["UCX"]))
        b = api.nixl_agent("B", api.nixl_agent_config(backends=["UCX"]))
        abuf = np.arange(64 * KiB, dtype=np.uint32).astype(np.uint8)
        yield Pair(fake, api, bind, a, b, abuf, np.zeros(64 * KiB, np.uint8))
