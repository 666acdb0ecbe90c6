"""The throughput measurement as a smoke test on the fake (MiB units), and its plot.

No assertion here is about time: only the structure, the sizes and that nothing stays
registered. Real figures come from ``run_all`` on a GPU machine.
"""

from __future__ import annotations

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.realhw.measure import MiB, measure, plan_sizes, render_svg

GiB = 1 << 30


def test_plan_sizes_is_the_largest_power_of_two_that_fits() -> None:
    assert plan_sizes(GiB, available=200 * GiB) == 64
    assert plan_sizes(GiB, available=100 * GiB) == 64
    assert plan_sizes(GiB, available=60 * GiB) == 32
    assert plan_sizes(GiB, available=9 * GiB + 1) == 1
    assert plan_sizes(GiB, available=8 * GiB) == 0
    assert plan_sizes(GiB, max_units=4, available=1 << 50) == 4


def test_measure_the_fake_in_mib_units() -> None:
    fake = FakeCuda()
    result = measure(fake, unit=MiB, max_units=16, chunk_units=(1, 4, 16, 64), threads=(1, 3))
    assert result["backend"] == "fake" and "not hardware" in result["note"]
    assert result["total_bytes"] == 16 * MiB
    assert result["whole"]["calls"] == 1 and result["whole"]["code"] == 0
    assert result["reference"]["calls"] == 2 and result["reference"]["chunk_limit"] == 8 * MiB
    assert [c["chunk_bytes"] for c in result["chunks"]] == [MiB, 4 * MiB, 16 * MiB]
    assert [c["calls"] for c in result["chunks"]] == [16, 4, 1]
    assert [t["threads"] for t in result["threads"]] == [1, 3]
    assert all(r["gib_per_s"] > 0 for r in result["chunks"] + result["threads"])
    assert fake.leak_report() == ""
    # every register call was undone by an unregister of the same base
    registered = [a[0] for a, c in zip(fake.trace.args("cudaHostRegister"),
                                       fake.trace.codes("cudaHostRegister"), strict=True)
                  if c == 0]
    assert sorted(registered) == sorted(a[0] for a in fake.trace.args("cudaHostUnregister"))


def test_a_failed_registration_is_recorded_and_undone() -> None:
    fake = FakeCuda()
    fake.inject("cudaHostRegister", nth=4, error=2)   # warm-up 1, whole 2, reference 3, 4
    result = measure(fake, unit=MiB, max_units=8, chunk_units=(1,), threads=(1,))
    ref = result["reference"]
    assert ref["code"] == 2 and ref["gib_per_s"] is None
    assert result["reference_vs_whole"] is None
    assert fake.leak_report() == ""


def test_no_room_is_a_skip_with_a_reason() -> None:
    result = measure(FakeCuda(), unit=GiB, available=0)
    assert result["skipped"].startswith("not enough free host memory for one 1024 MiB unit")
    assert "not enough free host memory" in render_svg(result)


def test_svg_plots_each_chunk_size_and_both_references() -> None:
    svg = render_svg(measure(FakeCuda(), unit=MiB, max_units=8, chunk_units=(1, 2, 8),
                             threads=(1,)), title="fake <smoke>")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<circle") == 3
    assert "whole buffer" in svg and "reference" in svg and "fake &lt;smoke&gt;" in svg
