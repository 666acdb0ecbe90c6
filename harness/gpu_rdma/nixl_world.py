"""The ``gpu_rdma`` world over NIXL (``transport = "nixl"``): the same two nodes, GPUs and KV
layout as the engine's world (node_world.py), each node with a NIXL agent instead of an engine
(``nixl._api.nixl_agent`` named for the node, the UCX backend, its node's GPU memory behind
VRAM registrations: fakes/nixl/, docs/gpu-rdma.md §6). Register gives each agent and its
node's KvBuffers to the implementation, prefill first; transfers exchange metadata and write
the deciding pages prefill -> decode (nixl_transfers.py); teardown gives each handle back,
decode first.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake import FakeMooncake
from kvreg.fakes.nixl import FakeNixl
from kvreg.harness.run.result import Violation
from kvreg.harness.run.world import next_seq

from .layout import KvLayout
from .nixl_checks import NixlNodeRun, NxRecord, check_nixl_run, nixl_warnings
from .nixl_transfers import exchange_metadata, write_pages
from .node_world import BaseNode, NodeWorld, arm_faults, build_nodes
from .options import GpuRdmaOptions

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["NixlNode", "NixlWorld", "build_nixl_world"]


@dataclass
class NixlNode(BaseNode):
    """One node: its GPU, its buffers, and its NIXL fake and agent."""

    nixl: FakeNixl
    agent: Any


def _build_nodes(sc: Scenario, opts: GpuRdmaOptions, fake: FakeMooncake) -> list[NixlNode]:
    def node(name: str, cuda: FakeCuda, layout: KvLayout, before: list[NixlNode]) -> NixlNode:
        nixl = FakeNixl(fabric=fake.fabric, node=name, gpu=cuda.gpu_memory(),
                        peers=before[0].nixl if before else None)
        return NixlNode(name, cuda, layout, nixl, nixl.agent(name))
    return build_nodes(sc, opts, fake, node)


class NixlWorld(NodeWorld[NixlNode, NxRecord]):
    """One gpu_rdma run over NIXL."""

    def isolation(self) -> AbstractContextManager[Any]:
        """``nixl._api`` as the prefill node sees it."""
        return self.nodes[0].nixl.patch()

    def registrar(self, node: NixlNode) -> Any:
        return node.agent

    def after_register(self, node: NixlNode, run: NixlNodeRun) -> None:
        run.regs = _regs(node)

    def live_end(self, node: NixlNode) -> list[tuple[str, int, int, int]]:
        return sorted((mem, a, n, d) for mem, rs in _regs(node).items() for a, n, d in rs)

    def transfer(self) -> None:
        self.pause()
        if not self.opts.transfers:
            return
        src, dst = self.nodes
        failed = exchange_metadata([src.agent, dst.agent], lambda: next_seq(self.fake))
        self.record.metadata_failures = failed
        if failed:     # nothing can be prepared towards a peer whose metadata is not loaded
            return
        failures, moved, total = write_pages(src.agent, dst.agent, self.pairs(),
                                             lambda: next_seq(self.fake))
        self.written(failures, moved, total)

    def judge(self) -> list[Violation]:
        return self.judged(check_nixl_run(self.record))

    def warnings(self) -> list[Violation]:
        return nixl_warnings(self.record)


def _regs(node: NixlNode) -> dict[str, list[tuple[int, int, int]]]:
    """The agent's registrations now, by memory kind (VRAM, DRAM)."""
    inner = node.agent.agent
    return {"DRAM": inner.ranges(0), "VRAM": inner.ranges(1)}


def build_nixl_world(sc: Scenario, impl: Implementation, opts: GpuRdmaOptions,
                     fake: FakeMooncake) -> NixlWorld:
    """The NIXL world of one run (``fake``: the deployment, its fabric and nodes)."""
    nodes = _build_nodes(sc, opts, fake)
    budget = arm_faults(sc, fake, "nixl.*", "agent")
    record = NxRecord(sc.expect, [NixlNodeRun(n.name, n.layout.buffers.entries)
                                  for n in nodes], exercised=sc.exercise,
                      repeatable=impl.contract.repeatable)
    return NixlWorld(opts, fake, nodes, record, budget)
