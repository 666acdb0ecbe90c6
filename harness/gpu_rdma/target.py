"""The ``gpu_rdma`` target: GPU KV caches and host aux buffers registered with Mooncake's
Transfer Engine on a prefill and a decode node, written across, judged by its checks; its
registry entry (harness/run/targets.py). Options: options.py; the world: world.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack
from typing import TYPE_CHECKING, Any

from kvreg.fakes.nixl import FakeNixl

from . import options, styles, world
from .options import GpuRdmaOptions

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.run.target import ProcessConfig
    from kvreg.harness.run.world import TracedWorld
    from kvreg.harness.scenario.format import Scenario

__all__ = ["TARGET", "GpuRdmaTarget"]


class GpuRdmaTarget:
    """GPU KV buffers registered with a Mooncake Transfer Engine or a NIXL agent, judged by
    the target's checks."""

    name = "gpu_rdma"
    steps = ("register", "transfers", "teardown")
    watched_env: tuple[str, ...] = ()
    # an H200, one mlx5 NIC, the engine of v0.3.13
    default_machine: tuple[Any, ...] = ("h200-r580", (("mlx5_0", "mlx5"),), "v0.3.13")
    title = "GPU RDMA"
    style_calls = styles.STYLE_CALLS
    style_contracts = styles.STYLE_CONTRACTS
    options_table: str | None = "gpu_rdma"
    takes_base_offset = False

    def validate_options(self, options_: Mapping[str, Any]) -> list[str]:
        return options.validate_options(options_)

    def process_config(self, sc: Scenario) -> ProcessConfig:
        return options.process_config(sc)

    def import_scope(self, config: ProcessConfig) -> AbstractContextManager[Any]:
        """``mooncake.engine``, pyverbs and ``nixl._api`` of the prefill node of ``config``'s
        machine (an implementation of either transport imports under it)."""
        gpu, nics, engine = config.machine
        fake = world.deployment(GpuRdmaOptions(gpu=gpu, nics=nics, engine=engine))
        stack = ExitStack()
        stack.enter_context(fake.patch(options.NODES[0]))
        stack.enter_context(fake.fabric.patch(options.NODES[0]))
        stack.enter_context(FakeNixl(fabric=fake.fabric, node=options.NODES[0]).patch())
        return stack

    def build(self, sc: Scenario, impl: Implementation, backend: Any) -> TracedWorld:
        return world.build_world(sc, impl, backend)


TARGET = GpuRdmaTarget()
