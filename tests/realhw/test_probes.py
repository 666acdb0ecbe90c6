"""The fidelity probes on the fake: the documented defaults, and a flip per profile switch.

Each probe must (1) observe on the default fake what the spec's rows say the fake does,
(2) observe something else when the profile field it settles is flipped, and (3) settle
that field back to the value the fake was built with. (3) is what makes a real run's
report turn into a profile that reproduces the machine.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import DeviceProfile
from kvreg.realhw import cuda_context
from kvreg.realhw.backend import RealCuda
from kvreg.realhw.probes import Outcome, all_probes, compare, get_probe, run_probe
from kvreg.realhw.probes_cuda import CudaProbeContext
from kvreg.realhw.probes_rdma import VerbsProbeContext
from kvreg.realhw.verbs import FakeVerbs

# what the default fake (h200-r580) observes: the spec rows as the fake models them
EXPECTED: dict[str, dict[str, Any]] = {
    "device_attributes": {"attr91": 1, "attr99": 1, "attr113": 0},
    "register_same_page": {"first": 0, "second": 0},
    "register_overlap": {"partial": 712, "same_range": 712},
    "register_unaligned": {"register": 0},
    "unregister_interior": {"interior": 1, "base": 0},
    "unregister_twice": {"first": 0, "second": 713},
    "unregister_unknown": {"unregister": 713},
    "unregister_null": {"unregister": 1},
    "register_size_zero": {"register": 1},
    "register_null": {"register": 1},
    "register_bad_flags": {"register": 1},
    "register_read_only": {"register": 801},
    "register_host_alloc": {"register": 712, "unregister": 1},
    "host_get_flags_registered": {"code": 1, "flags": None},
    "host_get_flags_host_alloc": {"code": 0, "flags": 2},
    "pointer_attributes_interior": {"code": 0, "type": 1, "device": 0, "host": "queried",
                                    "alias": "same"},
    "pointer_attributes_malloc": {"code": 0, "type": 0, "device": -2, "host": "queried",
                                  "dev": "null"},
    "host_get_device_pointer": {"code": 0, "alias": "same"},
    "copy_across_async": {"reg_a": 0, "reg_b": 0, "copy": 1, "sync": 0},
    "copy_across_batch": {"reg_a": 0, "reg_b": 0, "copy": 1, "sync": 0},
    "copy_across_unaligned_split": {"reg_a": 0, "reg_b": 0, "async": 1, "batch": 1, "sync": 0},
    "copy_mixed_control": {"reg_a": 0, "async": 1, "batch": 1, "sync": 0},
    "batch_control": {"copy": 0, "sync": 0},
    "batch_stream_zero": {"copy": 1},
    "batch_src_access_order_zero": {"copy": 1},
    "batch_zero_size": {"copy": 1},
    "memlock": {"register": 0, "unregister": 0},
    "per_call_ceiling": {"register": 2},
    "cross_runtime_visibility": {"torch_register": 0, "cuda_type": 1, "cuda_reregister": 712,
                                 "cuda_last_error": 712, "cuda_last_error_again": 0,
                                 "cuda_unregister": 0},
    "per_runtime_pending_error": {"cuda_register": 1, "torch_register": 1, "cuda_peek": 1,
                                  "cuda_get": 1, "cuda_get_again": 0},
    "mr_zero_length": {"errno": 22},
    "mr_remote_write_without_local_write": {"errno": 22},
    "mr_unaligned": {"errno": 0},
    "mr_overlapping": {"first": 0, "overlapping": 0, "same_range": 0},
    "mr_memlock": {"errno": 12},
    "sge_spans_two_mrs": {"control": 0, "spanning": 4, "next": 5},
    "remote_outside_mr": {"control": 0, "outside": 10},
}

# (probe, the profile change, what it observes then, what it settles)
FLIPS: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("register_same_page", {"overlap_granularity": "page"}, {"second": 712},
     {"overlap_granularity": "page"}),
    ("unregister_null", {"unregister_null_code": 713}, {"unregister": 713},
     {"unregister_null_code": 713}),
    ("register_host_alloc", {"register_host_alloc_code": 1}, {"register": 1},
     {"register_host_alloc_code": 1}),
    ("host_get_flags_registered", {"host_get_flags_on_registered": "flags"},
     {"code": 0, "flags": 1}, {"host_get_flags_on_registered": "flags"}),
    ("pointer_attributes_interior", {"pointer_attributes_interior": "base"}, {"host": "base"},
     {"pointer_attributes_interior": "base"}),
    ("pointer_attributes_malloc", {"unregistered_pointer_device": -1}, {"device": -1},
     {"unregistered_pointer_device": -1}),
    ("copy_across_async", {"copy_across_registrations": "allow"}, {"copy": 0},
     {"copy_across_registrations": "allow"}),
    ("copy_across_batch", {"copy_across_registrations": "allow"}, {"copy": 0},
     {"copy_across_registrations": "allow"}),
    ("register_read_only", {"read_only_supported": True}, {"register": 0},
     {"read_only_supported": True}),
    ("device_attributes", {"can_use_host_pointer_for_registered_mem": False,
                           "read_only_supported": True}, {"attr91": 0, "attr113": 1},
     {"can_use_host_pointer_for_registered_mem": False, "host_register_supported": True,
      "read_only_supported": True}),
    ("device_attributes", {"host_register_supported": False}, {"attr99": 0},
     {"can_use_host_pointer_for_registered_mem": True, "host_register_supported": False,
      "read_only_supported": False}),
    ("per_call_ceiling", {"per_call_limit": None}, {"register": 0}, {"per_call_limit": None}),
]


def run_on_fake(name: str, profile: DeviceProfile | None = None) -> tuple[Outcome, FakeCuda]:
    fake = FakeCuda(profile)
    return run_probe(get_probe(name), CudaProbeContext(fake)), fake


def test_every_probe_has_a_documented_expectation() -> None:
    names = {p.name for p in all_probes()}
    assert names - {"mr_over_max_mr_size"} == set(EXPECTED)


@pytest.mark.parametrize("name", [p.name for p in all_probes("cuda")])
def test_cuda_probe_agrees_with_the_fake_defaults_and_leaks_nothing(name: str) -> None:
    out, fake = run_on_fake(name)
    assert out.status == "ok", out.reason
    assert out.observation == EXPECTED[name]
    assert fake.leak_report() == ""
    probe = get_probe(name)
    defaults = DeviceProfile()
    assert probe.settles(out.observation) == {f: getattr(defaults, f) for f in probe.fields}


@pytest.mark.parametrize(("name", "change", "observed", "settled"), FLIPS,
                         ids=[f[0] for f in FLIPS])
def test_probe_flips_with_its_profile_switch(name: str, change: dict[str, Any],
                                             observed: dict[str, Any],
                                             settled: dict[str, Any]) -> None:
    out, _ = run_on_fake(name, DeviceProfile().replace(**change))
    assert out.status == "ok", out.reason
    assert out.observation == {**EXPECTED[name], **observed}
    assert out.observation != EXPECTED[name]
    assert get_probe(name).settles(out.observation) == settled


def test_every_settled_field_has_a_flip() -> None:
    settled = {f for p in all_probes("cuda") for f in p.fields}
    flipped = {f for _, change, _, _ in FLIPS for f in change}
    assert settled <= flipped, settled - flipped
    assert {p.name for p in all_probes("cuda") if p.fields} <= {f[0] for f in FLIPS}


def test_wsl2_profile_shows_a_device_alias() -> None:
    out, _ = run_on_fake("host_get_device_pointer", DeviceProfile().replace(
        can_use_host_pointer_for_registered_mem=False))
    assert out.observation == {"code": 0, "alias": "alias"}
    out, _ = run_on_fake("pointer_attributes_interior", DeviceProfile().replace(
        can_use_host_pointer_for_registered_mem=False))
    assert out.observation["alias"] == "alias"


def test_a_probe_that_raises_is_an_error_and_still_cleans_up() -> None:
    fake = FakeCuda()
    fake.inject("cudaMalloc", raise_=RuntimeError("boom"))
    out = run_probe(get_probe("copy_across_batch"), CudaProbeContext(fake))
    assert out.status == "error" and out.reason == "RuntimeError: boom"
    assert "traceback" in out.details
    assert fake.leak_report() == ""        # both registrations were undone


def test_a_failed_setup_step_is_a_probe_error_not_a_finding() -> None:
    fake = FakeCuda()
    fake.inject("cudaMalloc", error=2)
    out = run_probe(get_probe("batch_control"), CudaProbeContext(fake))
    assert out.status == "error" and "cudaMalloc" in out.reason


def test_big_probes_skip_on_hardware_without_the_memory(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(cuda_context, "available_memory", lambda: 16 << 30)
    fake = FakeCuda()
    real = RealCuda(runtime_module=fake.runtime._kvreg_target,
                    torch_module=fake.torch._kvreg_target, profile=fake.profile)
    out = run_probe(get_probe("per_call_ceiling"), CudaProbeContext(real))
    assert out.status == "skipped"
    assert out.reason == ("needs 512.0 GiB of free host memory to pin; this machine has "
                          "16.0 GiB available")
    # the fake itself runs it on a virtual buffer
    assert run_on_fake("per_call_ceiling")[0].observation == {"register": 2}


def test_torch_probes_skip_where_torch_has_no_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has a usable GPU here")
    fake = FakeCuda()
    real = RealCuda(runtime_module=fake.runtime._kvreg_target, profile=fake.profile)
    out = run_probe(get_probe("cross_runtime_visibility"), CudaProbeContext(real))
    assert out.status == "skipped" and "torch.cuda.cudart() is unavailable" in out.reason


@pytest.mark.parametrize("name", [p.name for p in all_probes("rdma")])
def test_rdma_probe_on_the_fake(name: str) -> None:
    backend = FakeVerbs()
    out = run_probe(get_probe(name), VerbsProbeContext(backend))
    if name == "mr_over_max_mr_size":
        assert out.status == "skipped" and "max_mr_size 18446744073709551615" in out.reason
        return
    assert out.status == "ok", out.reason
    assert out.observation == EXPECTED[name]
    assert backend.leak_report() == ""


def test_max_mr_size_is_probed_on_a_nic_that_enforces_it() -> None:
    backend = FakeVerbs("erdma", device="erdma_0", max_mr_size=1 << 20)
    out = run_probe(get_probe("mr_over_max_mr_size"), VerbsProbeContext(backend))
    assert out.observation == {"errno": 22}
    relaxed = FakeVerbs("mlx5", device="mlx5_0", max_mr_size=1 << 20)
    assert run_probe(get_probe("mr_over_max_mr_size"),
                     VerbsProbeContext(relaxed)).observation == {"errno": 0}


def test_compare_verdicts() -> None:
    ok = Outcome("ok", {"code": 1})
    assert compare(ok, Outcome("ok", {"code": 1})) == ("agree", "")
    assert compare(ok, Outcome("ok", {"code": 0})) == ("disagree", "code: fake 1, real 0")
    assert compare(ok, Outcome("not run", reason="no GPU")) == ("skipped",
                                                                "real not run: no GPU")
    assert compare(Outcome("error", reason="X: y"), ok) == ("error", "fake: X: y")
    assert compare(ok, Outcome("skipped", reason="small")) == ("skipped",
                                                               "real skipped: small")


def test_unknown_probe_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown probe"):
        all_probes(names=["register_same_page", "nope"])


def test_device_attributes_probe_records_the_whole_table() -> None:
    # the real-hardware tier records every cudaDeviceAttr value so the profile's table can be
    # checked (kvreg.fakes.cuda.device_attributes.attribute_mismatches); on the fake it matches
    from kvreg.fakes.cuda.device_attributes import attribute_mismatches, attribute_table

    out, fake = run_on_fake("device_attributes")
    table = out.details["attribute_table"]
    assert {int(k) for k in table} == set(attribute_table("H200"))
    assert attribute_mismatches(fake.profile, table) == []
    assert int(fake.runtime.cudaPeekAtLastError()[0]) == 0
