"""The fidelity run, its JSON and FIDELITY.md, the divergence list, and profile round trips.

A "machine" here is a FakeCuda with a non-default profile standing where the hardware
would: the report pipeline (differential run, settling, profile rerun, writer, loader) is
the same code that runs on a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import DeviceProfile
from kvreg.realhw.capabilities import Capabilities, detect
from kvreg.realhw.divergences import DIVERGENCES, explain
from kvreg.realhw.fidelity import merge_settled, run_fidelity
from kvreg.realhw.probes import Outcome, all_probes, get_probe, run_probe
from kvreg.realhw.probes_cuda import CudaProbeContext
from kvreg.realhw.report import (
    load_report,
    profile_from_report,
    render_markdown,
    validate_report,
    write_report,
)
from kvreg.realhw.verbs import FakeVerbs

MYSTERY = DeviceProfile(name="mystery").replace(
    overlap_granularity="page", copy_across_registrations="allow", unregister_null_code=713,
    host_get_flags_on_registered="flags", register_host_alloc_code=1,
    pointer_attributes_interior="base", unregistered_pointer_device=-1, per_call_limit=None,
    read_only_supported=True)
UNC_FIELDS = ("overlap_granularity", "copy_across_registrations", "unregister_null_code",
              "host_get_flags_on_registered", "register_host_alloc_code",
              "pointer_attributes_interior", "unregistered_pointer_device", "per_call_limit",
              "read_only_supported")
NO_GPU = Capabilities(cuda_bindings="13.5.0", device_count_code=35, driver_version=0,
                      hostname="box", arch="x86_64")


@pytest.fixture(scope="module")
def fake_only() -> dict[str, Any]:
    return run_fidelity(real_cuda=None, real_verbs=None, capabilities=NO_GPU)


@pytest.fixture(scope="module")
def mystery() -> dict[str, Any]:
    return run_fidelity(real_cuda=FakeCuda(MYSTERY), real_verbs=FakeVerbs("mlx5",
                                                                          device="mlx5_0"))


def test_fake_only_report_marks_every_real_cell_not_run(fake_only: dict[str, Any]) -> None:
    validate_report(fake_only)
    assert fake_only["real"]["cuda"] == {"ran": False, "reason": "not requested",
                                         "backend": None}
    rows = fake_only["probes"]
    assert [r["name"] for r in rows] == [p.name for p in all_probes()]
    assert all(r["verdict"] == "skipped" and r["real"]["status"] == "not run" for r in rows)
    assert fake_only["summary"]["skipped"] == len(rows) and fake_only["settled"] == {}
    assert json.loads(json.dumps(fake_only)) == fake_only   # JSON-ready as is


def test_auto_uses_the_missing_reason_of_this_machine() -> None:
    doc = run_fidelity(capabilities=NO_GPU, names=["unregister_null"], families=["cuda"])
    assert doc["real"]["cuda"]["reason"] == NO_GPU.missing_reason("gpu")
    (row,) = doc["probes"]
    assert row["real"] == {"status": "not run", "observation": {},
                           "reason": NO_GPU.missing_reason("gpu")}


def test_markdown_has_one_row_per_probe_and_the_divergences(fake_only: dict[str, Any]
                                                            ) -> None:
    md = render_markdown(fake_only)
    assert "| probe | fake | real | agree? | device | driver | date |" in md
    table = [line for line in md.splitlines() if line.startswith("| ")
             and line.split(" | ")[0][2:] in {p.name for p in all_probes()}]
    assert len(table) == 2 * len(all_probes())      # the probe table and the settles table
    row = next(line for line in md.splitlines() if line.startswith("| unregister_null |"))
    assert "| unregister=1 | not run: not requested | skipped | no GPU |" in row
    for d in DIVERGENCES:
        assert f"| {d.name} |" in md
    assert "Nothing settled" in md and "Not measured in this run (no GPU" in md


def test_a_machine_that_differs_is_settled_and_resolved_by_the_profile(
        mystery: dict[str, Any]) -> None:
    validate_report(mystery)
    s = mystery["summary"]
    assert s["unexplained"] == 0 and s["error"] == 0 and s["disagree"] > 0
    assert s["resolved_by_profile"] == s["disagree"]
    for name in UNC_FIELDS:
        assert mystery["settled"][name] == getattr(MYSTERY, name), name
    rows = {r["name"]: r for r in mystery["probes"]}
    assert rows["register_same_page"]["resolution"] == {
        "kind": "profile", "fields": {"overlap_granularity": "page"}}
    assert rows["register_null"]["verdict"] == "agree"
    # the RDMA rows compare a fake mlx5 with a fake mlx5: all agree
    assert {r["verdict"] for r in rows.values() if r["family"] == "rdma"} <= {"agree",
                                                                              "skipped"}
    md = render_markdown(mystery)
    assert "no — fixed by the settled profile (overlap_granularity='page')" in md


def test_profile_from_report_round_trip(mystery: dict[str, Any], tmp_path: Path) -> None:
    write_report(mystery, tmp_path)
    profile = profile_from_report(tmp_path / "fidelity.json")
    assert profile == profile_from_report(tmp_path)            # a directory works too
    for name in UNC_FIELDS:
        assert getattr(profile, name) == getattr(MYSTERY, name), name
    assert "settled by probe register_same_page" in profile.notes["overlap_granularity"]
    # a later fake run with that profile emulates the machine on every CUDA probe
    for probe in all_probes("cuda"):
        ours = run_probe(probe, CudaProbeContext(FakeCuda(profile)))
        theirs = run_probe(probe, CudaProbeContext(FakeCuda(MYSTERY)))
        assert ours.observation == theirs.observation, probe.name


def test_profile_from_a_fake_only_report_is_refused(fake_only: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="no real CUDA run \\(not requested\\)"):
        profile_from_report(fake_only)


def test_an_unexplained_disagreement_is_counted_and_named() -> None:
    machine = FakeCuda()
    machine.inject("cudaHostUnregister", nth=2, error=1)   # behaves unlike any profile
    doc = run_fidelity(real_cuda=machine, real_verbs=None, names=["unregister_twice"],
                       families=["cuda"])
    (row,) = doc["probes"]
    assert row["verdict"] == "disagree" and row["resolution"] is None
    assert row["why"] == "second: fake 713, real 1"
    assert doc["summary"]["unexplained"] == 1
    assert "**no — unexplained** (second: fake 713, real 1)" in render_markdown(doc)


def test_write_report_writes_json_markdown_and_svg(fake_only: dict[str, Any],
                                                   tmp_path: Path) -> None:
    doc = dict(fake_only, measurement={"backend": "real", "unit_bytes": 1 << 30,
                                       "note": "hardware", "skipped": "no room"})
    paths = write_report(doc, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == ["FIDELITY.md", "fidelity.json",
                                                      "throughput.svg"]
    assert load_report(paths["json"])["summary"] == fake_only["summary"]
    assert "no room" in paths["svg"].read_text()


def test_a_measurement_of_the_fake_is_never_plotted(fake_only: dict[str, Any],
                                                    tmp_path: Path) -> None:
    doc = dict(fake_only, measurement={"backend": "fake", "unit_bytes": 1 << 20,
                                       "note": "smoke", "skipped": "no room"})
    paths = write_report(doc, tmp_path / "out")
    assert "svg" not in paths and not (tmp_path / "out" / "throughput.svg").exists()
    assert "Not a hardware measurement" in paths["markdown"].read_text()


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.pop("probes"), "'probes' must be a list"),
    (lambda d: d["real"]["cuda"].pop("ran"), "real.cuda.ran must be a bool"),
    (lambda d: d["probes"][0].update(verdict="maybe"), "verdict 'maybe' is not one of"),
    (lambda d: d["probes"][0]["real"].update(status="?"), "real.status is '?'"),
    (lambda d: d["probes"][0].pop("spec"), "has no 'spec'"),
    (lambda d: d["summary"].update(skipped=0), "summary.skipped is 0"),
])
def test_validate_report_names_the_problem(fake_only: dict[str, Any], mutate: Any,
                                           message: str) -> None:
    doc = json.loads(json.dumps(fake_only))
    mutate(doc)
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace("?", "\\?")):
        validate_report(doc)


def test_divergences_are_documented_and_explain_only_their_case() -> None:
    names = [d.name for d in DIVERGENCES]
    assert len(names) == len(set(names))
    probe_names = {p.name for p in all_probes()}
    for d in DIVERGENCES:
        assert d.reason and d.spec and (d.probe is None or d.probe in probe_names), d.name
    root = Outcome("ok", {"errno": 0}, {"cap_ipc_lock": True, "euid": 0})
    user = Outcome("ok", {"errno": 0}, {"cap_ipc_lock": False, "euid": 1000})
    fake = Outcome("ok", {"errno": 12})
    found = explain("mr_memlock", {"errno"}, {"fake": fake, "real": root})
    assert found is not None and found.name == "verbs-memlock-privileged"
    assert explain("mr_memlock", {"errno"}, {"fake": fake, "real": user}) is None
    arm = Capabilities(arch="aarch64")
    assert explain("pointer_attributes_malloc", {"dev"}, {"capabilities": arm}) is not None
    assert explain("pointer_attributes_malloc", {"dev", "type"}, {"capabilities": arm}) is None
    assert explain("pointer_attributes_malloc", {"dev"},
                   {"capabilities": Capabilities(arch="x86_64")}) is None
    split = {"copy_across_async": {"copy_across_registrations": "allow"},
             "copy_across_batch": {"copy_across_registrations": "reject"}}
    assert explain("copy_across_async", {"copy"}, {"settled": split}) is not None


def test_merge_settled_prefers_the_behavioural_probe() -> None:
    merged, conflicts = merge_settled({
        "copy_across_async": {"copy_across_registrations": "allow"},
        "copy_across_batch": {"copy_across_registrations": "reject"},
        "device_attributes": {"read_only_supported": False},
        "register_read_only": {"read_only_supported": True},
    })
    assert merged == {"copy_across_registrations": "reject", "read_only_supported": True}
    assert len(conflicts) == 2


def test_the_fake_column_uses_the_machines_measured_facts() -> None:
    machine = FakeCuda(DeviceProfile().replace(can_use_host_pointer_for_registered_mem=False))
    caps = detect(machine.runtime, rdma=False, torch=False)
    doc = run_fidelity(real_cuda=machine, real_verbs=None, capabilities=caps,
                       names=["host_get_device_pointer"], families=["cuda"])
    assert doc["fake_profile"]["can_use_host_pointer_for_registered_mem"] is False
    assert doc["probes"][0]["verdict"] == "agree"
    assert get_probe("host_get_device_pointer").fields == ()
