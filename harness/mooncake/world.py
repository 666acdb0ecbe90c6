"""The ``mooncake`` target's world: MR registration through a store on the fake RDMA fabric.

The world mirrors the CUDA target's (harness/cuda/world.py): a fresh :class:`FakeMooncake` with the
scenario's profile, NICs and ``MC_MAX_MR_SIZE``; the pool's buffers (virtual, or real bytes
for data scenarios); the scenario's faults (``mooncake.*``, ``verbs.*``), armed after the
store's setup so ``nth`` counts the implementation's calls; every buffer registered through
the implementation with the effective MR limit and the object stride; the pages that decide
(every page of a small pool; selection.py says which of a large one, at the cost of its MR
edges) put and read back (and, with ``pd``, written by RDMA from a prefill node into a decode
node), reported as the result's ``copy``; then teardown as often as the scenario says. The
implementation's ``teardown`` gets the same ranges each round, so it must forget what it
released (the reference keeps only failures); the rounds after the first run only where it
declares a repeatable teardown (harness/run/contract.py) or the round is the store's close().
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from kvreg.fakes.mooncake import FakeMooncake
from kvreg.harness.pools import GeometryError, PoolGeometry
from kvreg.harness.pools.buffers import release
from kvreg.harness.run.budget import CallBudget
from kvreg.harness.run.endstate import summarize_exception
from kvreg.harness.run.isolation import env_var
from kvreg.harness.run.result import Violation
from kvreg.harness.run.target import CannotRun, SkipScenario
from kvreg.harness.run.world import TracedWorld, next_seq

from . import styles
from .checks import McBuffer, McRecord, check_mooncake_run, mooncake_warnings
from .options import ENV_MR, MooncakeOptions, process_env
from .pd import pd_transfer
from .reference import effective_mr_limit
from .selection import family_object_stride, select_pages
from .transfers import (
    IoPlanError,
    PoolBuffer,
    allocate_pool,
    mr_ranges,
    plan_io,
    store_round_trip,
)

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["MASTER", "Deployment", "MooncakeWorld", "build_world", "deployment"]

MASTER = "kvreg-master:50051"


@dataclass
class Deployment:
    """The deployment of one run."""

    fake: FakeMooncake
    geometry: PoolGeometry
    stores: dict[str, Any]
    pools: dict[str, list[PoolBuffer]]
    limit: int
    runs: list[McBuffer] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)   # MC_MAX_MR_SIZE as the store saw it


def deployment(opts: MooncakeOptions, env: dict[str, str]) -> FakeMooncake:
    """The fake deployment of ``opts``: its nodes and their NICs, no store set up."""
    nodes = opts.nodes
    fake = FakeMooncake(opts.profile, node=nodes[0], devices=dict(opts.devices), env=env)
    for extra in nodes[1:]:
        fake.fabric.add_node(extra)
        for name, prof in opts.devices:
            fake.fabric.add_device(name, prof, node=extra)
    if opts.device_max_mr_size is not None:
        for node in nodes:
            for name, _ in opts.devices:
                fake.fabric.add_device(name, node=node, max_mr_size=opts.device_max_mr_size)
    # the stores mount no global segment (setup's 0): the deployment's other nodes hold
    # the objects (without them a real put fails with NO_AVAILABLE_HANDLE, §7)
    fake.cluster(MASTER).external_segments = True
    return fake


def _build(sc: Scenario, opts: MooncakeOptions, mirror: Any = None) -> Deployment:
    """Fabric, stores set up on every node, the pool's buffers; no fault armed yet.

    ``mirror`` (kvreg.realhw.mooncake_mirror.MooncakeMirror) pairs every store with a real
    one: the implementation's calls go to both (the real-store tier)."""
    geometry = sc.geometry()
    env = process_env(opts)
    nodes = opts.nodes
    fake = deployment(opts, env)
    stores = {}
    for node in nodes:
        store = fake.store(node)
        rc = store.setup(f"{node}-host", "P2PHANDSHAKE", 0, 0, opts.protocol, "", MASTER)
        if rc != 0:
            raise RuntimeError(f"the fake store's setup on {node} returned {rc}")
        stores[node] = store if mirror is None else mirror.wrap_store(node, store, fake)
    client = stores[nodes[0]].client
    assert client is not None
    limit = int(client.max_mr_size)
    nics = fake.node(nodes[0]).nics.values()
    ours = effective_mr_limit(opts.mc_max_mr_size, [int(n.attr["max_mr_size"]) for n in nics],
                              protocol=opts.protocol, fastdeploy_clamp=opts.fastdeploy_clamp)
    if ours != limit:
        raise RuntimeError(f"kvreg's effective_mr_limit gives {ours} but the fake store "
                           f"uses {limit}")
    real = sc.memory == "real"
    pools = {n: allocate_pool(fake, n, geometry, real=real, label_node=opts.pd) for n in nodes}
    return Deployment(fake, geometry, stores, pools, limit, env=env)


def _exercise(run: Deployment, sc: Scenario, opts: MooncakeOptions,
              record: McRecord) -> dict[str, object]:
    """The pages that decide through the store, and the PD writes; the first failure of
    each. Returns how the pages were covered (the result's ``copy``)."""
    nodes = opts.nodes
    real = sc.memory == "real"
    pools = [run.pools[n] for n in nodes]
    ranges = [mr_ranges(run.fake, n) for n in nodes]     # once: a pool may have many MRs
    selection = select_pages(run.geometry, pools, ranges, real=real)
    pages = selection.pages
    batches = plan_io(run.geometry, pages, io=opts.io, merged=opts.merged)
    _, failure = store_round_trip(run.fake, run.stores[nodes[0]], nodes[0], run.geometry,
                                  run.pools[nodes[0]], batches, ranges[0])
    if failure is not None:
        record.io_failures.append(failure)
    if opts.pd:   # nodes are (decode, prefill)
        _, failure = pd_transfer(run.fake, run.geometry, run.pools["prefill"],
                                 run.pools["decode"], pages, (ranges[1], ranges[0]))
        if failure is not None:
            record.io_failures.append(failure)
    return selection.as_dict()


class MooncakeWorld(TracedWorld):
    """One Mooncake run: the deployment, its options and the record."""

    fake: FakeMooncake
    record: McRecord

    def __init__(self, sc: Scenario, opts: MooncakeOptions, run: Deployment, record: McRecord,
                 budget: CallBudget) -> None:
        super().__init__(run.fake, record, budget)
        self.sc = sc
        self.opts = opts
        self.run = run

    @property
    def teardown_repeatable(self) -> bool:
        """``teardown = "close"``: each round is the store's own close(), which a closed
        store answers with 0 (docs/mooncake-verbs.md §7.1), so every round runs whatever
        the implementation declares."""
        return self.opts.teardown == "close"

    def isolation(self) -> AbstractContextManager[Any]:
        """The store module, pyverbs (the node's NICs) and MC_MAX_MR_SIZE as at setup."""
        stack = ExitStack()
        # last on the way out: the scenario's buffers (every node's) end with it
        stack.callback(release, [n.space for n in self.fake.fabric.nodes.values()])
        node = self.opts.nodes[0]
        stack.enter_context(self.fake.patch(node))
        stack.enter_context(self.fake.fabric.patch(node))
        stack.enter_context(env_var(ENV_MR, self.run.env.get(ENV_MR)))
        return stack

    def register(self, impl: Implementation) -> bool:
        """Register every buffer of every node; stop at the first error. True if all went
        well."""
        run, fake = self.run, self.fake
        max_mr_size = None if self.opts.limit == "own" else run.limit
        families = run.geometry.extent_families() if run.geometry.has_page_meta else ()
        for node in self.opts.nodes:
            store = run.stores[node]
            for pb in run.pools[node]:
                b = McBuffer(pb, family_object_stride(pb.spec.copy_unit, families, pb.index))
                run.runs.append(b)
                b.seq_start = next_seq(fake)
                self.progress.step("register", pb.spec.name)
                handle, error = self.attempt(partial(
                    styles.register_mr, impl, store, pb.base, pb.nbytes,
                    max_mr_size=max_mr_size, granularity=b.granularity))
                if error is None:
                    b.handle, b.registered = handle, True
                else:
                    b.error, b.raised = error, summarize_exception(error)
                b.seq_end = next_seq(fake)
                if b.error is not None:
                    b.live_after_error = [(p, s) for p, s in store.registered_buffers()
                                          if pb.holds(p, s)]
                    return False
        return True

    def transfer(self) -> None:
        self.coverage = _exercise(self.run, self.sc, self.opts, self.record)

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        close = self.opts.teardown == "close" or impl.teardown_close
        for b in reversed(self.run.runs):
            if not b.registered:
                continue
            self.progress.step(f"teardown round {round_ + 1}", b.pool.spec.name)
            store = self.run.stores[b.pool.node]
            if close:   # tearDownAll releases every MR of the store (§1.1): kvreg's call
                _, error = self.attempt(store.close, counted=False)
            else:
                _, error = self.attempt(partial(styles.teardown_mr, impl, store, b.handle))
            if error is not None:
                self.record.teardown_errors.append((round_, b, error))

    def finish(self) -> None:
        fake = self.fake
        fake.trace.observer = None
        self.record.trace = list(fake.trace)
        self.record.live_end = [(lb.node, lb.base, lb.size) for lb in fake.live_buffers()]
        fake.faults.clear()
        fake.close_all()

    def judge(self) -> list[Violation]:
        return check_mooncake_run(self.record)

    def warnings(self) -> list[Violation]:
        return mooncake_warnings(self.record)


def build_world(sc: Scenario, impl: Implementation, backend: Any) -> MooncakeWorld:
    """The world of one run (``backend``: "fake", or a MooncakeMirror pairing every store
    with a real one); raises SkipScenario or CannotRun."""
    if not styles.registers_mrs(impl):
        raise SkipScenario(f"the {impl.style} style registers CUDA buffers; Mooncake "
                           "scenarios need --style mooncake")
    opts = MooncakeOptions.parse(sc.options)
    mirror = backend if hasattr(backend, "wrap_store") else None
    if mirror is not None and sc.memory != "real":
        raise SkipScenario("fake-only on the real store: a virtual pool has no memory "
                           "behind it for the real store to read")
    why_not = impl.contract.scenario_skip_reason(sc.expect, sc.contract)
    if why_not:
        raise SkipScenario(why_not)
    if opts.limit == "own" and not styles.computes_own_mr_limit(impl):
        raise SkipScenario("this scenario passes max_mr_size=None for the implementation "
                           "to compute its own MR limit; a register whose max_mr_size "
                           "defaults to None says it does")
    try:
        run = _build(sc, opts, mirror)
        plan_io(run.geometry, [0], io=opts.io, merged=opts.merged)  # a bad plan fails early
    except (IoPlanError, GeometryError, ValueError, RuntimeError) as exc:
        raise CannotRun(str(exc)) from exc
    fake = run.fake
    for spec in sc.faults:
        fake.faults.arm_from_dict(spec)
    # the implementation's calls only: kvreg's store I/O and closes spend none of it
    budget = CallBudget(fake.faults, "mooncake.*", sc.call_budget, "store")
    store_limited = opts.protocol in fake.profile.store_limit_protocols
    record = McRecord(run.limit, sc.expect, store_limited, run.runs, [],
                      exercised=sc.exercise, pinning=impl.pinning or sc.pinning,
                      seams_matter=not fake.profile.slices_split_at_mr_seams)
    return MooncakeWorld(sc, opts, run, record, budget)

