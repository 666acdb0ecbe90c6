"""``kvreg fidelity`` and ``python -m kvreg.realhw.run_all`` end to end, on this machine.

Without hardware the real column must read "not run: <what is missing>" and both files must
still be written, so the report format is exercised wherever the suite runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvreg.harness.cli import main
from kvreg.realhw import run_all
from kvreg.realhw.capabilities import detect
from kvreg.realhw.probes import all_probes
from kvreg.realhw.report import load_report

CAPS = detect(torch=False)
GPU_MISSING = CAPS.missing_reason("gpu")


def test_kvreg_fidelity_end_to_end(tmp_path: Path) -> None:
    # the installed entry point, in a fresh process, exactly as a user runs it
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "kvreg.harness.cli", "fidelity", "--out",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "kvreg fidelity: 38 probes" in proc.stdout
    doc = load_report(out / "fidelity.json")
    assert {p.name for p in all_probes()} == {r["name"] for r in doc["probes"]}
    md = (out / "FIDELITY.md").read_text()
    assert md.startswith("# kvreg fidelity report")
    if GPU_MISSING is not None:
        assert doc["real"]["cuda"] == {"ran": False, "reason": GPU_MISSING, "backend": None}
        assert f"not run: {GPU_MISSING}" in md
        assert f"real cuda: not run: {GPU_MISSING}" in proc.stdout
        # no GPU: nothing that could pass for a hardware figure is measured or plotted
        assert doc["measurement"] is None
        assert not (out / "throughput.svg").exists()
        assert "throughput: not measured: no GPU in this run" in proc.stdout
        assert "never reports the fake's own speed" in md
    else:
        assert (out / "throughput.svg").read_text().startswith("<svg")


@pytest.mark.skipif(GPU_MISSING is None, reason="this machine has a usable GPU")
def test_measure_fake_is_labelled_and_never_plotted(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fidelity", "--out", str(tmp_path), "--family", "cuda", "--probe",
                 "unregister_null", "--measure-fake"]) == 0
    doc = load_report(tmp_path)
    assert doc["measurement"]["backend"] == "fake"
    assert not (tmp_path / "throughput.svg").exists()
    assert "**Not a hardware measurement**" in (tmp_path / "FIDELITY.md").read_text()
    assert "smoke test only; not a hardware figure" in capsys.readouterr().out


def test_fidelity_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fidelity", "--out", str(tmp_path), "--fake-only", "--no-measure",
                 "--family", "cuda", "--probe", "register_same_page", "--probe",
                 "unregister_null"]) == 0
    doc = load_report(tmp_path)
    assert [r["name"] for r in doc["probes"]] == ["register_same_page", "unregister_null"]
    assert doc["measurement"] is None and doc["real"]["cuda"]["reason"] == "not requested"
    capsys.readouterr()
    assert main(["fidelity", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [p.name for p in all_probes()]
    assert main(["fidelity", "--out", str(tmp_path), "--probe", "nope"]) == 2
    assert "unknown probe(s): nope" in capsys.readouterr().err


@pytest.mark.skipif(GPU_MISSING is None, reason="this machine has a usable GPU")
def test_require_hw_fails_without_a_gpu(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fidelity", "--out", str(tmp_path / "x"), "--require-hw"]) == 3
    assert f"{GPU_MISSING} (--require-hw is set)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_run_all_writes_capabilities_too(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert run_all.main(["--out", str(tmp_path), "--fake-only", "--no-measure",
                         "--family", "rdma"]) == 0
    caps = json.loads((tmp_path / "capabilities.json").read_text())
    assert caps["device_count_code"] == CAPS.device_count_code
    printed = capsys.readouterr().out
    assert printed.startswith("machine: ") and "  gpu: " in printed
    assert (tmp_path / "FIDELITY.md").exists() and (tmp_path / "fidelity.json").exists()
