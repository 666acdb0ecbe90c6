"""The ``mooncake`` target: MR registration through a store on the fake RDMA fabric.

The world mirrors the CUDA target's (harness/cuda/target.py): a fresh :class:`FakeMooncake` with the
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

Options (the scenario's ``mooncake`` table), all optional:

- ``profile``: ``released`` (≤ v0.3.12.post1, default) or ``head`` (docs/mooncake-verbs.md §6.1)
- ``protocol``: ``rdma`` (default) or ``tcp``
- ``devices``: NIC name -> NIC profile (default ``{ mlx5_0 = "mlx5" }``)
- ``device_max_mr_size``: overrides every device's advertised max_mr_size
- ``mc_max_mr_size``: the ``MC_MAX_MR_SIZE`` environment value in bytes (unset by default)
- ``fastdeploy_clamp``: FastDeploy's 1–6 GiB clamp of it, written back to the env (§2.1)
- ``io``: ``auto`` (multi-buffer where a page has more pointers than keys), ``flat``, ``multi``
- ``merged``: one batch call for every member of a hybrid pool (newer SGLang, §3.4)
- ``pd``: also write every page from a prefill node into a decode node by RDMA WRITE
- ``limit``: ``given`` (default: register gets the effective MR limit as ``max_mr_size``) or
  ``own`` (it gets None and computes the limit itself: ``MC_MAX_MR_SIZE`` as the store saw it
  at setup is in the environment, and ``pyverbs`` reaches the node's NICs); an
  implementation that needs the limit given is skipped there, saying why
- ``teardown``: ``unregister`` (default: the implementation's teardown) or ``close`` (each
  teardown round closes the store, whose tearDownAll releases every MR, §1.1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvreg.fakes.mooncake import STORE_PROFILES, FakeMooncake
from kvreg.fakes.verbs.profiles import get_nic_profile
from kvreg.harness.cuda.buffers import release
from kvreg.harness.pools import GeometryError, PoolGeometry
from kvreg.harness.run.budget import CallBudget
from kvreg.harness.run.endstate import summarize_exception
from kvreg.harness.run.isolation import env_var
from kvreg.harness.run.progress import Progress
from kvreg.harness.run.result import CallBudgetExceeded, Violation
from kvreg.harness.run.target import CannotRun, ProcessConfig, SkipScenario

from . import styles
from .checks import McBuffer, McRecord, check_mooncake_run, mooncake_warnings
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

__all__ = ["TARGET", "MooncakeOptions", "MooncakeTarget", "MooncakeWorld", "validate_options"]

MASTER = "kvreg-master:50051"
_IO = ("auto", "flat", "multi")
_BOOLS = ("fastdeploy_clamp", "merged", "pd")
_INTS = ("device_max_mr_size", "mc_max_mr_size")
_KNOWN = ("profile", "protocol", "devices", *_INTS, *_BOOLS, "io", "limit", "teardown")
LIMITS = ("given", "own")
TEARDOWNS = ("unregister", "close")
ENV_MR = "MC_MAX_MR_SIZE"


@dataclass(frozen=True)
class MooncakeOptions:
    """A scenario's ``mooncake`` table, with defaults."""

    profile: str = "released"
    protocol: str = "rdma"
    devices: tuple[tuple[str, str], ...] = (("mlx5_0", "mlx5"),)
    device_max_mr_size: int | None = None
    mc_max_mr_size: int | None = None
    fastdeploy_clamp: bool = False
    io: str = "auto"
    merged: bool = False
    pd: bool = False
    limit: str = "given"
    teardown: str = "unregister"

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> MooncakeOptions:
        """Options already checked by :func:`validate_options`."""
        kw = dict(options)
        if "devices" in kw:
            kw["devices"] = tuple((str(k), str(v)) for k, v in kw["devices"].items())
        return cls(**kw)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The pool under test is on the first node (the decode node for PD)."""
        return ("decode", "prefill") if self.pd else ("node0",)


def validate_options(options: Mapping[str, Any]) -> list[str]:
    """Problems with a scenario's ``mooncake`` table (empty list when valid)."""
    problems = [f"one of the fields {list(_KNOWN)}, not {k!r}" for k in options
                if k not in _KNOWN]
    profile = options.get("profile", "released")
    if profile not in STORE_PROFILES:
        problems.append(f"profile = one of {sorted(STORE_PROFILES)} (got {profile!r})")
    protocol = options.get("protocol", "rdma")
    if protocol not in ("rdma", "tcp"):
        problems.append(f"protocol = 'rdma' or 'tcp' (got {protocol!r})")
    devices = options.get("devices", {"mlx5_0": "mlx5"})
    if not isinstance(devices, Mapping) or not devices:
        problems.append(f"devices = a table of NIC name -> NIC profile (got {devices!r})")
    else:
        for name, prof in devices.items():
            try:
                get_nic_profile(prof)
            except (ValueError, TypeError, KeyError) as exc:
                problems.append(f"devices.{name} = a NIC profile ({exc})")
    for key in _INTS:
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < (0 if key == "mc_max_mr_size" else 1)):
            problems.append(f"{key} = a byte count (got {value!r})")
    for key in _BOOLS:
        if not isinstance(options.get(key, False), bool):
            problems.append(f"{key} = true or false (got {options[key]!r})")
    if options.get("limit", "given") not in LIMITS:
        problems.append(f"limit = one of {list(LIMITS)} (got {options['limit']!r})")
    if options.get("teardown", "unregister") not in TEARDOWNS:
        problems.append(f"teardown = one of {list(TEARDOWNS)} (got {options['teardown']!r})")
    if options.get("io", "auto") not in _IO:
        problems.append(f"io = one of {list(_IO)} (got {options['io']!r})")
    if options.get("pd") is True:
        if profile == "head":
            problems.append("pd with profile 'released': at HEAD register_buffer registers "
                            "LOCAL_WRITE only and publishes no rkey (§1.5, #3151), so no "
                            "remote node can write into it")
        if protocol != "rdma":
            problems.append("pd with protocol 'rdma' (RDMA WRITE needs MRs)")
    return problems


@dataclass
class _Run:
    """The deployment of one run."""

    fake: FakeMooncake
    geometry: PoolGeometry
    stores: dict[str, Any]
    pools: dict[str, list[PoolBuffer]]
    limit: int
    runs: list[McBuffer] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)   # MC_MAX_MR_SIZE as the store saw it


def process_env(opts: MooncakeOptions) -> dict[str, str]:
    """``MC_MAX_MR_SIZE`` as the store sees it at setup (unset unless the scenario says)."""
    env: dict[str, str] = {}
    if opts.fastdeploy_clamp:
        # FastDeploy's v1 connector writes the clamped value back before setup (§2.1)
        env[ENV_MR] = str(effective_mr_limit(opts.mc_max_mr_size, (),
                                             protocol="tcp", fastdeploy_clamp=True))
    elif opts.mc_max_mr_size:
        env[ENV_MR] = str(opts.mc_max_mr_size)
    return env


def _deployment(opts: MooncakeOptions, env: dict[str, str]) -> FakeMooncake:
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


def _build(sc: Scenario, opts: MooncakeOptions, mirror: Any = None) -> _Run:
    """Fabric, stores set up on every node, the pool's buffers; no fault armed yet.

    ``mirror`` (kvreg.realhw.mooncake_mirror.MooncakeMirror) pairs every store with a real
    one: the implementation's calls go to both (the real-store tier)."""
    geometry = sc.geometry()
    env = process_env(opts)
    nodes = opts.nodes
    fake = _deployment(opts, env)
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
    return _Run(fake, geometry, stores, pools, limit, env=env)


def _next_seq(fake: FakeMooncake) -> int:
    trace = fake.trace
    return trace[len(trace) - 1].seq + 1 if len(trace) else 0


def _register(run: _Run, impl: Implementation, nodes: tuple[str, ...],
              progress: Progress, own_limit: bool = False,
              counting: Callable[[], AbstractContextManager[Any]] = nullcontext) -> bool:
    """Register every buffer of every node; stop at the first error. True if all went well."""
    fake = run.fake
    families = run.geometry.extent_families() if run.geometry.has_page_meta else ()
    for node in nodes:
        store = run.stores[node]
        for pb in run.pools[node]:
            b = McBuffer(pb, family_object_stride(pb.spec.copy_unit, families, pb.index))
            run.runs.append(b)
            b.seq_start = _next_seq(fake)
            progress.step("register", pb.spec.name)
            try:
                with counting():
                    b.handle = styles.register_mr(
                        impl, store, pb.base, pb.nbytes,
                        max_mr_size=None if own_limit else run.limit, granularity=b.granularity)
                b.registered = True
            except (CallBudgetExceeded, MemoryError):
                raise
            except Exception as exc:
                b.error = exc
                b.raised = summarize_exception(exc)
            b.seq_end = _next_seq(fake)
            if b.error is not None:
                b.live_after_error = [(p, s) for p, s in store.registered_buffers()
                                      if pb.holds(p, s)]
                return False
    return True


def _exercise(run: _Run, sc: Scenario, opts: MooncakeOptions,
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


class MooncakeWorld:
    """One Mooncake run: the deployment, its options and the record."""

    def __init__(self, sc: Scenario, opts: MooncakeOptions, run: _Run, record: McRecord
                 ) -> None:
        self.sc = sc
        self.opts = opts
        self.run = run
        self.record = record
        self.coverage: dict[str, object] | None = None
        self.progress = Progress()
        self.budget: CallBudget | None = None     # counts the implementation's calls

    @property
    def teardown_repeatable(self) -> bool:
        """``teardown = "close"``: each round is the store's own close(), which a closed
        store answers with 0 (docs/mooncake-verbs.md §7.1), so every round runs whatever
        the implementation declares."""
        return self.opts.teardown == "close"

    def _implementation(self) -> AbstractContextManager[Any]:
        """Where the implementation's code runs: its calls spend the call budget."""
        return self.budget.implementation() if self.budget is not None else nullcontext()

    def isolation(self) -> AbstractContextManager[Any]:
        """The store module, pyverbs (the node's NICs) and MC_MAX_MR_SIZE as at setup."""
        stack = ExitStack()
        # last on the way out: the scenario's buffers (every node's) end with it
        stack.callback(release, [n.space for n in self.run.fake.fabric.nodes.values()])
        node = self.opts.nodes[0]
        stack.enter_context(self.run.fake.patch(node))
        stack.enter_context(self.run.fake.fabric.patch(node))
        stack.enter_context(env_var(ENV_MR, self.run.env.get(ENV_MR)))
        return stack

    def set_logs(self, logs: list[str]) -> None:
        self.record.logs = logs

    def watch(self, progress: Progress) -> None:
        self.progress = progress
        progress.watch(self.run.fake.trace)

    def register(self, impl: Implementation) -> bool:
        return _register(self.run, impl, self.opts.nodes, self.progress,
                         own_limit=self.opts.limit == "own", counting=self._implementation)

    def transfer(self) -> None:
        self.coverage = _exercise(self.run, self.sc, self.opts, self.record)

    def copy_coverage(self) -> dict[str, object] | None:
        """How the I/O steps covered the pool's pages (None when they did not run)."""
        return dict(self.coverage) if self.coverage is not None else None

    def begin_teardown(self) -> None:
        self.record.teardown_start = _next_seq(self.run.fake)

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        close = self.opts.teardown == "close" or impl.teardown_close
        for b in reversed(self.run.runs):
            if not b.registered:
                continue
            self.progress.step(f"teardown round {round_ + 1}", b.pool.spec.name)
            try:
                if close:   # tearDownAll releases every MR of the store (§1.1)
                    self.run.stores[b.pool.node].close()
                    continue
                with self._implementation():
                    styles.teardown_mr(impl, self.run.stores[b.pool.node], b.handle)
            except (CallBudgetExceeded, MemoryError):
                raise
            except Exception as exc:
                self.record.teardown_errors.append((round_, b, exc))

    def budget_spent(self) -> None:
        self.record.budget_hit = (self.budget.spent if self.budget is not None else
                                  sum(1 for e in self.run.fake.trace
                                      if e.face.startswith("mooncake:")))

    def finish(self) -> None:
        fake = self.run.fake
        fake.trace.observer = None
        self.record.trace = list(fake.trace)
        self.record.live_end = [(lb.node, lb.base, lb.size) for lb in fake.live_buffers()]
        fake.faults.clear()
        fake.close_all()

    def judge(self) -> list[Violation]:
        return check_mooncake_run(self.record)

    def warnings(self) -> list[Violation]:
        return mooncake_warnings(self.record)

    def calls(self) -> int:
        return len(self.record.trace)

    def trace_text(self, limit: int) -> str:
        return str(self.run.fake.trace.format(limit=limit))


class MooncakeTarget:
    """register_buffer of a host pool in a Mooncake Store, judged by its checks."""

    name = "mooncake"
    steps = ("register", "transfers", "teardown")
    watched_env = (ENV_MR,)
    # the released store, one mlx5 NIC, no device MR cap, no protection-domain split
    default_machine: tuple[Any, ...] = ("released", (("mlx5_0", "mlx5"),), None, False)
    title = "Mooncake"
    style_calls = styles.STYLE_CALLS
    # the MR limit the store computes (``kvreg plan --mc-max-mr-size`` plans against it)
    effective_mr_limit = staticmethod(effective_mr_limit)
    options_table: str | None = "mooncake"
    takes_base_offset = False

    def validate_options(self, options: Mapping[str, Any]) -> list[str]:
        return validate_options(options)

    def process_config(self, sc: Scenario) -> ProcessConfig:
        """``MC_MAX_MR_SIZE`` and the deployment's store profile and NICs (code may read
        them once: the variable at import, a NIC's max_mr_size into a module cache)."""
        opts = MooncakeOptions.parse(sc.options)
        env = process_env(opts)
        machine = (opts.profile, opts.devices, opts.device_max_mr_size, opts.pd)
        return ProcessConfig("mooncake", ((ENV_MR, env.get(ENV_MR)),), machine)

    def import_scope(self, config: ProcessConfig) -> AbstractContextManager[Any]:
        """The store module and pyverbs of the first node of ``config``'s deployment."""
        profile, devices, device_max, pd = config.machine
        opts = MooncakeOptions(profile=profile, devices=devices, device_max_mr_size=device_max,
                               pd=pd)
        fake = _deployment(opts, {k: v for k, v in config.env if v is not None})
        stack = ExitStack()
        stack.enter_context(fake.patch(opts.nodes[0]))
        stack.enter_context(fake.fabric.patch(opts.nodes[0]))
        return stack

    def build(self, sc: Scenario, impl: Implementation, backend: Any) -> MooncakeWorld:
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
        world = MooncakeWorld(sc, opts, run, record)
        world.budget = budget
        return world


TARGET = MooncakeTarget()
