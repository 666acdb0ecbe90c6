"""What the gpu_rdma target's two worlds share, whichever registrar a node has (a Mooncake
Transfer Engine, world.py; a NIXL agent, nixl_world.py): the two nodes, each with its own
fake GPU attached to the node and the KV pool laid out in it (layout.py); the scenario's
faults armed once the registrars are ready, so ``nth`` counts the implementation's calls;
register on prefill, then decode, stopping at the first error; each teardown round giving
each node's handle back, decode first; and the end, where each node's live registrations
are read. A transport's world says only what differs: its registrar, what the checks read
of it after register and at the end, its transfers and its rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake import FakeMooncake
from kvreg.harness.run.budget import CallBudget
from kvreg.harness.run.result import Violation
from kvreg.harness.run.world import TracedWorld, next_seq

from . import styles
from .buffers import KvBuffer
from .layout import KvLayout, allocate, ready
from .memory_saver import HookError, pause_resume, with_hook_errors
from .options import NODES, GpuRdmaOptions
from .record import BaseNodeRun, BaseRecord
from .transfers import TransferFailure

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["EDGES", "BaseNode", "NodeWorld", "arm_faults", "build_nodes"]

# how the transfers step covers the pages (the report's ``copy.method``, selection.py)
EDGES = "buffer ends and registration edges"


@dataclass
class BaseNode:
    """One node: its GPU and its buffers (a transport adds its registrar)."""

    name: str
    cuda: FakeCuda
    layout: KvLayout


NodeT = TypeVar("NodeT", bound=BaseNode)
RecordT = TypeVar("RecordT", bound=BaseRecord[Any, Any])


def build_nodes(sc: Scenario, opts: GpuRdmaOptions, fake: FakeMooncake,
                node: Callable[[str, FakeCuda, KvLayout, list[NodeT]], NodeT], *,
                real: bool = False) -> list[NodeT]:
    """Both nodes of ``fake``'s fabric, each with its GPU attached and its KV pool
    allocated; ``node(name, cuda, layout, nodes before it)`` adds the registrar."""
    geometry = sc.geometry()
    nodes: list[NodeT] = []
    for name in NODES:
        cuda = FakeCuda(opts.device_profile())
        drv = ready(cuda)
        host = fake.node(name)
        host.attach_gpu(cuda.gpu_memory())
        layout = allocate(drv, host, geometry, opts, real=real)
        nodes.append(node(name, cuda, layout, nodes))
    return nodes


def arm_faults(sc: Scenario, fake: FakeMooncake, calls: str, noun: str) -> CallBudget:
    """Arm the scenario's faults once the registrars are ready; the call budget counts the
    implementation's ``calls`` (a fault-point pattern) as calls to its ``noun``."""
    for spec in sc.faults:
        fake.faults.arm_from_dict(spec)
    return CallBudget(fake.faults, calls, sc.call_budget, noun)


class NodeWorld(TracedWorld, Generic[NodeT, RecordT]):
    """One gpu_rdma run over two nodes; a transport's world gives each node's registrar,
    what register leaves of it (:meth:`after_register`) and what teardown leaves
    (:meth:`live_end`)."""

    fake: FakeMooncake
    record: RecordT

    def __init__(self, opts: GpuRdmaOptions, fake: FakeMooncake, nodes: list[NodeT],
                 record: RecordT, budget: CallBudget) -> None:
        super().__init__(fake, record, budget)
        self.opts = opts
        self.nodes = nodes
        self.impl: Implementation | None = None
        # the implementation's release / resume hooks that raised (pause_resume)
        self.hook_errors: list[HookError] = []

    def registrar(self, node: NodeT) -> Any:
        """What the implementation registers with on ``node`` (its style's first argument)."""
        raise NotImplementedError

    def after_register(self, node: NodeT, run: Any) -> None:
        """Record in ``run`` what the checks read of ``node``'s registrar right after
        register (returned or raised)."""
        raise NotImplementedError

    def live_end(self, node: NodeT) -> list[Any]:
        """``node``'s registrations once teardown is over (the record's ``live_end``)."""
        raise NotImplementedError

    def _runs(self) -> list[tuple[NodeT, BaseNodeRun]]:
        return list(zip(self.nodes, self.record.nodes, strict=True))

    def register(self, impl: Implementation) -> bool:
        """Each node's buffers through the implementation; stop at the first error."""
        self.impl = impl
        for node, run in self._runs():
            self.progress.step("register", f"{node.name}: {len(run.entries)} buffers")
            run.seq_start = next_seq(self.fake)
            with node.cuda.patch(torch=False):
                handle, error = self.attempt(partial(styles.register_buffers, impl,
                                                     self.registrar(node), node.layout.buffers))
            run.seq_end = next_seq(self.fake)
            self.after_register(node, run)
            if error is not None:
                run.error = error
                return False
            run.handle, run.registered = handle, True
        return True

    def pause(self) -> None:
        """The memory saver's pause and resume between register and the transfers, where
        the scenario asks for it (``pause_resume``, memory_saver.py)."""
        if self.opts.pause_resume and self.impl is not None:
            self.hook_errors = pause_resume(self, self.impl, lambda: next_seq(self.fake),
                                            self.registrar)

    def judged(self, found: list[Violation]) -> list[Violation]:
        """The transport's rules' violations with the hooks that raised."""
        return with_hook_errors(found, self.hook_errors, self.record.expect)

    def pairs(self) -> list[tuple[KvBuffer, KvBuffer, int]]:
        """(prefill's buffer, decode's, its page's length) of every buffer, in order."""
        src, dst = self.nodes
        b = src.layout.buffers
        items = [*b.kv_item_lens, *b.aux_item_lens, *b.state_item_lens]
        return list(zip(b.entries, dst.layout.buffers.entries, items, strict=True))

    def written(self, failures: list[TransferFailure], moved: int, total: int) -> None:
        """What the transfers left: the page writes that failed, and their coverage
        (``moved`` of the pool's ``total`` pages written)."""
        self.record.transfer_failures = failures
        self.coverage = {"pages_copied": moved, "pages_total": total, "method": EDGES}

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        for node, run in reversed(self._runs()):
            if not run.registered:
                continue
            self.progress.step(f"teardown round {round_ + 1}", node.name)
            with node.cuda.patch(torch=False):
                _, error = self.attempt(partial(styles.teardown_buffers, impl,
                                                self.registrar(node), run.handle))
            if error is not None:
                self.record.teardown_errors.append((round_, node.name, error))

    def finish(self) -> None:
        fake = self.fake
        fake.trace.observer = None
        self.record.trace = list(fake.trace)
        for node in self.nodes:
            self.record.live_end[node.name] = self.live_end(node)
        fake.faults.clear()
        fake.close_all()
