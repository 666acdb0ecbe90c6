"""Two nodes of a prefill/decode pair for real KV-transfer registration code (issue 28).

Each node has one mlx5 NIC and a fake GPU attached to it (docs/mooncake-verbs.md §5.4-5.5):
the GPU KV caches are ``cudaMalloc`` blocks of that node's fake driver (no byte of memory
behind them, docs/cuda-runtime.md §14), so the NIC registers them under nvidia-peermem's
rules, and host buffers (aux) are reserved process memory. The engines are the fake
``mooncake.engine.TransferEngine`` (§8), patched in so that code importing it gets the fake.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake import ENGINE_BEFORE_V0_3_12, FakeMooncake, get_store_profile

HOST = "127.0.0.1"
NODES = ("prefill", "decode")


def engine_profile(version: str) -> Any:
    """``"v0.3.13"`` (the wheel the mooncake-real tier checks) or ``"v0.3.11"`` (the engine
    before #2854, #2869 and #2965, docs/mooncake-verbs.md §8.3)."""
    profile = get_store_profile("v0.3.13")
    if version == "v0.3.11":
        return profile.replace(**ENGINE_BEFORE_V0_3_12)
    if version != "v0.3.13":
        raise ValueError(f"unknown engine version {version!r}; known: v0.3.13, v0.3.11")
    return profile


@dataclass
class Node:
    """One node: its fake GPU and its host memory on the Mooncake fabric."""

    name: str
    cuda: FakeCuda
    fake: FakeMooncake
    blocks: list[int] = field(default_factory=list)

    def gpu_block(self, nbytes: int, device: int = 0) -> int:
        """A ``cudaMalloc`` block of ``nbytes`` on ``device`` (its base)."""
        base = self.cuda.driver.device_alloc(nbytes, device).base
        self.blocks.append(base)
        return int(base)

    def host_buffer(self, nbytes: int, name: str = "aux") -> int:
        """Reserved host memory on this node (no RAM until touched)."""
        return int(self.fake.virtual(nbytes, name=name, node=self.name).data_ptr())


class Pair:
    """A prefill and a decode node on one fabric; ``gpu`` names each node's device profile
    (``h200-r580``; ``no-peermem`` makes every GPU MR fail with EFAULT, §14.4)."""

    def __init__(self, version: str = "v0.3.13", gpu: str = "h200-r580") -> None:
        self.fake = FakeMooncake(engine_profile(version), node=NODES[0], env={})
        self.fake.fabric.add_node(NODES[1])
        self.fake.fabric.add_device("mlx5_1", "mlx5", node=NODES[1])
        self.nodes: dict[str, Node] = {}
        for name in NODES:
            cuda = FakeCuda(gpu)
            self.fake.node(name).attach_gpu(cuda.gpu_memory())
            self.nodes[name] = Node(name, cuda, self.fake)

    @property
    def prefill(self) -> Node:
        return self.nodes[NODES[0]]

    @property
    def decode(self) -> Node:
        return self.nodes[NODES[1]]

    @contextmanager
    def on(self, node: str) -> Iterator[FakeMooncake]:
        """``from mooncake.engine import TransferEngine`` builds engines of ``node``."""
        with self.fake.patch(node) as fake:
            yield fake

    def engine(self, node: str) -> Any:
        """An initialized fake engine of ``node`` (RDMA over its NIC)."""
        engine = self.fake.engine(node)
        assert engine.initialize(HOST, "P2PHANDSHAKE", "rdma", "") == 0
        return engine

    def registered(self, engine: Any) -> list[tuple[int, int]]:
        return [tuple(r) for r in engine.registered_buffers()]

    def gpu_mrs(self, node: str) -> list[tuple[int, int]]:
        """(addr, length) of every live MR of ``node``'s NICs."""
        return sorted((m.addr, m.length) for m in self.fake.fabric.live_mrs()
                      if m.node == node)

    def close(self) -> None:
        self.fake.close_all()


def segment_of(engine: Any) -> str:
    """The P2P-handshake segment name of an initialized engine (``host:rpc_port``)."""
    return f"{HOST}:{engine.get_rpc_port()}"


def spans(ptrs: Sequence[int], lens: Sequence[int]) -> list[tuple[int, int]]:
    return sorted(zip(ptrs, lens, strict=True))
