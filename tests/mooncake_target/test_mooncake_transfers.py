"""The page I/O helpers behind the runner: seam units, keys and packing, which pages a
virtual pool sends, and that a wrong round trip is noticed (harness/mooncake/transfers.py)."""

from __future__ import annotations

import pytest

from kvreg.fakes.mooncake import FakeMooncake
from kvreg.harness.mooncake.transfers import (
    Batch,
    IoPlanError,
    PageObject,
    allocate_pool,
    mr_ranges,
    object_stride,
    pages_to_send,
    plan_io,
    store_round_trip,
)
from kvreg.harness.pools import make_geometry

MLA_LF = dict(layout="layer_first", layer_num=4, kv_lora_rank=64, qk_rope_head_dim=32,
              dtype="bfloat16", page_size=16)
FD = dict(num_layers=61, head_num=1, head_dim=128, dtype="bfloat16", page_size=4)


def test_object_stride_is_the_part_or_the_block() -> None:
    mla = make_geometry("mla", page_num=8, **MLA_LF)
    # one layer's rows of one page: 16 tokens x 96 x bf16; the slab would also be valid
    assert object_stride(mla.buffers()[0], mla.page_extents(), 0) == 3072
    fd = make_geometry("fastdeploy", page_num=8, **FD)
    assert object_stride(fd.buffers()[1], fd.page_extents(), 1) == 62464
    # no page meta: the buffer's copy unit
    assert object_stride(fd.buffers()[0], None, 0) == fd.buffers()[0].copy_unit


def test_sglang_keys_and_multi_buffer_packing() -> None:
    mla = make_geometry("mla", page_num=8, **MLA_LF)
    (batch,) = plan_io(mla, [0, 5])
    assert batch.multi and [o.key for o in batch.objects] == ["0__k", "5__k"]
    # one part per layer, each inside its layer slab
    assert [off for _, off, _ in batch.objects[1].src] == [5 * 3072 + i * 8 * 3072
                                                           for i in range(4)]
    mha = make_geometry("mha", layout="page_first", layer_num=2, head_num=1, head_dim=64,
                        dtype="bfloat16", page_size=16, page_num=4)
    (flat,) = plan_io(mha, [1])
    assert not flat.multi and [o.key for o in flat.objects] == ["1_0_k", "1_0_v"]
    with pytest.raises(IoPlanError, match="multi-buffer"):
        plan_io(mla, [0], io="flat")


def test_merged_group_call_normalises_flat_members() -> None:
    group = make_geometry("group", members=[
        {"pool_type": "mla", "page_num": 4, **MLA_LF},
        {"pool_type": "mha_k_only", "layout": "page_first", "layer_num": 2, "head_num": 1,
         "head_dim": 64, "dtype": "bfloat16", "page_size": 16, "page_num": 4}],
        roles=["kv", "index"])
    per_pool = plan_io(group, [2])
    assert [b.multi for b in per_pool] == [True, False]
    (merged,) = plan_io(group, [2], merged=True)
    assert merged.multi and len(merged.segments) == 2
    assert [o.key for o in merged.objects] == ["2_kv__k", "2_index_0_k"]
    assert len({o.key for o in merged.objects}) == len(merged.objects)


def test_fastdeploy_puts_from_write_and_gets_into_read() -> None:
    fd = make_geometry("fastdeploy", page_num=8, **FD)
    (batch,) = plan_io(fd, [3])
    names = [b.name for b in fd.buffers()]
    assert [o.key for o in batch.objects] == ["block3_k", "block3_v"]
    k = batch.objects[0]
    assert names[k.src[0][0]] == "write" and names[k.dst[0][0]] == "read"
    assert k.src[0][1:] == k.dst[0][1:] == (3 * 62464, 62464)
    assert batch.objects[1].src[0][1] == 8 * 62464 + 3 * 62464      # V half at total / 2


def test_virtual_pool_sends_the_pages_at_seams_and_gaps() -> None:
    fake = FakeMooncake("released", env={})
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", 0, 0, "rdma", "", "m") == 0
    fake.cluster("m").external_segments = True   # other nodes hold the objects (§7)
    fd = make_geometry("fastdeploy", page_num=100, **FD)
    bufs = allocate_pool(fake, "node0", fd, real=False, label_node=False)
    stride = 62464
    read, write = bufs
    # read: two MRs with a seam inside block 10 of the K half; write: a gap over block 50
    assert store.register_buffer(read.base, 10 * stride + 100) == 0
    assert store.register_buffer(read.base + 10 * stride + 100,
                                 read.nbytes - 10 * stride - 100) == 0
    assert store.register_buffer(write.base, 50 * stride) == 0
    assert store.register_buffer(write.base + 51 * stride, write.nbytes - 51 * stride) == 0
    pages = pages_to_send(fd, [bufs], [mr_ranges(fake, "node0")], real=False)
    assert pages.tolist() == [0, 10, 50, 99]
    assert pages_to_send(fd, [bufs], [mr_ranges(fake, "node0")], real=True).size == 100
    fake.close_all()


def test_round_trip_notices_stale_bytes() -> None:
    fake = FakeMooncake("released", env={})
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", 0, 0, "rdma", "", "m") == 0
    fake.cluster("m").external_segments = True   # other nodes hold the objects (§7)
    mla = make_geometry("mla", page_num=4, **MLA_LF)
    bufs = allocate_pool(fake, "node0", mla, real=True, label_node=False)
    assert store.register_buffer(bufs[0].base, bufs[0].nbytes) == 0
    assert store_round_trip(fake, store, "node0", mla, bufs, plan_io(mla, [0, 1, 2, 3])) \
        == (4, None)
    # a key already stored keeps its old bytes (put does not overwrite, §1.3): reusing it
    # for another page reads the old page back, which the byte comparison must notice
    first = PageObject("stale", 0, ((0, 0, 3072),), ((0, 0, 3072),))
    again = PageObject("stale", 1, ((0, 3072, 3072),), ((0, 3072, 3072),))
    assert store_round_trip(fake, store, "node0", mla, bufs, [Batch(((first,),), False)]) \
        == (1, None)
    done, failure = store_round_trip(fake, store, "node0", mla, bufs,
                                     [Batch(((again,),), False)])
    assert done == 1 and failure is not None and failure.rule == "round-trip-mismatch"
    assert failure.sentence.startswith(
        "page 1 (key 'stale') in layer 0 of kv_buffer [3072, 6144) came back different")
    fake.close_all()
