"""The real-hardware tier itself: these run under ``tox -e gpu-real`` / ``tox -e rdma-real``.

Here (no driver, no RDMA device) they skip with the reason the plugin gives — "no NVIDIA
driver (cudaGetDeviceCount returned 35 ...)" — and ``--kvreg-require-hw`` turns that skip
into a failure. On a GPU machine they run the probes against the hardware and demand that
every disagreement is explained and that the driver is left with nothing pinned.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.harness.cuda import reference

GiB, MiB = 1 << 30, 1 << 20


@pytest.mark.kvreg_gpu
def test_every_cuda_probe_agrees_or_is_explained(tmp_path: Path) -> None:
    from kvreg.realhw.fidelity import run_fidelity
    from kvreg.realhw.report import profile_from_report, write_report

    doc = run_fidelity(real_verbs=None, families=["cuda"])
    write_report(doc, tmp_path)
    assert doc["real"]["cuda"]["ran"]
    bad = [(r["name"], r["why"]) for r in doc["probes"]
           if r["verdict"] == "error" or (r["verdict"] == "disagree" and not r["resolution"])]
    assert bad == []
    profile_from_report(tmp_path)          # a real report always yields a profile


@pytest.mark.kvreg_gpu
def test_an_injected_fault_leaves_the_real_driver_clean() -> None:
    from kvreg.realhw.backend import RealCuda

    real = RealCuda()
    buf = real.buffer(64 * MiB, name="pool")
    real.inject("cudaHostRegister", nth=3, error=2)
    with pytest.raises(reference.RegistrationError):
        reference.register(real.runtime, int(buf.ctypes.data), buf.nbytes, granularity=4096,
                           chunk_limit=16 * MiB)
    assert real.live_registrations() == []
    # ask the driver itself: every chunk base is unknown to it (713), i.e. unpinned
    rt = real.runtime_module
    for off in range(0, buf.nbytes, 16 * MiB):
        assert int(rt.cudaHostUnregister(int(buf.ctypes.data) + off)[0]) == 713
    rt.cudaGetLastError()


@pytest.mark.kvreg_gpu
def test_measurement_runs_on_one_gib() -> None:
    from kvreg.realhw.backend import RealCuda
    from kvreg.realhw.measure import measure

    real = RealCuda()
    result = measure(real, unit=GiB, max_units=1, chunk_units=(1,), threads=(1, 2))
    assert result["backend"] == "real" and result["whole"]["code"] == 0
    assert real.live_registrations() == []


@pytest.mark.kvreg_rdma
def test_every_rdma_probe_agrees_or_is_explained() -> None:
    from kvreg.realhw.fidelity import run_fidelity

    doc = run_fidelity(real_cuda=None, families=["rdma"])
    assert doc["real"]["rdma"]["ran"]
    bad = [(r["name"], r["why"]) for r in doc["probes"]
           if r["verdict"] == "error" or (r["verdict"] == "disagree" and not r["resolution"])]
    assert bad == []


def test_hardware_tests_skip_here_with_the_missing_reason(pytester: pytest.Pytester) -> None:
    from kvreg.realhw.capabilities import detect

    caps = detect(torch=False)
    gpu, rdma = caps.missing_reason("gpu"), caps.missing_reason("rdma")
    if gpu is None or rdma is None:
        pytest.skip("this machine has the hardware: the tier runs instead of skipping")
    pytester.copy_example(str(Path(__file__)))
    result = pytester.runpytest("-m", "kvreg_gpu or kvreg_rdma", "-rs", "-p",
                                "no:cacheprovider")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*kvreg_gpu: no*", "*kvreg_rdma: *"])
    strict = pytester.runpytest("-m", "kvreg_gpu", "--kvreg-require-hw", "-p",
                                "no:cacheprovider")
    strict.assert_outcomes(failed=3)
    strict.stdout.fnmatch_lines(["*--kvreg-require-hw is set*"])
