"""The memory saver's pause and resume between register and the transfers (the
``pause_resume`` option, docs/gpu-rdma.md §7), over the Transfer Engine and over NIXL:
torch_memory_saver releases the KV cache's device memory (cuMemUnmap + cuMemRelease,
csrc/core.cpp) and maps new memory at the same addresses; an MR nvidia-peermem pinned over
the old memory is invalidated. Code that never registers again fails its first write; code
that deregisters and registers around the pause (sglang #27696) passes, written two ways."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.mooncake.engine_core import Segment
from kvreg.fakes.verbs.fabric import Fabric
from kvreg.harness.gpu_rdma.layout import ready, saver_create, saver_pause, saver_resume
from kvreg.harness.gpu_rdma.options import validate_options
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import (
    Implementation,
    ImplementationError,
    make_implementation,
)
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import bundled_root, load_file

IMPLS = Path(__file__).parent / "impls"
ROOT = bundled_root()
SAVER = {sc.id: sc for sc in load_file(ROOT / "gpu_rdma" / "memory_saver.toml", ROOT)}
PAUSES = ["gpu_rdma/memory_saver/pause-resume",
          "gpu_rdma/memory_saver/pause-resume-two-nics-state"]


@cache
def run(name: str, scenario_id: str) -> ScenarioResult:
    impl = make_implementation(f"{IMPLS / name}.py:register", f"{IMPLS / name}.py:teardown",
                               "mooncake_engine") if name else make_implementation()
    return run_scenario(SAVER[scenario_id], impl, keep_trace=True)


@pytest.mark.parametrize("scenario", PAUSES)
@pytest.mark.parametrize("name", ["vllm_per_buffer", "saver_resume_no_dereg"])
def test_code_that_does_not_register_again_fails_the_first_write(name: str,
                                                                 scenario: str) -> None:
    # vllm_per_buffer declares no hook; saver_resume_no_dereg registers again over the old
    # regions and ignores the -7 (ERR_ADDRESS_OVERLAPPED) of each call
    result = run(name, scenario)
    assert result.verdict == "fail"
    first = result.violations[0]
    assert first.rule == "transfer-unregistered"
    assert first.message.startswith("batch_transfer_sync_write of k0 page 0 failed (-1 ")
    assert "prefill's k0+0x0 (32768 bytes) lies in a published buffer whose MR is " \
        "invalidated: prefill's memory saver released the KV cache" in first.message
    # every KV buffer of the pool fails; the host aux buffers keep their MRs
    failed = {v.message.split()[2] for v in result.violations
              if v.rule == "transfer-unregistered"}
    assert {"k0", "v0", "k3", "v3"} <= failed and not any(b.startswith("aux") for b in failed)


def test_registering_again_over_the_old_regions_is_named() -> None:
    # the engine still maps the old regions: each register_memory after resume is an
    # overlap (-7, docs/mooncake-verbs.md §8.2), and the failure says so
    first = run("saver_resume_no_dereg", PAUSES[0]).violations[0]
    assert first.message.endswith("; register_memory(k0, 8421376) after resume returned -7 "
                                  "(ERR_ADDRESS_OVERLAPPED)"), first.message
    assert "after resume returned" not in run("vllm_per_buffer", PAUSES[0]).violations[0].message


@pytest.mark.parametrize("scenario", [*PAUSES, "gpu_rdma/memory_saver/saver-region"])
@pytest.mark.parametrize("name", ["saver_release_resume", "saver_resume_reregisters", ""])
def test_code_that_registers_again_around_the_pause_passes(name: str, scenario: str) -> None:
    # "": kvreg's reference (release unregisters, resume registers)
    result = run(name, scenario)
    assert result.verdict == "pass", [v.as_dict() for v in result.violations]
    assert result.copy and result.copy["pages_copied"] > 0


def test_an_invalidated_mr_is_still_deregistered_cleanly() -> None:
    # saver_resume_reregisters unregisters the invalidated regions after resume: each
    # unregister_memory returns 0 (the dead MRs' ibv_dereg_mr succeeds) and nothing leaks
    result = run("saver_resume_reregisters", PAUSES[0])
    unregs = [line for line in (result.trace_text or "").splitlines()
              if ".unregister_memory(" in line]
    # 10 buffers a node: once after resume, once in teardown
    assert len(unregs) == 40 and all(line.endswith("-> 0 OK") for line in unregs), unregs
    assert not result.violations


def _fake_gpu() -> tuple[FakeCuda, object]:
    cuda = FakeCuda()
    return cuda, ready(cuda)


def test_an_mr_over_released_memory_is_invalidated_and_refused_by_the_hca() -> None:
    # the same address mapped anew is other memory: the MR pinned the old one
    cuda, drv = _fake_gpu()
    fabric = Fabric()
    node = fabric.add_node("n")
    node.attach_gpu(cuda.gpu_memory())
    nic = fabric.add_device("mlx5_0", "mlx5", node="n")
    saver: list[list[int]] = []
    size = 2 << 20
    handle = saver_create(drv, size)
    va = int(drv.cuMemAddressReserve(size, 0, 0, 0)[1])
    assert int(drv.cuMemMap(va, size, 0, handle, 0)[0]) == 0
    saver.append([va, size, int(handle)])
    rec = nic.reg_mr(va, size, 7, pd_id=nic.new_pd_id())
    assert not rec.invalidated()
    saver_pause(drv, saver)
    assert rec.invalidated()                 # released: the free callback invalidated it
    saver_resume(drv, saver)
    assert rec.invalidated()                 # mapped again: still the old memory's MR
    fresh = nic.reg_mr(va, size, 7, pd_id=nic.new_pd_id())
    assert not fresh.invalidated()
    nic.dereg_mr(rec)                        # deregistering the dead MR succeeds
    assert not rec.live


def test_host_mrs_and_published_host_buffers_are_never_invalidated() -> None:
    fabric = Fabric()
    node = fabric.add_node("n")
    nic = fabric.add_device("mlx5_0", "mlx5", node="n")
    base = node.alloc(1 << 16)
    rec = nic.reg_mr(base, 1 << 16, 7, pd_id=nic.new_pd_id())
    assert not rec.invalidated()
    assert Segment("s").usable(base, 8) is False


@pytest.mark.parametrize(("options", "words"), [
    ({"pause_resume": True}, 'pause_resume needs allocator = "memory_saver"'),
    ({"pause_resume": True, "allocator": "memory_saver", "gpu_registration": "dmabuf"},
     "pause_resume is modelled on the nvidia-peermem path only"),
    ({"pause_resume": "yes", "allocator": "memory_saver"}, "pause_resume = true or false"),
])
def test_pause_resume_options_are_checked(options: dict[str, object], words: str) -> None:
    assert any(words in p for p in validate_options(options)), validate_options(options)


def test_a_hook_with_the_wrong_signature_is_said_in_one_line(tmp_path: Path) -> None:
    code = tmp_path / "bad_hook.py"
    code.write_text((IMPLS / "vllm_per_buffer.py").read_text()
                    + "\n\ndef resume(engine):\n    return None\n")
    impl = make_implementation(f"{code}:register", f"{code}:teardown", "mooncake_engine")
    from kvreg.harness.gpu_rdma.memory_saver import hooks
    with pytest.raises(ImplementationError, match=r"resume\(engine\) cannot be called as "
                       r"resume\(engine, buffers, handle\)"):
        hooks(impl)
    # the run says it in one line, before any call: kvreg cannot run it that way
    result = run_scenario(SAVER[PAUSES[0]], impl)
    assert result.verdict == "error" and not result.violations
    assert (result.reason or "").startswith("kvreg cannot run this scenario: resume(engine) "
                                            "cannot be called as resume(engine, buffers, "
                                            "handle)"), result.reason
    # a scenario without the pause does not call the hooks, so it runs
    assert run_scenario(SAVER["gpu_rdma/memory_saver/saver-region"], impl).verdict == "pass"


def test_a_hook_that_raises_is_an_unexpected_error(tmp_path: Path) -> None:
    code = tmp_path / "raising_hook.py"
    code.write_text((IMPLS / "vllm_per_buffer.py").read_text()
                    + "\n\ndef release(engine, handle):\n"
                    "    raise RuntimeError('deregistration failed')\n")
    impl = make_implementation(f"{code}:register", f"{code}:teardown", "mooncake_engine")
    result = run_scenario(SAVER[PAUSES[0]], impl)
    assert result.violations[0].rule == "unexpected-error"
    assert result.violations[0].message.startswith(
        "prefill: release raised RuntimeError: deregistration failed around the memory "
        "saver's pause")


@pytest.mark.parametrize("spec", ["file", "module"])
def test_hooks_are_found_in_the_module_impl_names(tmp_path: Path, spec: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # register imported from a shared module: the hooks beside it are the named module's
    # (as teardown is), not the shared module's; a user's hooks are never silently dropped
    from kvreg.harness.gpu_rdma.memory_saver import hooks
    (tmp_path / "shared_reg.py").write_text(
        (IMPLS / "vllm_per_buffer.py").read_text()
        + "\n\ndef release(engine, handle):\n    raise RuntimeError('not this one')\n")
    (tmp_path / "entry_reg.py").write_text(
        "from shared_reg import register, teardown\n\n\n"
        "def resume(engine, buffers, handle):\n    return handle\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"{tmp_path / 'entry_reg.py'}" if spec == "file" else "entry_reg"
    impl = make_implementation(f"{name}:register", None, "mooncake_engine")
    found = hooks(impl)
    assert sorted(found) == ["resume"] and found["resume"].__module__ == impl.home
    assert impl.reloaded().home == impl.home
    # the shared module named itself: its own release
    shared = make_implementation(f"{tmp_path / 'shared_reg.py'}:register", None,
                                 "mooncake_engine")
    assert sorted(hooks(shared)) == ["release"]
    # an Implementation built in code names no module: register's own module's hooks
    assert impl.register_fn is not None
    bare = Implementation("mooncake_engine", "in code", impl.register_fn, impl.teardown_fn)
    assert sorted(hooks(bare)) == ["release"]


# over NIXL (transport = "nixl"): a VRAM descriptor registered over the released memory no
# longer reaches it [UNC: UCX's handling]; the WRITE through it ends in NIXL_ERR_BACKEND
NIXL = {sc.id: sc for sc in load_file(ROOT / "gpu_rdma" / "nixl_memory_saver.toml", ROOT)}
NIXL_PAUSE = "gpu_rdma/nixl_memory_saver/pause-resume"


@cache
def run_nixl(name: str, scenario_id: str) -> ScenarioResult:
    impl = make_implementation(f"{IMPLS / name}.py:register", f"{IMPLS / name}.py:teardown",
                               "nixl") if name else make_implementation()
    return run_scenario(NIXL[scenario_id], impl, keep_trace=True)


def test_nixl_code_that_does_not_register_again_fails_the_first_write() -> None:
    result = run_nixl("nixl_per_kind", NIXL_PAUSE)
    assert result.verdict == "fail"
    first = result.violations[0]
    assert first.rule == "transfer-unregistered"
    assert first.message.startswith("the NIXL WRITE of kv0 page 0 failed (NIXL_ERR_BACKEND): "
                                    "prefill's kv0+0x0 (73728 bytes) lies in a registered "
                                    "descriptor whose MR is invalidated: prefill's memory "
                                    "saver released the KV cache"), first.message
    # the DRAM aux buffers keep their registrations
    assert not any("aux" in v.message.split(":")[0] for v in result.violations)


@pytest.mark.parametrize("scenario", sorted(NIXL))
@pytest.mark.parametrize("name", ["nixl_saver_per_kind", ""])
def test_nixl_code_that_registers_again_around_the_pause_passes(name: str,
                                                                scenario: str) -> None:
    result = run_nixl(name, scenario)
    assert result.verdict == "pass", [v.as_dict() for v in result.violations]
    assert result.copy and result.copy["pages_copied"] > 0
