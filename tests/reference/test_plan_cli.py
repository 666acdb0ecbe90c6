"""``kvreg plan``: text, JSON, SVG, and bad input (exit 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvreg.harness.cli import main
from kvreg.harness.plan.chunking import plan_pool
from kvreg.harness.plan.svg import render_svg
from kvreg.harness.pools import make_geometry

MLA = ["mla", "layout=page_first_direct", "layer_num=61", "kv_lora_rank=512",
       "qk_rope_head_dim=64", "dtype=bfloat16", "page_size=64", "page_num=2000"]
SVG_NS = "{http://www.w3.org/2000/svg}"


def test_plan_text_compares_the_three_algorithms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *MLA, "--chunk-gb", "1"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if "calls=" in line
             and not line.startswith(" ")}
    assert "OK" in lines["reference"] and "OK" in lines["upstream"]
    assert "straddle a seam, first: page 238" in lines["byte-offset"]


def test_plan_flags_the_per_call_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "mha", "layout=layer_first", "layer_num=80", "head_num=8", "head_dim=128",
            "dtype=bfloat16", "page_size=64", "page_num=40000"]
    assert main(args) == 0
    out = capsys.readouterr().out
    upstream = next(ln for ln in out.splitlines() if ln.startswith("upstream"))
    assert "1 call(s) at or above the 512 GiB per-call ceiling" in upstream
    reference = next(ln for ln in out.splitlines() if ln.startswith("reference"))
    assert reference.rstrip().endswith("OK")


def test_plan_json(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    assert main(["plan", *MLA, "--chunk-gb", "1", "--algorithm", "byte-offset",
                 "--json", str(target)]) == 0
    doc = json.loads(target.read_text())
    (plan,) = doc["plans"]
    assert plan["algorithm"] == "byte-offset" and plan["straddling_extents"] == 8
    first = plan["buffers"][0]["first_straddles"][0]
    assert first["page"] == 238
    assert first["offset"] < first["seam"] < first["offset"] + first["size"]
    assert doc["geometry"]["pool_type"] == "mla"


def test_plan_mooncake_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "fastdeploy", "num_layers=61", "head_num=8", "head_dim=128",
                 "dtype=bfloat16", "page_size=64", "page_num=2000",
                 "--mc-max-mr-size", "0", "--fastdeploy-clamp", "--algorithm", "byte-offset"]) == 0
    out = capsys.readouterr().out
    # FastDeploy's default 4 GiB (docs/mooncake-verbs.md §2.1)
    assert "effective MR limit 4294967296 (4 GiB)" in out


def test_svg_draws_every_straddling_page_and_seam() -> None:
    g = make_geometry("mha", layout="page_first", layer_num=61, head_num=8, head_dim=128,
                      dtype="bfloat16", page_size=64, page_num=800)
    plan = plan_pool(g, 1 << 30, "byte-offset")
    root = ET.fromstring(render_svg(plan))
    rects = root.findall(f"{SVG_NS}rect")
    straddles = [r for r in rects if r.get("class") == "straddle"]
    assert len(straddles) == plan.straddling_count == 11
    seams = [ln for ln in root.findall(f"{SVG_NS}line") if ln.get("class") == "seam"]
    assert len(seams) >= len(plan.buffers[0].plan.seams)
    regions = [r.find(f"{SVG_NS}title").text for r in rects if r.get("class") == "region"]
    assert regions == ["K half", "V half"]
    zoom_red = [r for r in rects if r.get("class") == "zoom-page" and r.get("fill") == "#d7301f"]
    assert zoom_red  # the zoomed views highlight the straddling pages


def test_svg_of_a_clean_plan_has_no_red(tmp_path: Path) -> None:
    target = tmp_path / "p.svg"
    assert main(["plan", *MLA, "--chunk-gb", "1", "--algorithm", "reference",
                 "--svg", str(target)]) == 0
    root = ET.fromstring(target.read_text())
    assert not [r for r in root.iter(f"{SVG_NS}rect") if r.get("class") == "straddle"]


@pytest.mark.parametrize("argv,needle", [
    (["plan", "mha", "layout=page_first"], "missing parameter"),
    (["plan", "mha", *MLA[1:]], "unknown parameter"),
    (["plan", "mla", "layout=diagonal", *MLA[2:]], "layout"),
    (["plan", *MLA, "oops"], "is not KEY=VALUE"),
    (["plan", *MLA, "--limit-bytes", "100"], "no seam unit fits the chunk limit 100"),
])
def test_bad_input_exits_2_with_a_message(argv: list[str], needle: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_console_script_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "kvreg.harness.cli", "plan", *MLA,
                          "--chunk-gb", "1", "--algorithm", "reference"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[1].startswith("reference")
