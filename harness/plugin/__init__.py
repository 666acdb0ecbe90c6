"""kvreg's pytest plugin: the ``pytest11`` entry point ``kvreg`` is this module (``-p
kvreg.harness.plugin`` where plugin autoloading is off). Its fixtures, markers and leak check
are here; scenario files as test items in :mod:`.scenarios`, the fixtures for a user's own
pool class in :mod:`.pool_class`, the fixture that runs a function on N rank processes of
one fake host in :mod:`.ranks`.

Loading it imports nothing heavy (no torch, numpy, cuda-bindings or pyverbs): the fakes are
imported when a fixture is first used, as Hypothesis keeps its plugin separate.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pytest

from kvreg.harness.run.targets import user_styles

from .pool_class import MARKERS as POOL_MARKERS
from .pool_class import kvreg_host_memory, kvreg_pool_check
from .ranks import kvreg_ranks

if TYPE_CHECKING:
    from kvreg.fakes.cuda.fake_cuda import FakeCuda
    from kvreg.fakes.mooncake import FakeMooncake
    from kvreg.fakes.verbs import Fabric

__all__ = ["MARKERS", "PoolFactory", "PoolHandle", "fake_cudart", "fake_mooncake", "fake_verbs",
           "kvreg_faults", "kvreg_host_memory", "kvreg_mooncake_store", "kvreg_pool",
           "kvreg_pool_check", "kvreg_ranks", "pytest_addoption", "pytest_configure",
           "pytest_report_header", "pytest_runtest_call", "pytest_runtest_setup"]

MARKERS = {
    "kvreg_allow_leaks": "kvreg_allow_leaks: the test may end with host registrations still "
                         "live (the fake_cudart leak check is skipped)",
    "kvreg_profile": "kvreg_profile(name): the device profile fake_cudart emulates "
                     "(e.g. 'h100-r575', 'wsl2')",
    "kvreg_gpu": "kvreg_gpu: needs a real CUDA GPU (skipped without one unless "
                 "--kvreg-require-hw)",
    "kvreg_rdma": "kvreg_rdma: needs a real RDMA device (skipped without one unless "
                  "--kvreg-require-hw)",
    "kvreg_cuda_machine": "kvreg_cuda_machine: under fake_cudart, torch.version.cuda, "
                          "torch.cuda.is_available() and device_count() answer as the "
                          "device profile, so code that gates on them takes its GPU path",
    "kvreg_mooncake": "kvreg_mooncake(profile): the Mooncake profile fake_mooncake emulates "
                      "('released' or 'head'; default 'released')",
}

_FAKES_ATTR = "_kvreg_fakes"


def _version() -> str:
    try:
        return metadata.version("kvreg")
    except metadata.PackageNotFoundError:
        return "unknown"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvreg", "kvreg: KV-cache registration harness")
    group.addoption("--kvreg-profile", default=None,
                    help="device profile for the fakes (default: ini kvreg_profile or "
                         "h200-r580)")
    group.addoption("--kvreg-cuda-machine", action="store_true", default=False,
                    help="every fake_cudart also answers torch's CUDA queries (torch.version."
                         "cuda, is_available, device_count) as its profile, as the "
                         "kvreg_cuda_machine marker does")
    group.addoption("--kvreg-require-hw", action="store_true", default=False,
                    help="fail, instead of skip, tests whose hardware is missing")
    group.addoption("--kvreg-scenarios", action="append", default=None, metavar="PATH",
                    help="scenario files or folders to collect as tests ('bundled' = kvreg's "
                         "catalog); repeatable")
    group.addoption("--kvreg-impl", default=None, metavar="SPEC",
                    help="implementation under test: file.py:function or package.module:function")
    group.addoption("--kvreg-teardown", default=None, metavar="SPEC",
                    help="its teardown (default: 'teardown' next to --kvreg-impl)")
    group.addoption("--kvreg-style", default=None, choices=user_styles(),
                    help="implementation style (default sglang)")
    group.addoption("--kvreg-backend", default=None, choices=["fake", "cuda"],
                    help="backend scenarios run on (default fake)")
    group.addoption("--kvreg-pinning", default=None, choices=["required", "optional"],
                    help="for every scenario: 'optional' also passes a register that pins "
                         "nothing, raises nothing and leaves no error pending")
    group.addoption("--kvreg-baseline", default=None, metavar="FILE",
                    help="known scenario failures ('<scenario id> <rule>' per line, as "
                         "`kvreg run --write-baseline` writes): they become strict xfails")
    group.addoption("--kvreg-seed", type=int, default=0,
                    help="seed for random fault plans armed through the kvreg_faults fixture")
    parser.addini("kvreg_profile", "device profile for the fakes", default="h200-r580")
    parser.addini("kvreg_scenarios", "scenario files or folders to collect ('bundled' = "
                  "kvreg's catalog)", type="linelist", default=[])
    parser.addini("kvreg_impl", "implementation under test (SPEC)", default="")
    parser.addini("kvreg_teardown", "teardown of the implementation under test (SPEC)",
                  default="")
    parser.addini("kvreg_style", f"implementation style: {', '.join(user_styles())} (default "
                  "sglang)", default="")
    parser.addini("kvreg_backend", "backend for scenarios: fake or cuda", default="fake")
    parser.addini("kvreg_pinning", "pinning for every scenario: required or optional "
                  "(default: each scenario's own)", default="")
    parser.addini("kvreg_baseline", "baseline file of known scenario failures (relative to "
                  "the ini file); recorded failures become strict xfails", default="")
    group.addoption("--kvreg-timeout", default=None, metavar="S",
                    help="seconds one scenario may run in its worker before it is stopped "
                         "and fails (default: ini kvreg_timeout or 60)")
    group.addoption("--kvreg-memory-limit", default=None, metavar="SIZE",
                    help="memory one scenario may allocate (e.g. 512M, 4G) before it is "
                         "stopped and fails (default: ini kvreg_memory_limit or 2G)")
    parser.addini("kvreg_timeout", "seconds one scenario may run (default 60)", default="")
    parser.addini("kvreg_memory_limit", "memory one scenario may allocate, e.g. 2G (default "
                  "2G)", default="")


def pytest_configure(config: pytest.Config) -> None:
    for line in (*MARKERS.values(), *POOL_MARKERS.values()):
        config.addinivalue_line("markers", line)
    config.addinivalue_line("markers", "kvreg_scenario: a test item made from a kvreg "
                                       "scenario file")
    if config.getoption("--kvreg-scenarios") or config.getini("kvreg_scenarios"):
        from .scenarios import ScenarioPlugin, scenario_paths

        plugin = ScenarioPlugin(config)
        config.pluginmanager.register(plugin, "kvreg-scenarios")
        # collect the scenario folders too when the command line named no paths
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            for path in scenario_paths(config):
                if str(path) not in config.args:
                    config.args.append(str(path))


def _profile_name(config: pytest.Config) -> str:
    return str(config.getoption("--kvreg-profile") or config.getini("kvreg_profile"))


def pytest_report_header(config: pytest.Config) -> str:
    return (f"kvreg {_version()}: backend {config.getoption('--kvreg-backend') or 'fake'}, "
            f"device profile {_profile_name(config)}, fault seed "
            f"{config.getoption('--kvreg-seed')}, require hw "
            f"{config.getoption('--kvreg-require-hw')}")


@pytest.fixture
def fake_cudart(request: pytest.FixtureRequest) -> Iterator[FakeCuda]:
    """A fresh fake CUDA process (``FakeCuda``): for the test, ``torch.cuda.cudart()`` and
    ``cuda.bindings.runtime`` reach it, even on a CPU-only torch. ``virtual(shape, dtype,
    name=)`` makes a CPU ``torch.Tensor`` of any size over reserved memory (no RAM until
    touched; released when the test ends); ``track(tensor, name=)`` adopts a real
    one; ``inject(api, nth=, error=)`` arms a failing call; ``live_registrations()``,
    ``trace`` (``trace.codes(api)``, ``trace.format()``) and ``leak_report()`` show what
    happened. Device profile: ``@pytest.mark.kvreg_profile("wsl2")``, ``--kvreg-profile`` or
    ini ``kvreg_profile`` (default h200-r580). ``@pytest.mark.kvreg_cuda_machine`` (or
    ``--kvreg-cuda-machine``) makes ``torch.version.cuda`` and torch's device queries answer
    as that profile too. The test fails if registrations are still live at its end,
    unless it is marked ``kvreg_allow_leaks``.
    """
    from kvreg.fakes.cuda.fake_cuda import FakeCuda

    marker = request.node.get_closest_marker("kvreg_profile")
    profile = marker.args[0] if marker and marker.args else _profile_name(request.config)
    fake = FakeCuda(profile)
    fakes: list[Any] = request.node.__dict__.setdefault(_FAKES_ATTR, [])
    fakes.append(fake)
    machine = (request.node.get_closest_marker("kvreg_cuda_machine") is not None
               or bool(request.config.getoption("--kvreg-cuda-machine")))
    with fake.patch(cuda_machine=machine):
        yield fake
    fake.space.release()      # the test's virtual buffers: RAM now, mappings when unreferenced


@pytest.fixture
def fake_verbs(request: pytest.FixtureRequest) -> Iterator[Fabric]:
    """A fresh fake RDMA fabric (``Fabric``): for the test, ``import pyverbs`` (and its
    submodules, both enum generations) reach it. One node (``node0``) with one mlx5 NIC
    (``mlx5_0``); ``add_device(name, profile, **attrs)`` adds a NIC or overrides DeviceAttr
    values (profiles: mlx5, rxe, ionic, erdma, efa), ``add_node(name)`` another node;
    ``inject(api, nth=, error=)`` / ``faults`` arm failures; ``live_mrs()`` and ``trace``
    show what happened. The test fails if MRs are still registered at its end, unless it is
    marked ``kvreg_allow_leaks``.
    """
    from kvreg.fakes.verbs import Fabric

    fabric = Fabric(devices={"mlx5_0": "mlx5"})
    request.node.__dict__.setdefault(_FAKES_ATTR, []).append(fabric)
    with fabric.patch():
        yield fabric


@pytest.fixture
def fake_mooncake(request: pytest.FixtureRequest) -> Iterator[FakeMooncake]:
    """A fresh fake Mooncake deployment (``FakeMooncake``): for the test,
    ``mooncake.store.MooncakeDistributedStore`` is its store class. Profile:
    ``@pytest.mark.kvreg_mooncake("head")`` (default ``released``, v0.3.12.post1). Like the
    real one, a store from ``store()`` (or the patched class) has no client until
    ``setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
    protocol, rdma_devices, master_server_addr)`` returns 0: before that ``register_buffer``
    and the other buffer calls return -600 (INVALID_PARAMS). The ``kvreg_mooncake_store``
    fixture gives a store already set up. Also ``track(buffer)``, ``virtual(shape, dtype)``,
    ``inject(api, nth=, error=)``, ``fabric`` (its NICs and MRs) and ``trace``. The test
    fails if a registered buffer is never unregistered, unless it is marked
    ``kvreg_allow_leaks``; stores are closed after the test.
    """
    from kvreg.fakes.mooncake import FakeMooncake

    marker = request.node.get_closest_marker("kvreg_mooncake")
    fake = FakeMooncake(marker.args[0] if marker and marker.args else "released")
    request.node.__dict__.setdefault(_FAKES_ATTR, []).append(fake)
    with fake.patch():
        yield fake
    fake.close_all()
    for node in fake.fabric.nodes.values():
        node.space.release()


@pytest.fixture
def kvreg_mooncake_store(fake_mooncake: FakeMooncake) -> Any:
    """A store of this test's ``fake_mooncake``, already set up (``setup(...)`` returned 0)
    over RDMA on ``mlx5_0`` with a 64 MiB global segment and a 16 MiB local buffer, so
    ``register_buffer(ptr, size)`` works at once; closed after the test.
    """
    store = fake_mooncake.store()
    rc = store.setup("node0", "P2PHANDSHAKE", 64 << 20, 16 << 20, "rdma", "mlx5_0",
                     "127.0.0.1:50051")
    if rc != 0:
        pytest.fail(f"kvreg_mooncake_store: the fake store's setup(...) returned {rc}",
                    pytrace=False)
    return store


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """After a passing test body, leaked registrations fail the test (not its teardown)."""
    missing_hw = item.__dict__.get("_kvreg_missing_hw")
    if missing_hw:
        pytest.fail(missing_hw, pytrace=False)
    result = yield
    fakes = item.__dict__.get(_FAKES_ATTR, ())
    if fakes and item.get_closest_marker("kvreg_allow_leaks") is None:
        reports = [f.leak_report() for f in fakes]
        leaks = [r for r in reports if r]
        if leaks:
            pytest.fail("kvreg leak check: " + "\n".join(leaks) +
                        "\n(unregister every chunk, or mark the test kvreg_allow_leaks)",
                        pytrace=False)
    return result


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Hardware-marked tests skip with a reason, or fail under --kvreg-require-hw."""
    for name, probe in (("kvreg_gpu", _gpu_missing), ("kvreg_rdma", _rdma_missing)):
        if item.get_closest_marker(name) is None:
            continue
        missing = probe()
        if missing:
            if item.config.getoption("--kvreg-require-hw"):
                # fail in the call phase, so it counts as a failed test, not a setup error
                item.__dict__["_kvreg_missing_hw"] = (
                    f"{name}: {missing} (--kvreg-require-hw is set)")
                return
            pytest.skip(f"{name}: {missing}")


def _gpu_missing() -> str | None:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return "cuda-bindings is not installed (pip install 'kvreg[cuda]')"
    err, count = runtime.cudaGetDeviceCount()
    if int(err) == 35:
        return "no NVIDIA driver (cudaGetDeviceCount returned 35 cudaErrorInsufficientDriver)"
    if int(err) == 100:
        return "no CUDA GPU visible (cudaGetDeviceCount returned 100 cudaErrorNoDevice)"
    if int(err) != 0 or not count:
        return f"no usable CUDA device (cudaGetDeviceCount returned {int(err)})"
    return None


def _rdma_missing() -> str | None:
    try:
        import pyverbs.device as d
    except ImportError:
        return "pyverbs is not importable (install Debian's python3-pyverbs)"
    try:
        devices = d.get_device_list()
    except Exception as exc:  # PyverbsRDMAError without an RDMA stack
        return f"no RDMA device ({type(exc).__name__}: {exc})"
    return None if devices else "no RDMA device (get_device_list() is empty)"


class PoolFactory:
    """What ``kvreg_pool`` returns: builds a pool geometry and its buffers in the fake."""

    def __init__(self, fake: FakeCuda) -> None:
        self.fake = fake

    def __call__(self, pool_type: str, *, real: bool = False, **params: Any) -> Any:
        from kvreg.harness.pools import make_geometry
        from kvreg.harness.pools.buffers import allocate

        geometry = make_geometry(pool_type, **params)
        return PoolHandle(geometry, allocate(geometry, self.fake.space, real=real))


class PoolHandle:
    """A geometry and its buffers: torch CPU tensors, over reserved memory by default (any
    size, no RAM until touched), zeroed RAM with real=True."""

    def __init__(self, geometry: Any, buffers: list[Any]) -> None:
        self.geometry = geometry
        self.buffers = buffers

    def granularities(self) -> list[int | None]:
        """What the real pool passes as registration_granularity_bytes, per buffer."""
        return [b.granularity for b in self.geometry.buffers()]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """(buffer, BufferSpec) for every CUDA-registered buffer, in allocation order."""
        for buf, spec in zip(self.buffers, self.geometry.buffers(), strict=True):
            if spec.cuda_registered:
                yield buf, spec


@pytest.fixture
def kvreg_pool(fake_cudart: FakeCuda) -> PoolFactory:
    """Factory for KV pool buffers with their exact geometry, in this test's ``fake_cudart``:
    ``pool = kvreg_pool("mla", layout="page_first_direct", layer_num=61, kv_lora_rank=512,
    qk_rope_head_dim=64, dtype="bfloat16", page_size=64, page_num=1000)`` (CPU tensors over
    reserved memory, any size; ``real=True`` for zeroed tensors in RAM). Then
    ``pool.buffers``, ``for buf, spec in pool`` (the CUDA-registered buffers),
    ``pool.granularities()`` (the G the real pool passes, None for one call) and
    ``pool.geometry.page_extents()`` (every page's byte range). Pool types and parameters:
    ``kvreg.harness.pools`` (docs/pools.md §2).
    """
    return PoolFactory(fake_cudart)


@pytest.fixture
def kvreg_faults(fake_cudart: FakeCuda, request: pytest.FixtureRequest) -> Any:
    """The fault plan of this test's ``fake_cudart`` (cleared when the test ends):
    ``kvreg_faults.arm("cudart.cudaHostRegister", nth=2, error=2)``; triggers ``nth``,
    ``after``, ``times``, a predicate on the arguments, or a probability with a seed —
    random plans take ``seed=kvreg_faults.seed`` (``--kvreg-seed``) so a failing run can be
    repeated; actions return an error code the API can really return, raise, or delay.
    """
    plan = fake_cudart.faults
    plan.seed = int(request.config.getoption("--kvreg-seed"))
    yield plan
    plan.clear()
