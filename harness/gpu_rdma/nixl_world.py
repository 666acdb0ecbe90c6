"""The ``gpu_rdma`` world over NIXL (``transport = "nixl"``): the same two nodes, GPUs and KV
layout as the engine's world (world.py), each node with a NIXL agent instead of an engine
(``nixl._api.nixl_agent`` named for the node, the UCX backend, its node's GPU memory behind
VRAM registrations: fakes/nixl/, docs/gpu-rdma.md §6). Register gives each agent and its
node's KvBuffers to the implementation, prefill first; transfers exchange metadata and write
the deciding pages prefill -> decode (nixl_transfers.py); teardown gives each handle back,
decode first.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake import FakeMooncake
from kvreg.fakes.nixl import FakeNixl
from kvreg.harness.run.budget import CallBudget
from kvreg.harness.run.implementation import ImplementationError
from kvreg.harness.run.result import Violation
from kvreg.harness.run.target import CannotRun
from kvreg.harness.run.world import TracedWorld, next_seq

from . import styles
from .layout import KvLayout, allocate, ready
from .memory_saver import HookError, hooks, pause_resume, with_hook_errors
from .nixl_checks import NixlNodeRun, NxRecord, check_nixl_run, nixl_warnings
from .nixl_transfers import exchange_metadata, write_pages
from .options import NODES, GpuRdmaOptions

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["NixlNode", "NixlWorld", "build_nixl_world"]


@dataclass
class NixlNode:
    """One node: its GPU, its NIXL fake and agent, and its buffers."""

    name: str
    cuda: FakeCuda
    nixl: FakeNixl
    agent: Any
    layout: KvLayout


def _build_nodes(sc: Scenario, opts: GpuRdmaOptions, fake: FakeMooncake) -> list[NixlNode]:
    geometry = sc.geometry()
    nodes: list[NixlNode] = []
    for name in NODES:
        cuda = FakeCuda(opts.device_profile())
        drv = ready(cuda)
        host = fake.node(name)
        host.attach_gpu(cuda.gpu_memory())
        layout = allocate(drv, host, geometry, opts)
        nixl = FakeNixl(fabric=fake.fabric, node=name, gpu=cuda.gpu_memory(),
                        peers=nodes[0].nixl if nodes else None)
        nodes.append(NixlNode(name, cuda, nixl, nixl.agent(name), layout))
    return nodes


class NixlWorld(TracedWorld):
    """One gpu_rdma run over NIXL."""

    fake: FakeMooncake
    record: NxRecord

    def __init__(self, opts: GpuRdmaOptions, fake: FakeMooncake, nodes: list[NixlNode],
                 record: NxRecord, budget: CallBudget) -> None:
        super().__init__(fake, record, budget)
        self.opts = opts
        self.nodes = nodes
        self.impl: Implementation | None = None
        # the implementation's release / resume hooks that raised (pause_resume)
        self.hook_errors: list[HookError] = []

    def isolation(self) -> AbstractContextManager[Any]:
        """``nixl._api`` as the prefill node sees it."""
        return self.nodes[0].nixl.patch()

    def register(self, impl: Implementation) -> bool:
        self.impl = impl
        for nn, run in zip(self.nodes, self.record.nodes, strict=True):
            self.progress.step("register", f"{nn.name}: {len(run.entries)} buffers")
            run.seq_start = next_seq(self.fake)
            with nn.cuda.patch(torch=False):
                handle, error = self.attempt(partial(styles.register_buffers, impl,
                                                     nn.agent, nn.layout.buffers))
            run.seq_end = next_seq(self.fake)
            run.regs = _regs(nn)
            if error is not None:
                run.error = error
                return False
            run.handle, run.registered = handle, True
        return True

    def transfer(self) -> None:
        if self.opts.pause_resume and self.impl is not None:
            self.hook_errors = pause_resume(self, self.impl, lambda: next_seq(self.fake),
                                            lambda node: node.agent)
        if not self.opts.transfers:
            return
        src, dst = self.nodes
        failed = exchange_metadata([src.agent, dst.agent], lambda: next_seq(self.fake))
        self.record.metadata_failures = failed
        b = src.layout.buffers
        items = [*b.kv_item_lens, *b.aux_item_lens, *b.state_item_lens]
        pairs = list(zip(b.entries, dst.layout.buffers.entries, items, strict=True))
        if failed:     # nothing can be prepared towards a peer whose metadata is not loaded
            return
        failures, moved, total = write_pages(src.agent, dst.agent, pairs,
                                             lambda: next_seq(self.fake))
        self.record.transfer_failures = failures
        self.coverage = {"pages_copied": moved, "pages_total": total,
                         "method": "buffer ends and registration edges"}

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        for nn, run in reversed(list(zip(self.nodes, self.record.nodes, strict=True))):
            if not run.registered:
                continue
            self.progress.step(f"teardown round {round_ + 1}", nn.name)
            with nn.cuda.patch(torch=False):
                _, error = self.attempt(partial(styles.teardown_buffers, impl, nn.agent,
                                                run.handle))
            if error is not None:
                self.record.teardown_errors.append((round_, nn.name, error))

    def finish(self) -> None:
        fake = self.fake
        fake.trace.observer = None
        self.record.trace = list(fake.trace)
        for nn in self.nodes:
            self.record.live_end[nn.name] = sorted(
                (mem, a, n, d) for mem, rs in _regs(nn).items() for a, n, d in rs)
        fake.faults.clear()
        fake.close_all()

    def judge(self) -> list[Violation]:
        return with_hook_errors(check_nixl_run(self.record), self.hook_errors, self.record.expect)

    def warnings(self) -> list[Violation]:
        return nixl_warnings(self.record)


def _regs(nn: NixlNode) -> dict[str, list[tuple[int, int, int]]]:
    """The agent's registrations now, by memory kind (VRAM, DRAM)."""
    inner = nn.agent.agent
    return {"DRAM": inner.ranges(0), "VRAM": inner.ranges(1)}


def build_nixl_world(sc: Scenario, impl: Implementation, opts: GpuRdmaOptions,
                     fake: FakeMooncake) -> NixlWorld:
    """The NIXL world of one run (``fake``: the deployment, its fabric and nodes)."""
    if opts.pause_resume:
        try:                 # a hook that cannot take its arguments: said before the run
            hooks(impl, "nixl")
        except ImplementationError as exc:
            raise CannotRun(str(exc)) from None
    nodes = _build_nodes(sc, opts, fake)
    for spec in sc.faults:
        fake.faults.arm_from_dict(spec)
    budget = CallBudget(fake.faults, "nixl.*", sc.call_budget, "agent")
    record = NxRecord(sc.expect, [NixlNodeRun(n.name, n.layout.buffers.entries)
                                  for n in nodes], exercised=sc.exercise,
                      repeatable=impl.contract.repeatable)
    return NixlWorld(opts, fake, nodes, record, budget)
