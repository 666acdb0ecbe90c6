"""What a gpu_rdma run records on either transport (the engine's, checks.py; NIXL's,
nixl_checks.py): one node's registration through the implementation and the run's record,
written by the two-node world (node_world.py) and read by the transport's rules. Each
transport adds only what its rules read of its registrar: the engine's published buffers and
region map, the agent's registrations and the peers' metadata.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Generic, TypeVar

from kvreg.fakes.recorder import TraceEntry

from .buffers import KvBuffer
from .transfers import TransferFailure

__all__ = ["BaseNodeRun", "BaseRecord"]


@dataclass
class BaseNodeRun:
    """One node's registration through the implementation."""

    node: str
    entries: tuple[KvBuffer, ...]
    _: KW_ONLY                         # a transport's own fields may follow positionally
    handle: Any = None
    registered: bool = False           # register returned normally
    error: BaseException | None = None
    seq_start: int = 0
    seq_end: int = 0

    def name_at(self, addr: int) -> str:
        """The buffer ``addr`` lies in, as the rules name it: ``k0``, ``k0+0x1000``, or the
        bare address outside every buffer."""
        for e in self.entries:
            if e.ptr <= addr < e.ptr + max(e.nbytes, 1):
                return e.name if addr == e.ptr else f"{e.name}+{addr - e.ptr:#x}"
        return f"{addr:#x}"


RunT = TypeVar("RunT", bound=BaseNodeRun)
LiveT = TypeVar("LiveT")


@dataclass
class BaseRecord(Generic[RunT, LiveT]):
    """Everything a gpu_rdma run produced, for the checks: ``live_end`` holds each node's
    registrations once teardown is over, in the transport's terms (``LiveT``)."""

    expect: str
    nodes: list[RunT]
    trace: list[TraceEntry] = field(default_factory=list)
    exercised: tuple[str, ...] = ()
    transfer_failures: list[TransferFailure] = field(default_factory=list)
    teardown_errors: list[tuple[int, str, BaseException]] = field(default_factory=list)
    teardown_start: int | None = None
    live_end: dict[str, list[LiveT]] = field(default_factory=dict)
    budget_hit: int | None = None
    logs: list[str] = field(default_factory=list)
    repeatable: bool = True             # the implementation's teardown repeats (contract.py)

    def calls(self, face: str, apis: tuple[str, ...], lo: int = 0,
              hi: int | None = None) -> list[TraceEntry]:
        """The calls of ``apis`` on ``face`` recorded with ``lo <= seq < hi``."""
        return [e for e in self.trace if e.face == face and e.api in apis and e.seq >= lo
                and (hi is None or e.seq < hi)]
