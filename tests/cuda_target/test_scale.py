"""Any pool size at the cost of its seams: validation of impossible sizes (exit 2, a sentence),
runs and plans of pools with billions of pages, and the plan drawing of seams and zooms.

Facts: a user address space is 2^47 bytes with 4-level paging and 2^57 with 5-level paging;
upstream indexes pages with int64 (size_limits.py); a 4 TiB pool of one-token pages is SGLang's
default page size at the scale of vllm #51080 (docs/pools.md §0, §1.1).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvreg.harness.cli import main
from kvreg.harness.plan.chunking import ALGORITHMS, plan_pool
from kvreg.harness.plan.svg import render_svg
from kvreg.harness.pools import MHAGeometry, make_geometry
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation
from kvreg.harness.scenario import ScenarioError, load_file
from kvreg.harness.scenario.size_limits import ADDRESS_LIMIT, size_problem

from ..helpers.kvreg_cli import run_json

SVG_NS = "{http://www.w3.org/2000/svg}"
POOL = '''format = 1
[pool]
type = "mha"
params = {{ layout = "{layout}", layer_num = 64, head_num = 8, head_dim = 128, \
dtype = "bfloat16", page_size = 1 }}
memory = "{memory}"
[[scenario]]
name = "{name}"
guards = "a pool of this size is judged by its seams, not its pages (vllm #51080 scale)"
{size}
chunk_gb = 1
backends = ["fake"]
'''


def _file(tmp_path: Path, *, layout: str = "layer_first", memory: str = "virtual",
          name: str = "big", size: str = "total_gib = 4096") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(POOL.format(layout=layout, memory=memory, name=name, size=size))
    return path


@pytest.mark.parametrize("size,needle", [
    ("total_gib = 1e12", "2^57-byte (128 PiB) user address space"),
    ("pages = 1099511627776", "2^57-byte (128 PiB) user address space"),
])
def test_a_pool_no_machine_can_map_is_invalid(tmp_path: Path, size: str, needle: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, size=size)
    with pytest.raises(ScenarioError, match=r"big.toml: scenario\[0\] \(big\): pool: expected "
                                            r"a pool this machine can hold"):
        load_file(path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_real_memory_above_the_cap_is_invalid_not_a_run_time_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, memory="real", size="pages = 4096")   # 1 GiB of real tensors
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert 'memory = "real" needs 1073741824 bytes' in err and 'use memory = "virtual"' in err
    assert "Traceback" not in err
    # the same pool in virtual memory is fine
    assert load_file(_file(tmp_path, name="virtual", size="pages = 4096"))


def test_size_problem_at_the_address_space_edge() -> None:
    per_page = 2 * 64 * 8 * 128 * 2
    fits = MHAGeometry("page_first", 64, 8, 128, "bfloat16", 1, ADDRESS_LIMIT // per_page)
    assert size_problem(fits) is None
    over = MHAGeometry("page_first", 64, 8, 128, "bfloat16", 1, ADDRESS_LIMIT // per_page + 1)
    problem = size_problem(over)
    assert problem is not None and "no machine can map it" in problem


def test_a_34_billion_page_pool_that_fits_runs_and_passes(tmp_path: Path) -> None:
    # 2^35 one-token pages of 128 B (one layer, one head of 32 bf16, K and V): 8 TiB
    path = tmp_path / "tiny_pages.toml"
    path.write_text(POOL.format(layout="page_first", memory="virtual", name="tiny",
                                size="pages = 34359738368")
                    .replace("layer_num = 64, head_num = 8, head_dim = 128",
                             "layer_num = 1, head_num = 1, head_dim = 32")
                    .replace("chunk_gb = 1", "chunk_gb = 256"))
    (sc,) = load_file(path)
    result = run_scenario(sc, Implementation("reference", "reference"))
    assert result.verdict == "pass", result.first_violation
    assert result.copy is not None
    assert result.copy["pages_total"] == 2 * 34359738368
    assert 0 < result.copy["pages_copied"] < 10_000


def test_one_token_pages_at_4tib_name_the_first_page_a_byte_offset_seam_cuts(
        tmp_path: Path, spec_of) -> None:
    # 61 layers: a one-token page is 61 * 4 KiB, which does not divide 1 GiB, so the
    # pre-#36798 byte-offset seams cut pages (docs/pools.md §1.1, §5.2). Rows are page-major (K
    # then V of page 0, then page 1, ...), and the V half starts just below 2 TiB, so the
    # first row that fails is V of page 0, as a walk over every page would report.
    path = _file(tmp_path, layout="page_first")
    path.write_text(path.read_text().replace("layer_num = 64", "layer_num = 61"))
    run = run_json(str(path), "--impl", spec_of("byte_offset_seams"))
    assert run.returncode == 1
    doc = run.doc
    (sc,) = doc["scenarios"]
    assert sc["verdict"] == "fail"
    page = 61 * 8 * 128 * 2
    assert sc["copy"]["pages_total"] == 2 * ((4096 << 30) // (2 * page))
    assert sc["copy"]["pages_copied"] < 50_000
    # the copy that fails first, then the end state: the first misaligned seam (1 GiB)
    assert [x["rule"] for x in sc["violations"]] == ["transfer-failed", "seams-aligned"]
    v = sc["violations"][0]
    assert sc["violations"][1]["message"].startswith(
        "a seam between two registrations of kv_buffer lies at offset 1073741824 ")
    v_half = (4096 << 30) // (2 * page) * page
    seam = -(-v_half // (1 << 30)) * (1 << 30)
    assert v_half < seam < v_half + page
    assert v["message"].startswith(f"page 0 of the V half of kv_buffer [{v_half}, "
                                   f"{v_half + page}) spans registrations at offset {seam}: "
                                   "cudaMemcpyBatchAsync returns 1 (invalid argument)")


def test_plan_cli_rejects_impossible_sizes_with_exit_2(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    base = ["plan", "mla", "layout=page_first", "layer_num=61", "kv_lora_rank=512",
            "qk_rope_head_dim=64", "dtype=bfloat16", "page_size=64"]
    assert main([*base, "page_num=1000000000000000"]) == 2
    err = capsys.readouterr().err
    assert "user address space" in err and "Traceback" not in err
    assert main([*base, "page_num=1e15"]) == 2
    assert "page_num must be a positive integer" in capsys.readouterr().err


def test_plan_of_a_billion_pages_with_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    svg = tmp_path / "plan.svg"
    assert main(["plan", "mla", "layout=page_first", "layer_num=61", "kv_lora_rank=512",
                 "qk_rope_head_dim=64", "dtype=bfloat16", "page_size=1",
                 "page_num=100000000", "--chunk-gb", "1", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "100000000 pages" in out
    root = ET.fromstring(svg.read_text())
    texts = [t.text or "" for t in root.iter(f"{SVG_NS}text")]
    # one panel per algorithm, side by side
    assert sum(t.startswith(f"{a}:") for t in texts for a in ALGORITHMS) == len(ALGORITHMS)
    notes = [t for t in texts if "seams drawn" in t]
    assert notes and all("every" in n for n in notes)          # 6,549 seams, not all drawn
    assert any("more seam(s) not zoomed" in t for t in texts)
    assert any(t.startswith("seams at 1 GiB") for t in texts)      # exact: a whole GiB
    lines = [ln for ln in root.iter(f"{SVG_NS}line") if ln.get("class") == "seam"]
    assert len(lines) < 3 * 2 * 400


def test_svg_has_a_legend_and_marks_every_straddling_page_of_a_small_plan() -> None:
    g = make_geometry("mha", layout="page_first", layer_num=61, head_num=8, head_dim=128,
                      dtype="bfloat16", page_size=64, page_num=800)
    plans = [plan_pool(g, 1 << 30, a) for a in ("reference", "byte-offset")]
    root = ET.fromstring(render_svg(plans))
    rects = root.findall(f"{SVG_NS}rect")
    straddles = [r for r in rects if r.get("class") == "straddle"]
    assert len(straddles) == plans[1].straddling_count == 11 and plans[0].straddling_count == 0
    legend = [t.text for t in root.iter(f"{SVG_NS}text")]
    assert "page extent that crosses a seam" in legend and "chunk seam" in legend
    assert int(root.get("width", "0")) > 2 * 700          # two panels side by side
