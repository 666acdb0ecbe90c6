"""``kvreg plan`` in MR mode: every plan judged against the effective MR limit.

docs/mooncake-verbs.md §6.2 (the effective limit: min of MC_MAX_MR_SIZE or 1 TiB and every
NIC's max_mr_size) and §1.6 (the released store rejects an MR above it with -600 and
registers nothing). A plan that ignores the limit (upstream's one call per buffer) must be
flagged in the text, the JSON count and the SVG's colour, in MR words; sizes are exact where
two decimals hide the difference.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from kvreg.harness.cli import main
from kvreg.harness.plan.chunking import plan_pool
from kvreg.harness.plan.sizes import size_text
from kvreg.harness.plan.svg import render_svg
from kvreg.harness.pools import make_geometry

GiB = 1 << 30
SVG_NS = "{http://www.w3.org/2000/svg}"
RED = "#d7301f"
# 80 layers of an 8-head MHA pool, 400 000 pages: one 429 GB buffer, above a 16 GiB NIC
MHA = ["mha", "layout=layer_first", "layer_num=80", "head_num=8", "head_dim=128",
       "dtype=bfloat16", "page_size=64", "page_num=400000"]
NIC = ["--device-max-mr", str(16 * GiB)]


def _geometry():  # type: ignore[no-untyped-def]
    params = {k: int(v) if v.isdigit() else v for k, v in (p.split("=") for p in MHA[1:])}
    return make_geometry(MHA[0], **params)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, dict[str, object]]:
    assert main(["plan", *args, "--json", "-"]) == 0
    captured = capsys.readouterr()
    return captured.err, json.loads(captured.out)


@pytest.mark.parametrize("limit_args", [NIC, ["--mc-max-mr-size", str(16 * GiB)],
                                        ["--mc-max-mr-size", "0", *NIC]])
def test_upstream_above_the_mr_limit_is_flagged(capsys: pytest.CaptureFixture[str],
                                                limit_args: list[str]) -> None:
    text, doc = _run(capsys, *MHA, *limit_args)
    assert doc["limit_kind"] == "mr" and doc["chunk_limit"] == 16 * GiB
    assert doc["per_call_ceiling"] is None          # a CUDA ceiling does not apply to MRs
    plans = {p["algorithm"]: p for p in doc["plans"]}  # type: ignore[attr-defined]
    big = [b for b in plans["upstream"]["buffers"] if b["nbytes"] > 16 * GiB]
    assert big and plans["upstream"]["over_limit"] == len(big)
    assert plans["reference"]["over_limit"] == 0 and plans["byte-offset"]["over_limit"] == 0
    lines = {ln.split()[0]: ln for ln in text.splitlines() if "MRs=" in ln
             and not ln.startswith(" ")}
    assert f"{len(big)} MR(s) above the effective MR limit 16 GiB" in lines["upstream"]
    assert "-600" in lines["upstream"] and not lines["upstream"].rstrip().endswith("OK")
    assert lines["reference"].rstrip().endswith("OK")
    # MR words throughout, no CUDA call words
    assert "calls=" not in text and "cudaHostRegister" not in text and "one call" not in text
    assert "effective MR limit 17179869184 (16 GiB)" in text.splitlines()[0]
    assert text.splitlines()[-1].startswith("legend: MRs = memory regions")


def test_cuda_mode_keeps_call_words_and_the_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    text, doc = _run(capsys, *MHA)
    assert doc["limit_kind"] == "chunk" and doc["per_call_ceiling"] == 512 * GiB
    assert "calls=" in text and "MRs=" not in text
    assert text.splitlines()[-1].startswith("legend: calls = cudaHostRegister calls")


def test_svg_colours_the_over_limit_plan_red_and_only_it() -> None:
    g = _geometry()
    plans = [plan_pool(g, 16 * GiB, a) for a in ("reference", "upstream")]
    root = ET.fromstring(render_svg(plans, mr=True))
    heads = [t for t in root.iter(f"{SVG_NS}text") if t.get("class") == "panel-head"]
    assert [t.get("fill") for t in heads] == ["#111", RED]
    assert heads[1].text is not None and "1 MR(s)" in heads[1].text \
        and "1 above the MR limit" in heads[1].text
    outlined = [r for r in root.iter(f"{SVG_NS}rect") if r.get("class") == "over-limit"]
    assert len(outlined) == plans[1].over_limit() == 1
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG_NS}text"))
    assert "MR limit 16 GiB" in texts and "call(s)" not in texts
    assert "MR above the MR limit (outline)" in texts          # the legend says what red is


def test_more_seams_count_is_the_same_rule_in_every_panel() -> None:
    """Every panel counts the seams it did not zoom the same way: all seams of its plan
    minus the zoomed ones (a clean panel used to count only its first 4 seams)."""
    g = make_geometry("mla", layout="page_first_direct", layer_num=61, kv_lora_rank=512,
                      qk_rope_head_dim=64, dtype="bfloat16", page_size=64, page_num=20000)
    plans = [plan_pool(g, GiB, a) for a in ("reference", "byte-offset")]
    root = ET.fromstring(render_svg(plans, max_zooms=2))
    notes = [t.text or "" for t in root.iter(f"{SVG_NS}text")
             if "more-seams" in (t.get("class") or "")]
    counts = [int(re.match(r"(\d+) more seam", n).group(1)) for n in notes]  # type: ignore
    assert counts == [sum(len(bp.plan.seams) for bp in p.buffers) - 2 for p in plans]
    assert counts[0] > 4


def test_sizes_are_exact_where_rounding_hides_the_difference() -> None:
    assert size_text(256 * GiB) == "256 GiB"
    # 256 GiB minus 827 392 bytes reads as 256.00 GiB: the bytes say it is not the limit
    assert size_text(256 * GiB - 827392) == "256.00 GiB (274877079552 bytes)"
    assert size_text(8_600_000) == "8.20 MiB (8600000 bytes)"
    assert size_text(4096) == "4 KiB" and size_text(100) == "100 B"


def test_text_shows_the_last_call_exactly(capsys: pytest.CaptureFixture[str]) -> None:
    text, _ = _run(capsys, *MHA, "--algorithm", "byte-offset", "--chunk-gb", "16")
    row = next(ln for ln in text.splitlines() if ln.startswith("    kv_buffer"))
    total = _geometry().buffers()[0].nbytes
    last = total % (16 * GiB) or 16 * GiB
    assert f"first=16 GiB last={size_text(last)}" in row and f"({last} bytes)" in row


@pytest.mark.parametrize("extra,needle", [
    (["--device-max-mr", "1024", "--chunk-gb", "1"], "cannot be combined with --chunk-gb"),
    (["--device-max-mr", "0"], "--device-max-mr"),
    (["--fastdeploy-clamp"], "--fastdeploy-clamp needs"),
])
def test_mr_mode_usage_errors(capsys: pytest.CaptureFixture[str], extra: list[str],
                              needle: str) -> None:
    try:
        code = main(["plan", *MHA, *extra])
    except SystemExit as exc:         # argparse's own refusal of a bad value
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
