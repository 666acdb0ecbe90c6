"""The ``gpu_rdma`` target's world over the Mooncake Transfer Engine: a prefill and a decode
node on the fake fabric, each with a fake GPU (its own :class:`FakeCuda`, attached to the node
so its NICs pin device memory through nvidia-peermem's rules, docs/cuda-runtime.md §14.4), the
scenario's NICs, the KV pool laid out as the engines allocate it (layout.py) and an
initialized fake Transfer Engine (rdma, every NIC; docs/mooncake-verbs.md §8). Register, the
teardown rounds and the end are both transports' (node_world.py); here, what the checks read
of an engine, and transfers that write the deciding pages of each buffer from prefill into
decode. While a node's code runs, ``cuda.bindings`` reaches that node's GPU (code that asks
``cuMemGetAddressRange`` finds its allocations). ``build_world`` builds either transport's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake import FakeMooncake
from kvreg.fakes.mooncake.engine import TransferEngine
from kvreg.harness.run.result import Violation
from kvreg.harness.run.target import CannotRun, SkipScenario
from kvreg.harness.run.world import TracedWorld, next_seq

from . import styles
from .checks import GrRecord, NodeRun, Published, check_gpu_rdma_run, gpu_rdma_warnings
from .data import compare_pages, fill_sources
from .layout import KvLayout, LayoutError
from .memory_saver import hooks
from .node_world import BaseNode, NodeWorld, arm_faults, build_nodes
from .options import NODES, GpuRdmaOptions
from .transfers import write_pages

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["GpuNode", "GpuRdmaWorld", "build_world", "deployment"]


@dataclass
class GpuNode(BaseNode):
    """One node: its GPU, its buffers and its engine."""

    engine: TransferEngine


def deployment(opts: GpuRdmaOptions) -> FakeMooncake:
    """The fabric of ``opts``: both nodes with the scenario's NICs, no engine yet."""
    fake = FakeMooncake(opts.engine_profile(), node=NODES[0], devices=dict(opts.nics), env={})
    fake.fabric.add_node(NODES[1])
    for name, prof in opts.nics:
        fake.fabric.add_device(name, prof, node=NODES[1])
    return fake


def _build_nodes(sc: Scenario, opts: GpuRdmaOptions, fake: FakeMooncake) -> list[GpuNode]:
    def node(name: str, cuda: FakeCuda, layout: KvLayout, _before: list[GpuNode]) -> GpuNode:
        engine = fake.engine(name)
        rc = engine.initialize(f"{name}-host", "P2PHANDSHAKE", "rdma",
                               ",".join(n for n, _ in opts.nics))
        if rc != 0:
            raise RuntimeError(f"the fake engine's initialize on {name} returned {rc}")
        return GpuNode(name, cuda, layout, engine)
    return build_nodes(sc, opts, fake, node, real=sc.memory == "real")


class GpuRdmaWorld(NodeWorld[GpuNode, GrRecord]):
    """One gpu_rdma run over the engines: the two nodes, the options and the record."""

    real = False      # the pool's memory is "real": transfers move bytes (build_world)

    def isolation(self) -> AbstractContextManager[Any]:
        """``mooncake.engine`` and pyverbs as the prefill node sees them."""
        stack = ExitStack()
        stack.enter_context(self.fake.patch(NODES[0]))
        stack.enter_context(self.fake.fabric.patch(NODES[0]))
        return stack

    def registrar(self, node: GpuNode) -> TransferEngine:
        return node.engine

    def after_register(self, node: GpuNode, run: NodeRun) -> None:
        """The engine's region map and its published buffers, with the NICs of each."""
        st = node.engine.state
        if st is None:
            return
        run.regions = dict(st.core.regions)
        run.published = [Published(b.addr, b.length, frozenset(m.nic.name for m in b.mrs)
                                   if b.transport == "rdma" else frozenset(run.nics))
                         for b in st.segment.buffers]

    def live_end(self, node: GpuNode) -> list[tuple[int, int]]:
        st = node.engine.state
        return sorted(st.core.regions.items()) if st else []

    def transfer(self) -> None:
        self.pause()
        if not self.opts.transfers:
            return
        src, dst = self.nodes
        pairs = self.pairs()
        real = self.real
        if real:
            fill_sources(src.engine, dst.engine, pairs)
        failures, moved, total = write_pages(src.engine, dst.engine, pairs,
                                             lambda: next_seq(self.fake))
        if real:
            compare_pages(src.engine, dst.engine, pairs, {f.buffer for f in failures})
        self.written(failures, moved, total)

    def judge(self) -> list[Violation]:
        return self.judged(check_gpu_rdma_run(self.record))

    def warnings(self) -> list[Violation]:
        return gpu_rdma_warnings(self.record)


def build_world(sc: Scenario, impl: Implementation, backend: Any) -> TracedWorld:
    """The world of one run (the engine's, or NIXL's for ``transport = "nixl"``); raises
    SkipScenario or CannotRun."""
    if not styles.registers_gpu_buffers(impl):
        raise SkipScenario(f"the {impl.style} style registers host buffers; gpu_rdma "
                           "scenarios need --style mooncake_engine or nixl")
    opts = GpuRdmaOptions.parse(sc.options)
    why_not = styles.transport_skip_reason(impl, opts.transport) or \
        impl.contract.scenario_skip_reason(sc.expect, sc.contract)
    if why_not:
        raise SkipScenario(why_not)
    fake = deployment(opts)
    if opts.pause_resume:
        from kvreg.harness.run.implementation import ImplementationError
        try:                 # a hook that cannot take its arguments: said before the run
            hooks(impl, opts.transport)
        except ImplementationError as exc:
            raise CannotRun(str(exc)) from None
    try:
        if opts.transport == "nixl":
            from .nixl_world import build_nixl_world
            return build_nixl_world(sc, impl, opts, fake)
        nodes = _build_nodes(sc, opts, fake)
    except LayoutError as exc:
        raise CannotRun(str(exc)) from exc
    budget = arm_faults(sc, fake, "mooncake.engine.*", "engine")
    record = GrRecord(sc.expect, [NodeRun(n.name, n.layout.buffers.entries,
                                          tuple(name for name, _ in opts.nics))
                                  for n in nodes], exercised=sc.exercise,
                      repeatable=impl.contract.repeatable)
    world = GpuRdmaWorld(opts, fake, nodes, record, budget)
    world.real = sc.memory == "real"
    return world
