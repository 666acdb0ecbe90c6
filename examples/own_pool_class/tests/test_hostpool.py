"""The pool class itself at production size (2 TiB here, no RAM), judged by kvreg."""

import pytest
from hostpool import HostKVPool

from kvreg.harness.pools import MHAGeometry


@pytest.mark.parametrize("page_num", [100, 140_000])           # 1.5 GiB and 2 TiB
def test_pool_registers_every_byte_and_releases_it(kvreg_host_memory, kvreg_pool_check,
                                                   page_num):
    pool = HostKVPool(layer_num=61, head_num=8, head_dim=128, page_size=64, page_num=page_num)
    geometry = MHAGeometry("page_first", 61, 8, 128, "bfloat16", 64, page_num)
    check = kvreg_pool_check([pool.kv_buffer], geometry)
    check.assert_registered()     # every byte once, seams on pages, every page copies
    pool.destroy()
    check.assert_released()       # nothing left registered
