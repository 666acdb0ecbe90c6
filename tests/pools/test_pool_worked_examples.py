"""The worked 256 GiB granularity examples of docs/pools.md §2.10."""

from __future__ import annotations

import numpy as np
import pytest

from kvreg.harness.pools import DSAIndexerGeometry, MHAGeometry, MLAGeometry, PoolGeometry

LIM = 256 * 2**30  # docs/pools.md §2.10: LIM = 256 GiB = 274,877,906,944 B
assert LIM == 274_877_906_944

CASES = [
    # (geometry, G, floor(LIM/G), chunk) exactly as listed in docs/pools.md §2.10
    (MLAGeometry("page_first", 61, 512, 64, "bf16", 64, 1), 4_497_408, 61_119, 274_877_079_552),
    (MHAGeometry("page_first", 80, 1, 128, "bf16", 64, 1), 1_310_720, 209_715, 274_877_644_800),
    (DSAIndexerGeometry("page_first", 61, 128, 128, 64, 1), 515_328, 533_403, 274_877_501_184),
]


@pytest.mark.parametrize(("geo", "g", "pages", "chunk"), CASES, ids=["mla", "mha", "dsa"])
def test_worked_granularity_and_chunk(geo: PoolGeometry, g: int, pages: int, chunk: int) -> None:
    (buf,) = geo.buffers()
    assert buf.granularity == g
    assert LIM // g == pages
    assert (LIM // g) * g == chunk


def test_mla_chunk_is_827392_bytes_short_of_lim() -> None:
    # docs/pools.md §2.10: the DeepSeek-V3 chunk is 827,392 B short of LIM.
    g = CASES[0][0].buffers()[0].granularity
    assert g is not None
    assert LIM - (LIM // g) * g == 827_392


def test_dsa_token_bytes_132() -> None:
    # docs/pools.md §2.5: 128 + (128 // 128) * 4 = 132 B per token per layer.
    assert DSAIndexerGeometry("page_first", 61, 128, 128, 64, 1).token_bytes == 132


def test_pages_past_the_first_256gib_chunk_stay_inside_one_chunk() -> None:
    # docs/pools.md §2.1/§2.4: with chunk = floor(LIM/G)*G no page straddles a chunk seam. A pool of
    # ~2.2 chunks (the GLM-5.2 512 GB case crashed past 256 GiB, §5.2) is checked page by page.
    geo = MLAGeometry("page_first_direct", 61, 512, 64, "bf16", 64, 134_000)
    (buf,) = geo.buffers()
    assert buf.granularity is not None and buf.nbytes > 2 * LIM
    chunk = (LIM // buf.granularity) * buf.granularity
    ext = geo.page_extents()
    assert np.array_equal(ext.offset // chunk, (ext.end - 1) // chunk)
    # The raw LIM seam would cut a page: the bug chunked registration must avoid.
    assert np.any(ext.offset // LIM != (ext.end - 1) // LIM)
