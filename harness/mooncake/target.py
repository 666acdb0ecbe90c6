"""The ``mooncake`` target: register_buffer of a host pool in a Mooncake Store on the fake
RDMA fabric, judged by its checks; its registry entry (harness/run/targets.py). Options and
process environment: options.py; the deployment and the world: world.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack
from typing import TYPE_CHECKING, Any

from . import options, styles, world
from .options import ENV_MR, MooncakeOptions
from .reference import effective_mr_limit

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.run.target import ProcessConfig
    from kvreg.harness.scenario.format import Scenario

__all__ = ["TARGET", "MooncakeTarget"]


class MooncakeTarget:
    """register_buffer of a host pool in a Mooncake Store, judged by its checks."""

    name = "mooncake"
    steps = ("register", "transfers", "teardown")
    watched_env = (ENV_MR,)
    # the released store, one mlx5 NIC, no device MR cap, no protection-domain split
    default_machine: tuple[Any, ...] = ("released", (("mlx5_0", "mlx5"),), None, False)
    title = "Mooncake"
    style_calls = styles.STYLE_CALLS
    style_contracts = styles.STYLE_CONTRACTS
    # the MR limit the store computes (``kvreg plan --mc-max-mr-size`` plans against it)
    effective_mr_limit = staticmethod(effective_mr_limit)
    options_table: str | None = "mooncake"
    takes_base_offset = False

    def validate_options(self, options_: Mapping[str, Any]) -> list[str]:
        return options.validate_options(options_)

    def process_config(self, sc: Scenario) -> ProcessConfig:
        return options.process_config(sc)

    def import_scope(self, config: ProcessConfig) -> AbstractContextManager[Any]:
        """The store module and pyverbs of the first node of ``config``'s deployment."""
        profile, devices, device_max, pd = config.machine
        opts = MooncakeOptions(profile=profile, devices=devices, device_max_mr_size=device_max,
                               pd=pd)
        fake = world.deployment(opts, {k: v for k, v in config.env if v is not None})
        stack = ExitStack()
        stack.enter_context(fake.patch(opts.nodes[0]))
        stack.enter_context(fake.fabric.patch(opts.nodes[0]))
        return stack

    def build(self, sc: Scenario, impl: Implementation, backend: Any) -> world.MooncakeWorld:
        return world.build_world(sc, impl, backend)


TARGET = MooncakeTarget()
