"""The ``gpu_rdma`` target's world: a prefill and a decode node on the fake fabric, each
with a fake GPU (its own :class:`FakeCuda`, attached to the node so its NICs pin device memory
through nvidia-peermem's rules, docs/cuda-runtime.md §14.4), the scenario's NICs, the KV pool
laid out as the engines allocate it (layout.py) and an initialized fake Transfer Engine
(rdma, every NIC; docs/mooncake-verbs.md §8). The scenario's faults are armed after the
engines are initialized, so ``nth`` counts the implementation's calls. Register runs the
implementation on prefill, then decode; transfers write the deciding pages of each buffer
from prefill into decode; each teardown round gives each node's handle back to the
implementation, decode first. While a node's code runs, ``cuda.bindings`` reaches that node's
GPU (code that asks ``cuMemGetAddressRange`` finds its allocations).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake import FakeMooncake
from kvreg.fakes.mooncake.engine import TransferEngine
from kvreg.harness.run.budget import CallBudget
from kvreg.harness.run.implementation import ImplementationError
from kvreg.harness.run.result import Violation
from kvreg.harness.run.target import CannotRun, SkipScenario
from kvreg.harness.run.world import TracedWorld, next_seq

from . import styles
from .checks import GrRecord, NodeRun, Published, check_gpu_rdma_run, gpu_rdma_warnings
from .data import compare_pages, fill_sources
from .layout import KvLayout, LayoutError, allocate, ready
from .memory_saver import HookError, hooks, pause_resume, with_hook_errors
from .options import NODES, GpuRdmaOptions
from .transfers import write_pages

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["EDGES", "GpuNode", "GpuRdmaWorld", "build_world", "deployment"]

# how the transfers step covers the pages (the report's ``copy.method``, selection.py)
EDGES = "buffer ends and registration edges"


@dataclass
class GpuNode:
    """One node: its GPU, its engine and its buffers."""

    name: str
    cuda: FakeCuda
    engine: TransferEngine
    layout: KvLayout


def deployment(opts: GpuRdmaOptions) -> FakeMooncake:
    """The fabric of ``opts``: both nodes with the scenario's NICs, no engine yet."""
    fake = FakeMooncake(opts.engine_profile(), node=NODES[0], devices=dict(opts.nics), env={})
    fake.fabric.add_node(NODES[1])
    for name, prof in opts.nics:
        fake.fabric.add_device(name, prof, node=NODES[1])
    return fake


def _build_nodes(sc: Scenario, opts: GpuRdmaOptions, fake: FakeMooncake) -> list[GpuNode]:
    geometry = sc.geometry()
    nodes = []
    for name in NODES:
        cuda = FakeCuda(opts.device_profile())
        drv = ready(cuda)
        host = fake.node(name)
        host.attach_gpu(cuda.gpu_memory())
        layout = allocate(drv, host, geometry, opts, real=sc.memory == "real")
        engine = fake.engine(name)
        rc = engine.initialize(f"{name}-host", "P2PHANDSHAKE", "rdma",
                               ",".join(n for n, _ in opts.nics))
        if rc != 0:
            raise RuntimeError(f"the fake engine's initialize on {name} returned {rc}")
        nodes.append(GpuNode(name, cuda, engine, layout))
    return nodes


class GpuRdmaWorld(TracedWorld):
    """One gpu_rdma run: the two nodes, the options and the record."""

    fake: FakeMooncake
    record: GrRecord

    def __init__(self, opts: GpuRdmaOptions, fake: FakeMooncake, nodes: list[GpuNode],
                 record: GrRecord, budget: CallBudget) -> None:
        super().__init__(fake, record, budget)
        self.opts = opts
        self.nodes = nodes
        self.real = False      # the pool's memory is "real": transfers move bytes
        self.impl: Implementation | None = None
        # the implementation's release / resume hooks that raised (pause_resume)
        self.hook_errors: list[HookError] = []

    def isolation(self) -> AbstractContextManager[Any]:
        """``mooncake.engine`` and pyverbs as the prefill node sees them."""
        stack = ExitStack()
        stack.enter_context(self.fake.patch(NODES[0]))
        stack.enter_context(self.fake.fabric.patch(NODES[0]))
        return stack

    def _state(self, gn: GpuNode, run: NodeRun) -> None:
        st = gn.engine.state
        if st is None:
            return
        run.regions = dict(st.core.regions)
        run.published = [Published(b.addr, b.length, frozenset(m.nic.name for m in b.mrs)
                                   if b.transport == "rdma" else frozenset(run.nics))
                         for b in st.segment.buffers]

    def register(self, impl: Implementation) -> bool:
        """Each node's buffers through the implementation; stop at the first error."""
        self.impl = impl
        for gn, run in zip(self.nodes, self.record.nodes, strict=True):
            self.progress.step("register", f"{gn.name}: {len(run.entries)} buffers")
            run.seq_start = next_seq(self.fake)
            with gn.cuda.patch(torch=False):
                handle, error = self.attempt(partial(styles.register_buffers, impl,
                                                     gn.engine, gn.layout.buffers))
            run.seq_end = next_seq(self.fake)
            self._state(gn, run)
            if error is not None:
                run.error = error
                return False
            run.handle, run.registered = handle, True
        return True

    def transfer(self) -> None:
        if self.opts.pause_resume and self.impl is not None:
            self.hook_errors = pause_resume(self, self.impl, lambda: next_seq(self.fake),
                                            lambda node: node.engine)
        if not self.opts.transfers:
            return
        src, dst = self.nodes
        pairs = [(a, b, item) for a, b, item in zip(
            src.layout.buffers.entries, dst.layout.buffers.entries, _items(src.layout),
            strict=True)]
        real = self.real
        if real:
            fill_sources(src.engine, dst.engine, pairs)
        failures, moved, total = write_pages(src.engine, dst.engine, pairs,
                                             lambda: next_seq(self.fake))
        if real:
            compare_pages(src.engine, dst.engine, pairs, {f.buffer for f in failures})
        self.record.transfer_failures = failures
        self.coverage = {"pages_copied": moved, "pages_total": total, "method": EDGES}

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        for gn, run in reversed(list(zip(self.nodes, self.record.nodes, strict=True))):
            if not run.registered:
                continue
            self.progress.step(f"teardown round {round_ + 1}", gn.name)
            with gn.cuda.patch(torch=False):
                _, error = self.attempt(partial(styles.teardown_buffers, impl, gn.engine,
                                                run.handle))
            if error is not None:
                self.record.teardown_errors.append((round_, gn.name, error))

    def finish(self) -> None:
        fake = self.fake
        fake.trace.observer = None
        self.record.trace = list(fake.trace)
        for gn in self.nodes:
            st = gn.engine.state
            self.record.live_end[gn.name] = sorted(st.core.regions.items()) if st else []
        fake.faults.clear()
        fake.close_all()

    def judge(self) -> list[Violation]:
        return with_hook_errors(check_gpu_rdma_run(self.record), self.hook_errors,
                                self.record.expect)

    def warnings(self) -> list[Violation]:
        return gpu_rdma_warnings(self.record)


def _items(layout: KvLayout) -> list[int]:
    b = layout.buffers
    return [*b.kv_item_lens, *b.aux_item_lens, *b.state_item_lens]


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
    if opts.transport == "nixl":
        from .nixl_world import build_nixl_world
        try:
            return build_nixl_world(sc, impl, opts, fake)
        except LayoutError as exc:
            raise CannotRun(str(exc)) from exc
    if opts.pause_resume:
        try:                 # a hook that cannot take its arguments: said before the run
            hooks(impl)
        except ImplementationError as exc:
            raise CannotRun(str(exc)) from None
    try:
        nodes = _build_nodes(sc, opts, fake)
    except LayoutError as exc:
        raise CannotRun(str(exc)) from exc
    for spec in sc.faults:
        fake.faults.arm_from_dict(spec)
    budget = CallBudget(fake.faults, "mooncake.engine.*", sc.call_budget, "engine")
    record = GrRecord(sc.expect, [NodeRun(n.name, n.layout.buffers.entries,
                                          tuple(name for name, _ in opts.nics))
                                  for n in nodes], exercised=sc.exercise,
                      repeatable=impl.contract.repeatable)
    world = GpuRdmaWorld(opts, fake, nodes, record, budget)
    world.real = sc.memory == "real"
    return world
