"""The bundled Mooncake catalog passes with kvreg's reference, and each scenario is what it
says: a Mooncake target, a one-line guard with a reference, runnable by the CLI."""

from __future__ import annotations

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import Scenario, bundled_root, load_file

from ..helpers.kvreg_cli import run_json

ROOT = bundled_root()
REGRESSIONS = sorted((ROOT / "regressions").glob("mooncake_*.toml"))


def mooncake_catalog() -> list[Scenario]:
    """Ids relative to the bundled root: mooncake/<file>/<name>, regressions/<file>/<name>."""
    files = [*sorted((ROOT / "mooncake").glob("*.toml")), *REGRESSIONS]
    return [sc for f in files for sc in load_file(f, ROOT)]


CATALOG = mooncake_catalog()


def test_catalog_covers_the_issue() -> None:
    # issue 6: FastDeploy chunking, layer_first multi-buffer pools, hybrid groups, packing
    # edge cases and PD transfers, in both profiles; regressions for the four upstream bugs
    ids = {sc.id for sc in CATALOG}
    assert len(CATALOG) >= 50
    for folder in ("mooncake/fastdeploy_register_buffer", "mooncake/fastdeploy_mr_limit",
                   "mooncake/sglang_mla_layer_first", "mooncake/hybrid_group",
                   "mooncake/multi_buffer_packing", "mooncake/pd_transfer"):
        assert any(i.startswith(folder + "/") for i in ids), folder
    assert {p.stem for p in REGRESSIONS} >= {
        "mooncake_fastdeploy_unaligned_seams", "mooncake_fastdeploy_no_rollback",
        "mooncake_multi_buffer_packing", "mooncake_sglang_whole_pool_register"}
    assert {sc.options.get("profile", "released") for sc in CATALOG} == {"released", "head"}
    assert any(sc.options.get("pd") for sc in CATALOG)
    assert any(sc.pool_type == "group" for sc in CATALOG)


@pytest.mark.parametrize("sc", CATALOG, ids=lambda sc: sc.id)
def test_scenario_is_well_formed(sc: Scenario) -> None:
    assert sc.target == "mooncake"
    assert "\n" not in sc.guards and "(" in sc.guards, "guards names its upstream reference"
    # real memory only for small pools; big pools stay virtual
    if sc.memory == "real":
        assert sc.geometry().total_nbytes <= 16 << 20


@pytest.mark.parametrize("sc", CATALOG, ids=lambda sc: sc.id)
def test_reference_passes(sc: Scenario) -> None:
    result = run_scenario(sc, make_implementation())
    assert result.verdict == "pass", (result.first_violation, result.trace_text)
    assert result.calls > 0


def test_cli_runs_the_catalog_with_the_reference() -> None:
    run = run_json(str(ROOT / "mooncake"), *map(str, REGRESSIONS), to_file=True)
    assert run.returncode == 0, run.stdout
    doc = run.doc
    assert doc["summary"]["total"] == len(CATALOG) == doc["summary"]["passed"]
    assert {s["verdict"] for s in doc["scenarios"]} == {"pass"}
