"""The engine's dma-buf path for device memory (docs/mooncake-verbs.md §8.9, docs/gpu-rdma.md
§2): what Mooncake's ``RdmaContext::registerMemoryRegionInternal`` exports in each version and
the -202 it returns, on the fake driver and NIC; then the catalog's #2035 / #2511 scenarios
with a broken and a correct implementation."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.cuda import errors as cu
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake.engine_core import CONTEXT, RdmaTransport, Segment
from kvreg.fakes.mooncake.engine_dmabuf import dmabuf_export
from kvreg.fakes.verbs import Fabric
from kvreg.fakes.verbs.dmabuf_mr import DmaBuf, reg_dmabuf
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import ScenarioError, bundled_root, load_file

from ..helpers.gpu_memory import expandable_segment, ready_driver

MiB = 1 << 20
ROOT = bundled_root()
IMPLS = Path(__file__).parent / "impls"
CATALOG = {sc.id: sc for sc in load_file(ROOT / "gpu_rdma" / "dmabuf.toml", ROOT)}


class Node:
    """One node with a NIC and an attached fake GPU, and an rdma transport on the path."""

    def __init__(self, export: str, gpu_registration: str = "dmabuf", *,
                 profile: str = "h200-r580", nics: int = 1) -> None:
        self.fake = FakeCuda(profile)
        self.drv = ready_driver(self.fake)
        fabric = Fabric(())
        self.node = fabric.add_node("n")
        for i in range(nics):
            fabric.add_device(f"dev{i}", "mlx5", node="n")
        self.gpu = self.fake.gpu_memory()
        self.node.attach_gpu(self.gpu)
        self.rdma = RdmaTransport(Segment("n:1"), list(self.node.nics.values()), 7,
                                  gpu_registration=gpu_registration, dmabuf_export=export)

    def alloc(self, size: int) -> int:
        err, ptr = self.drv.cuMemAlloc(size)
        assert int(err) == 0
        return int(ptr)

    def mrs(self) -> list[Any]:
        return [rec for buf in self.rdma.segment.buffers for rec in buf.mrs]


def test_a_block_is_exported_whole_and_registered_at_its_offset() -> None:
    # v0.3.11 rdma_context.cpp: cuMemGetAddressRange -> export(base, size) ->
    # ibv_reg_dmabuf_mr(pd, addr - base, length, addr, fd, access); the fd closed after
    n = Node("allocation")
    base = n.alloc(64 * MiB)
    code, fd, offset = dmabuf_export(n.gpu, base + 8 * MiB, 4 * MiB, "allocation")
    assert (code, offset) == (0, 8 * MiB) and fd >= 0
    os.close(fd)
    fds_before = len(os.listdir("/proc/self/fd"))
    assert n.rdma.register(base + 8 * MiB, 4 * MiB) == 0
    (mr,) = n.mrs()
    assert (mr.addr, mr.length, mr.dmabuf_fd >= 0) == (base + 8 * MiB, 4 * MiB, True)
    assert len(os.listdir("/proc/self/fd")) == fds_before      # the engine closed its fd
    # docs/cuda-runtime.md §14.5: the exporter maps the whole dma-buf (the block) into BAR1
    assert (mr.gpu_bytes, n.fake.driver.bar1_used) == (64 * MiB, {0: 64 * MiB})
    assert n.rdma.unregister(base + 8 * MiB) == 0 and not mr.live
    assert n.fake.driver.bar1_used == {0: 0}


def test_before_2035_an_interior_pointer_exports_past_its_block() -> None:
    # before #2035: RANGE_SIZE bytes from the pointer itself; the export fails
    # (CUDA_ERROR_INVALID_VALUE) and the engine returns -202 without any MR
    n = Node("range_size")
    base = n.alloc(64 * MiB)
    assert n.rdma.register(base, 64 * MiB) == 0              # the block's own base is fine
    assert n.rdma.register(base + 32 * MiB, 4 * MiB) == CONTEXT
    assert n.rdma.last_cuda_error == cu.INVALID_VALUE and n.rdma.last_errno is None
    assert len(n.mrs()) == 1
    # with #2035 the same interior pointer registers
    m = Node("allocation")
    inner = m.alloc(64 * MiB) + 32 * MiB
    assert m.rdma.register(inner, 4 * MiB) == 0


@pytest.mark.parametrize(("export", "rc", "errno_"), [
    ("allocation", CONTEXT, errno.EINVAL),   # #2511: one 20 MiB mapping exported
    ("covering", 0, None),                   # #3538: the range the tensor needs
])
def test_a_tensor_across_mappings(export: str, rc: int, errno_: int | None) -> None:
    n = Node(export)
    va, _ = expandable_segment(n.drv, mappings=3)
    tensor = va + 12 * MiB                     # 32 MiB from inside the first mapping
    assert n.rdma.register(tensor, 32 * MiB) == rc
    assert n.rdma.last_errno == errno_
    # a tensor inside one mapping registers either way
    assert n.rdma.register(va, 8 * MiB) == 0


def test_the_covering_export_is_page_aligned_and_starts_in_the_mapping() -> None:
    n = Node("covering")
    va, _ = expandable_segment(n.drv, mappings=2)
    code, fd, offset = dmabuf_export(n.gpu, va + 20 * MiB - 512, 4096, "covering")
    assert (code, offset) == (0, 4096 - 512)
    os.close(fd)
    # past the last mapping nothing is mapped: the export fails (-202 in the engine)
    assert dmabuf_export(n.gpu, va + 39 * MiB, 2 * MiB, "covering")[0] == cu.INVALID_VALUE
    assert n.rdma.register(va + 39 * MiB, 2 * MiB) == CONTEXT


def test_host_memory_and_the_peermem_path_keep_ibv_reg_mr() -> None:
    import ctypes
    n = Node("allocation")
    host = ctypes.create_string_buffer(8192)
    assert n.rdma.register(ctypes.addressof(host), 8192) == 0
    assert n.mrs()[0].dmabuf_fd == -1
    p = Node("allocation", gpu_registration="peermem")
    ptr = p.alloc(4 * MiB)
    assert p.rdma.register(ptr, 4 * MiB) == 0
    assert p.mrs()[0].dmabuf_fd == -1 and p.mrs()[0].gpu_bytes > 0


def test_each_nics_dma_buf_takes_bar1_and_past_it_the_mr_is_enomem() -> None:
    # docs/cuda-runtime.md §14.5 [INF]: each NIC's MR maps its own export (v0.3.11 exports
    # per NIC) whole through BAR1 (nv-dmabuf.c nv_dma_buf_map); a map that does not fit is
    # NULL, ENOMEM from dma_buf_map_attachment; the engine returns -202 and releases the MR
    # it made on the first NIC. T4: 256 MiB BAR1, 32 MiB kept: 224 MiB usable.
    n = Node("allocation", profile="t4-small-bar1", nics=2)
    first, second = n.alloc(64 * MiB), n.alloc(64 * MiB)
    assert n.rdma.register(first, 64 * MiB) == 0
    assert n.fake.driver.bar1_used == {0: 128 * MiB}
    assert n.rdma.register(second, 64 * MiB) == CONTEXT       # 192 MiB fits, 256 does not
    assert (n.rdma.last_errno, n.rdma.last_cuda_error) == (errno.ENOMEM, None)
    assert n.fake.driver.bar1_used == {0: 128 * MiB}          # the first NIC's MR given back
    assert n.rdma.unregister(first) == 0
    assert n.fake.driver.bar1_used == {0: 0}
    assert n.rdma.register(second, 64 * MiB) == 0


def test_a_view_maps_its_whole_block_where_nvidia_peermem_pins_only_the_view() -> None:
    # §14.5: the export is the block (#2035's fix), mapped whole for each MR; §14.4: the
    # peer client pins the MR's own 64 KiB pages, and past BAR1 gives bar1_exhausted_errno
    n = Node("allocation", profile="t4-small-bar1")
    block = n.alloc(64 * MiB)
    views = [block + i * 4 * MiB for i in range(4)]
    assert [n.rdma.register(v, 4 * MiB) for v in views] == [0, 0, 0, CONTEXT]
    assert n.rdma.last_errno == errno.ENOMEM and n.fake.driver.bar1_used == {0: 192 * MiB}
    p = Node("allocation", gpu_registration="peermem", profile="t4-small-bar1")
    block = p.alloc(64 * MiB)
    assert [p.rdma.register(block + i * 4 * MiB, 4 * MiB) for i in range(4)] == [0] * 4
    assert p.fake.driver.bar1_used == {0: 16 * MiB}
    assert p.rdma.register(p.alloc(224 * MiB), 224 * MiB) == CONTEXT
    assert p.rdma.last_errno == errno.EFAULT


def test_a_dma_buf_the_gpu_did_not_export_takes_no_bar1() -> None:
    # a DRM buffer (pyverbs' DmaBuf) is no GPU's device memory: nothing is charged
    n = Node("allocation", profile="t4-small-bar1")
    nic = next(iter(n.node.nics.values()))
    n.node.drm_render_nodes = 1
    buf = DmaBuf(300 * MiB, _node=n.node)
    try:
        mr = reg_dmabuf(nic, 1, 0, 300 * MiB, 0, buf.fd, 7)
        assert (mr.gpu_device, mr.gpu_bytes, n.fake.driver.bar1_used) == (-1, 0, {})
        nic.release(mr)
    finally:
        buf.close()


def _impl(name: str) -> Any:
    return make_implementation(f"{IMPLS / name}.py:register", f"{IMPLS / name}.py:teardown",
                               "mooncake_engine")


@pytest.mark.parametrize(("scenario", "reg_errno"), [
    ("dmabuf-interior-before-2035", None), ("dmabuf-expandable-segments", errno.EINVAL)])
def test_a_dropped_dmabuf_failure_is_caught_and_a_reported_one_passes(
        scenario: str, reg_errno: int | None) -> None:
    sc = CATALOG[f"gpu_rdma/dmabuf/{scenario}"]
    broken = run_scenario(sc, _impl("sglang_debug_log"), keep_trace=True)
    assert broken.verdict == "fail", broken.trace_text
    first = broken.violations[0]
    assert first.rule == "registration-failure-dropped", first.message
    assert "returned -202 (ERR_CONTEXT)" in first.message
    good = run_scenario(sc, _impl("sglang_batch_fixed"), keep_trace=True)
    assert good.verdict == "pass", [v.as_dict() for v in good.violations]
    failed = [ln for ln in good.trace_text.splitlines() if "reg_dmabuf_mr" in ln
              and "-> 0 OK" not in ln]
    if reg_errno is None:      # the export failed: no MR call at all for that buffer
        assert failed == [] and "-> -202 ERR_CONTEXT" in good.trace_text
    else:
        assert failed and failed[0].endswith(f"-> {reg_errno} EINVAL"), failed


@pytest.mark.parametrize("scenario", ["dmabuf-blocks", "dmabuf-interior",
                                      "dmabuf-expandable-segments-3538"])
def test_where_the_fix_applies_every_buffer_registers_and_transfers(scenario: str) -> None:
    result = run_scenario(CATALOG[f"gpu_rdma/dmabuf/{scenario}"], make_implementation(),
                          keep_trace=True)
    assert result.verdict == "pass", [v.as_dict() for v in result.violations]
    assert "reg_dmabuf_mr" in result.trace_text and "ERR_CONTEXT" not in result.trace_text


@pytest.mark.parametrize(("scenario", "fails_at"), [
    ("dmabuf-small-bar1", 7),             # six 34 MiB blocks in 224 MiB
    ("dmabuf-one-block-small-bar1", 4),   # three times the 66 MiB block
])
def test_bar1_exhausted_on_the_dmabuf_path_must_be_reported(scenario: str,
                                                            fails_at: int) -> None:
    # docs/cuda-runtime.md §14.5: ENOMEM from ibv_reg_dmabuf_mr, -202 from the engine
    sc = CATALOG[f"gpu_rdma/dmabuf/{scenario}"]
    broken = run_scenario(sc, _impl("sglang_debug_log"), keep_trace=True)
    assert broken.verdict == "fail", broken.trace_text
    assert broken.violations[0].rule == "registration-failure-dropped"
    assert "returned -202 (ERR_CONTEXT)" in broken.violations[0].message
    for name in ("sglang_batch_fixed", "vllm_per_buffer"):
        good = run_scenario(sc, _impl(name), keep_trace=True)
        assert good.verdict == "pass", (name, [v.as_dict() for v in good.violations])
        mrs = [ln for ln in good.trace_text.splitlines() if "prefill/" in ln and
               "reg_dmabuf_mr" in ln]
        assert len(mrs) == fails_at and mrs[-1].endswith("-> 12 ENOMEM"), mrs
        assert all(ln.endswith("-> 0 OK") for ln in mrs[:-1]), mrs


def test_one_registration_of_the_block_maps_it_once_and_passes() -> None:
    # the same views registered as one region: one export, one BAR1 mapping of the block
    sc = CATALOG["gpu_rdma/dmabuf/dmabuf-one-block-small-bar1"]
    result = run_scenario(sc, _impl("one_region"), keep_trace=True)
    assert result.verdict == "pass", [v.as_dict() for v in result.violations]
    mrs = [ln for ln in result.trace_text.splitlines() if "prefill/" in ln and
           "reg_dmabuf_mr" in ln]
    assert len(mrs) == 1 and mrs[0].endswith("-> 0 OK"), mrs
    assert "ERR_CONTEXT" not in result.trace_text


@pytest.mark.parametrize(("table", "words"), [
    ('{ gpu_registration = "dma_buf" }', "gpu_registration = one of ['peermem', 'dmabuf']"),
    ('{ dmabuf_export = "covering" }', 'dmabuf_export needs gpu_registration = "dmabuf"'),
    ('{ gpu_registration = "dmabuf", dmabuf_export = "all" }',
     "dmabuf_export = one of ['range_size', 'allocation', 'covering']"),
    ('{ transport = "nixl", gpu_registration = "dmabuf" }',
     "gpu_registration applies to transport = 'mooncake' only"),
])
def test_a_bad_dmabuf_option_is_one_problem(tmp_path: Path, table: str, words: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('format = 1\n[pool]\ntype = "mha"\nparams = { layout = "layer_first", '
                    'layer_num = 2, head_num = 8, head_dim = 128, dtype = "bfloat16", '
                    'page_size = 16 }\n[[scenario]]\nname = "s"\nguards = "a bad table"\n'
                    f'pages = 4\ntarget = "gpu_rdma"\ngpu_rdma = {table}\n')
    with pytest.raises(ScenarioError) as err:
        load_file(path, tmp_path)
    assert words in str(err.value)
