"""The gpu_rdma target's pieces: the KvBuffers shape the style receives, the options table and
its one-line problems, the KV layouts at real sizes, the engine versions, the catalog, and the
CLI end to end (docs/gpu-rdma.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.verbs import Fabric
from kvreg.harness.gpu_rdma.buffers import GROUPS, KvBuffer, KvBuffers, make_buffers
from kvreg.harness.gpu_rdma.checks import GrRecord, NodeRun, Published, check_gpu_rdma_run
from kvreg.harness.gpu_rdma.layout import SEGMENT_MAPPING, allocate, kv_shapes
from kvreg.harness.gpu_rdma.options import GpuRdmaOptions
from kvreg.harness.gpu_rdma.selection import deciding_pages
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import ImplementationError, make_implementation
from kvreg.harness.scenario import ScenarioError, bundled_root, load_file

from ..helpers.gpu_memory import ready_driver
from ..helpers.kvreg_cli import run_json, run_kvreg

MiB = 1 << 20
ROOT = bundled_root()
IMPLS = Path(__file__).parent / "impls"
POOL = ('format = 1\n[pool]\ntype = "mha"\nparams = { layout = "layer_first", layer_num = 2, '
        'head_num = 8, head_dim = 128, dtype = "bfloat16", page_size = 16 }\n')


def test_the_buffers_shape_is_sglang_kvargs_plus_typed_entries() -> None:
    # the shape another project codes against: frozen, KVArgs' names, entries in group order
    names = [f.name for f in dataclasses.fields(KvBuffers)]
    assert names == ["kv_data_ptrs", "kv_data_lens", "kv_item_lens", "aux_data_ptrs",
                     "aux_data_lens", "aux_item_lens", "state_data_ptrs", "state_data_lens",
                     "state_item_lens", "gpu_id", "entries"]
    assert [f.name for f in dataclasses.fields(KvBuffer)] == ["name", "ptr", "nbytes", "kind",
                                                              "device", "group"]
    b = make_buffers([KvBuffer("aux0", 0x10, 64, "DRAM", 0, "aux"),
                      KvBuffer("k0", 0x1000, 4096, "VRAM", 0, "kv")], {"kv": [512], "aux": [8]})
    assert [e.name for e in b.entries] == ["k0", "aux0"] and GROUPS == ("kv", "aux", "state")
    assert (b.kv_data_ptrs, b.kv_data_lens, b.aux_data_ptrs, b.state_data_ptrs) == (
        [0x1000], [4096], [0x10], [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.gpu_id = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="kv: 0 item lens for 1 buffers"):
        make_buffers([KvBuffer("k0", 1, 1, "VRAM", 0, "kv")], {})


@pytest.mark.parametrize(("table", "words"), [
    ("{ allocator = \"malloc\" }", "allocator = one of ['cudaMalloc', 'one_block', "
     "'expandable_segments', 'memory_saver'] (got 'malloc')"),
    ("{ pause_resume = true }", 'pause_resume needs allocator = "memory_saver"'),
    ("{ engine = \"0.3.12\" }", "engine = one of ['v0.3.13', 'v0.3.11']"),
    ("{ nics = { mlx5_0 = \"nope\" } }", "nics.mlx5_0 = a NIC profile"),
    ("{ bar1 = 0 }", "bar1 = a byte count (got 0)"),
    ("{ peermem = 1 }", "peermem = true or false (got 1)"),
    ("{ lanes = 2 }", "not 'lanes'"),
])
def test_a_bad_table_is_one_problem_naming_the_field(tmp_path: Path, table: str,
                                                     words: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(POOL + f'[[scenario]]\nname = "s"\nguards = "a bad table (test)"\n'
                    f'pages = 4\ntarget = "gpu_rdma"\ngpu_rdma = {table}\n')
    with pytest.raises(ScenarioError) as err:
        load_file(path, tmp_path)
    assert words in str(err.value), str(err.value)


def test_the_cli_refuses_a_bad_table_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(POOL + '[[scenario]]\nname = "s"\nguards = "a bad table (test)"\n'
                    'pages = 4\ntarget = "gpu_rdma"\ngpu_rdma = { state = -1 }\n')
    proc = run_kvreg("run", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "state = a count (got -1)" in proc.stderr


def test_the_engine_versions_are_the_profile_switches() -> None:
    new, old = GpuRdmaOptions().engine_profile(), GpuRdmaOptions(engine="v0.3.11").engine_profile()
    assert (new.engine_batch_validates, new.engine_batch_propagates_errors,
            new.engine_rolls_back_transports) == (True, True, True)
    assert (old.engine_batch_validates, old.engine_batch_propagates_errors,
            old.engine_rolls_back_transports) == (False, False, False)
    one = GpuRdmaOptions(engine="v0.3.11", batch_validates=True).engine_profile()
    assert (one.engine_batch_validates, one.engine_batch_propagates_errors) == (True, False)
    dev = GpuRdmaOptions(gpu="t4-small-bar1", bar1=MiB, peermem=False).device_profile()
    assert (dev.bar1_size - dev.bar1_reserved, dev.peermem) == (MiB, False)


def _pool() -> object:
    sc = load_file(ROOT / "gpu_rdma" / "mla_latent.toml", ROOT)[0]
    return sc.geometry()


def test_kv_shapes_follow_sglang_pools() -> None:
    # MHA: K and V per layer, (pages + 1) * page_size tokens (MHATokenToKVPool: size +
    # page_size); MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer
    mha = load_file(ROOT / "gpu_rdma" / "mha_per_layer.toml", ROOT)[0].geometry()
    shapes = kv_shapes(mha)
    assert [n for n, _, _ in shapes[:4]] == ["k0", "v0", "k1", "v1"] and len(shapes) == 64
    assert shapes[0][1:] == (4097 * 64 * 8 * 128 * 2, 64 * 8 * 128 * 2)
    mla = kv_shapes(_pool())
    assert len(mla) == 61 and mla[0][1:] == (8193 * 64 * 576 * 2, 64 * 576 * 2)


@pytest.mark.parametrize("allocator", ["cudaMalloc", "one_block", "expandable_segments"])
def test_layouts_at_real_size_cost_no_ram(allocator: str) -> None:
    fake = FakeCuda("h200-r580")
    drv = ready_driver(fake)
    fabric = Fabric(())
    node = fabric.add_node("n")
    layout = allocate(drv, node, _pool(), GpuRdmaOptions(allocator=allocator))
    kv = layout.buffers.group("kv")
    total = sum(e.nbytes for e in kv)
    assert len(kv) == 61 and total > 34 * (1 << 30)
    # what cuMemGetAddressRange answers for each tensor: its own block, the shared block
    # (interior pointers, #2035) or one 20 MiB mapping (#2511)
    ranges = {int(drv.cuMemGetAddressRange(e.ptr)[1]) for e in kv}
    sizes = {int(drv.cuMemGetAddressRange(e.ptr)[2]) for e in kv}
    if allocator == "cudaMalloc":
        assert ranges == {e.ptr for e in kv}
    elif allocator == "one_block":
        assert len(ranges) == 1 and sizes == {total}
    else:
        assert sizes == {SEGMENT_MAPPING}
        assert len(fake.driver.vmm.mappings_covering(kv[0].ptr, total)) == \
            -(-total // SEGMENT_MAPPING)
    assert [e.kind for e in layout.buffers.entries] == ["VRAM"] * 61 + ["DRAM"] * 2


def test_deciding_pages_are_the_ends_and_the_edges() -> None:
    assert deciding_pages(0, 100 * 64, 64, []) == [0, 99]
    # an edge 10 pages and 5 bytes in: the pages on either side of it
    assert deciding_pages(0, 100 * 64, 64, [10 * 64 + 5]) == [0, 9, 10, 99]
    assert deciding_pages(0, 100 * 64, 64, [10 * 64]) == [0, 9, 10, 99]


def test_a_buffer_without_an_mr_on_every_nic_is_named() -> None:
    # an engine that published a buffer on one of its two NICs (the check reads the MRs)
    kv = KvBuffer("k0", 0x1000, 4096, "VRAM", 0, "kv")
    node = NodeRun("prefill", (kv,), ("mlx5_0", "mlx5_1"), registered=True,
                   published=[Published(0x1000, 4096, frozenset({"mlx5_0"}))])
    found = check_gpu_rdma_run(GrRecord("success", [node]))
    assert [(v.rule, v.message) for v in found] == [
        ("buffer-not-registered", "prefill: k0 has no MR on mlx5_1: a transfer the engine "
         "routes through that NIC fails")]
    node.published = [Published(0x1000, 4096, frozenset({"mlx5_0", "mlx5_1"}))]
    assert check_gpu_rdma_run(GrRecord("success", [node])) == []


def test_catalog_covers_the_issue() -> None:
    catalog = [sc for f in sorted((ROOT / "gpu_rdma").glob("*.toml")) for sc in load_file(f, ROOT)]
    opts = [GpuRdmaOptions.parse(sc.options) for sc in catalog]
    assert {type(sc.geometry()).__name__ for sc in catalog} == {"MHAGeometry", "MLAGeometry"}
    assert {o.allocator for o in opts} == {"cudaMalloc", "one_block", "expandable_segments",
                                           "memory_saver"}
    assert any(o.pause_resume and len(o.nics) > 1 and o.state for o in opts)
    assert {o.engine for o in opts} == {"v0.3.13", "v0.3.11"}
    assert any(o.peermem is False for o in opts) and any(o.gpu == "t4-small-bar1" for o in opts)
    assert any(len(o.nics) > 1 for o in opts) and any(o.state for o in opts)
    assert sum(1 for sc in catalog if sc.faults) >= 4
    assert all(sc.target == "gpu_rdma" and len(sc.guards) > 40 for sc in catalog)


def test_other_styles_are_skipped_with_the_reason() -> None:
    sc = load_file(ROOT / "gpu_rdma" / "mha_per_layer.toml", ROOT)[0]
    impl = make_implementation(f"{ROOT.parent}/tests/mooncake_target/impls/log_only.py:register",
                               None, "mooncake")
    result = run_scenario(sc, impl)
    assert result.verdict == "skip"
    assert "gpu_rdma scenarios need --style mooncake_engine" in (result.reason or "")


def test_a_register_that_cannot_take_the_call_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wrong.py").write_text("def register(engine):\n    pass\n"
                                       "def teardown(engine, handle):\n    pass\n")
    with pytest.raises(ImplementationError, match=r"register\(engine, buffers\)"):
        make_implementation(f"{tmp_path}/wrong.py:register", f"{tmp_path}/wrong.py:teardown",
                            "mooncake_engine")


def test_the_cli_runs_the_catalog_with_the_style() -> None:
    # per buffer as vLLM, registering again after a memory saver's resume (docs/gpu-rdma.md §7)
    spec = str(IMPLS / "saver_resume_reregisters.py")
    run = run_json(str(ROOT / "gpu_rdma"), "--impl", f"{spec}:register", "--teardown",
                   f"{spec}:teardown", "--style", "mooncake_engine", "-j", "1", to_file=True)
    scenarios = run.scenarios()
    # the style takes no limit, and the contract line says what the verdicts rest on (it
    # once read "contract: none declared by ;", an empty signature)
    assert "contract: none (register(engine|agent, buffers) takes no limit)" in run.stdout
    assert "declared by ;" not in run.stdout
    assert run.returncode == 0, run.stderr
    verdicts = {k: s["verdict"] for k, s in scenarios.items()}
    # the engine's scenarios pass; the nixl_* ones (transport = "nixl") are skipped
    assert sorted(k for k, v in verdicts.items() if v == "pass") == sorted(
        k for k in verdicts if not k.split("/")[1].startswith("nixl_"))
    assert len(verdicts) == 43 and list(verdicts.values()).count("skip") == 14


def test_code_imported_for_a_scenario_finds_the_fake_engine() -> None:
    # a worker imports the implementation under the scenario's machine (run/process.py):
    # ``from mooncake.engine import TransferEngine`` reaches the fake there
    from kvreg.harness.run import process

    sc = load_file(ROOT / "gpu_rdma" / "mla_latent.toml", ROOT)[2]
    config = process.process_config(sc)
    assert config.target == "gpu_rdma" and config.env == ()
    assert config.machine == ("h200-r580", tuple((f"mlx5_{i}", "mlx5") for i in range(4)),
                              "v0.3.13")
    with process.import_scope(config):
        from mooncake.engine import TransferEngine

        engine = TransferEngine()
        assert engine.initialize("h", "P2PHANDSHAKE", "rdma", "") == 0
        assert engine.state is not None and engine.state.protocol == "rdma"
