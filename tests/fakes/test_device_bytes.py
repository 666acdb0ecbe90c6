"""Bytes in fake device memory (fakes/device_bytes.py): sparse pages made on write, reached
through a node's address space by the data path (fakes/verbs/memory.py ``device``)."""

from __future__ import annotations

import numpy as np
import pytest

from kvreg.fakes.address_space import AddressSpace
from kvreg.fakes.device_bytes import PAGE, SparseBytes
from kvreg.fakes.verbs import memory

TiB = 1 << 40
DEV = 0x3000_0000_0000_0000


def test_a_tib_range_costs_only_the_pages_written() -> None:
    store = SparseBytes(4 * TiB)
    assert store.resident == 0 and store.read(3 * TiB, 16) == bytes(16)
    store.write(3 * TiB + PAGE - 3, b"abcdef")            # across a page seam: two pages
    assert store.resident == 2 * PAGE
    assert store.read(3 * TiB + PAGE - 4, 8) == b"\0abcdef\0"
    with pytest.raises(IndexError, match="outside"):
        store.write(4 * TiB - 2, b"xyz")


def test_transfers_move_bytes_between_device_and_host_memory() -> None:
    src, dst = AddressSpace(), AddressSpace()
    src.add_device(DEV, SparseBytes(64 << 20), "gpu0")
    dst.add_device(DEV, SparseBytes(64 << 20), "gpu0")
    host = np.zeros(4096, np.uint8)
    dst.track(host, name="aux")
    assert memory.classify(src, DEV + 100, 50) == "device"
    assert memory.classify(src, DEV + (64 << 20) - 1, 2) != "device"   # past the range
    assert memory.write(src, DEV + 40, b"kv-page") is True
    assert memory.copy(dst, DEV + 1000, src, DEV + 40, 7) is True       # device -> device
    assert memory.read(dst, DEV + 1000, 7) == b"kv-page"
    addr = host.__array_interface__["data"][0]
    assert memory.copy(dst, addr + 8, dst, DEV + 1000, 7) is True        # device -> host
    assert bytes(host[8:15]) == b"kv-page"
    host[100:104] = [1, 2, 3, 4]
    assert memory.copy(src, DEV, dst, addr + 100, 4) is True             # host -> device
    assert memory.read(src, DEV, 4) == b"\x01\x02\x03\x04"


def test_a_range_without_bytes_stays_virtual() -> None:
    # device memory recorded without a store keeps today's behaviour: checked, no bytes
    space = AddressSpace()
    base = space.reserve(1 << 30)
    assert memory.classify(space, base, 16) == "virtual"
    assert memory.copy(space, base, space, base + 64, 16) is False
    assert memory.read(space, base, 16) is None
