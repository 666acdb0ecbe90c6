"""Transfers that move bytes (scenarios/gpu_rdma/real_bytes.toml): device ranges hold sparse
pages, each page prefill writes carries a pattern and decode's copy is compared
(harness/gpu_rdma/data.py); a data path that loses bytes is kvreg's internal error."""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.device_bytes import SparseBytes
from kvreg.harness.gpu_rdma import data, world
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import bundled_root, load_file

ROOT = bundled_root()
CATALOG = {sc.id: sc for sc in load_file(ROOT / "gpu_rdma" / "real_bytes.toml", ROOT)}


@pytest.mark.parametrize("name", ["blocks-bytes", "interior-bytes", "expandable-dmabuf-bytes"])
def test_every_page_written_arrives_byte_for_byte(name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    counts: list[int] = []
    stores: list[SparseBytes] = []

    def spy(*args: Any) -> int:
        counts.append(data.compare_pages(*args))
        return counts[-1]

    real_init = SparseBytes.__init__

    def keep(self: SparseBytes, size: int) -> None:
        real_init(self, size)
        stores.append(self)

    monkeypatch.setattr(world, "compare_pages", spy)
    monkeypatch.setattr(SparseBytes, "__init__", keep)
    result = run_scenario(CATALOG[f"gpu_rdma/real_bytes/{name}"], make_implementation())
    assert result.verdict == "pass", [v.as_dict() for v in result.violations]
    assert result.copy and counts and counts[0] == result.copy["pages_copied"] > 0
    # TiB-scale thinking at small scale: only the pages written hold memory
    assert sum(s.resident for s in stores) < sum(s.size for s in stores) // 4


def test_a_data_path_that_drops_bytes_is_kvregs_internal_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreg.fakes.mooncake import engine_state

    monkeypatch.setattr(engine_state.memory, "copy", lambda *a, **k: True)   # moves nothing
    result = run_scenario(CATALOG["gpu_rdma/real_bytes/blocks-bytes"], make_implementation())
    assert result.verdict == "internal-error"
    assert "is not what prefill's k0 sent" in result.reason + result.tb, result.reason


def test_virtual_pools_keep_moving_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # memory = "virtual": no pattern written, nothing compared (today's behaviour)
    calls: list[int] = []
    monkeypatch.setattr(world, "fill_sources", lambda *a: calls.append(1))
    sc = load_file(ROOT / "gpu_rdma" / "dmabuf.toml", ROOT)[0]
    assert run_scenario(sc, make_implementation()).verdict == "pass" and calls == []
