"""The ``cuda`` target: cudaHostRegister of a host pool through the cudart faces of a fake
(or real) runtime, judged by :func:`.checks.check_run`; its registry entry
(harness/run/targets.py). Options and process environment: options.py; the world: world.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.harness.ranks import checks as _rank_checks  # noqa: F401  (its rules: the cuda target's)

from . import options, styles, world
from .options import ENV_CHUNK_GB

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.run.target import ProcessConfig, RankPlace
    from kvreg.harness.scenario.format import Scenario

__all__ = ["TARGET", "CudaTarget"]


class CudaTarget:
    """cudaHostRegister of a host pool, judged by :func:`.checks.check_run`."""

    name = "cuda"
    steps = ("register", "fill", "transfers", "teardown", "teardown-after-failure")
    watched_env = (ENV_CHUNK_GB,)
    default_machine: tuple[Any, ...] = ("h200-r580",)
    title = "CUDA"
    style_calls = styles.STYLE_CALLS
    style_contracts = styles.STYLE_CONTRACTS
    options_table: str | None = None
    takes_base_offset = True

    def process_config(self, sc: Scenario) -> ProcessConfig:
        return options.process_config(sc)

    def import_scope(self, config: ProcessConfig) -> AbstractContextManager[Any]:
        return FakeCuda(options.machine_profile(config)).patch()

    def validate_options(self, options_: Mapping[str, Any]) -> list[str]:
        return options.validate_options(options_)

    def build(self, sc: Scenario, impl: Implementation, backend: Any) -> world.CudaWorld:
        return world.build_world(sc, impl, backend)

    def build_rank(self, sc: Scenario, impl: Implementation, backend: Any,
                   place: RankPlace) -> world.CudaWorld:
        """One rank's world of a many-rank scenario (ranked.py)."""
        from . import ranked

        return ranked.build_rank(sc, impl, backend, place)


TARGET = CudaTarget()
