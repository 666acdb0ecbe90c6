"""Slices and MR seams: released vs head (docs/mooncake-verbs.md §1.3, §1.7, §6.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.fakes.mooncake import ErrorCode, FakeMooncake, get_store_profile
from kvreg.fakes.mooncake.transfer_engine import store_slices, te_slices

TRANSFER_FAIL = int(ErrorCode.TRANSFER_FAIL)
KiB, MiB = 1 << 10, 1 << 20
RELEASED = get_store_profile("released")

Mk = Callable[..., tuple[FakeMooncake, Any]]
Buf = Callable[..., Any]


def test_te_slices_of_64k_with_tail_absorption() -> None:
    # §1.7: MC_SLICE_SIZE slices from the request's start; the last absorbs a tail of up
    # to fragment_limit (16384) bytes
    assert te_slices(0, 200 * KiB, RELEASED) == [(0, 64 * KiB), (64 * KiB, 64 * KiB),
                                                 (128 * KiB, 72 * KiB)]
    assert te_slices(0, 128 * KiB + 16384, RELEASED)[-1] == (64 * KiB, 64 * KiB + 16384)
    assert te_slices(0, 128 * KiB + 16385, RELEASED)[-1] == (128 * KiB, 16385)
    exclusive = RELEASED.replace(tail_absorb_inclusive=False)      # the [uncertain] switch
    assert te_slices(0, 128 * KiB + 16384, exclusive)[-1] == (128 * KiB, 16384)
    assert te_slices(100, 1000, RELEASED) == [(100, 1000)]
    assert te_slices(0, 0, RELEASED) == []


def test_store_slices_are_16mib_minus_16() -> None:
    # §1.3: kMaxSliceSize = 16 MiB - 16
    assert store_slices(0, 40 * MiB, RELEASED) == [
        (0, 16 * MiB - 16), (16 * MiB - 16, 16 * MiB - 16), (32 * MiB - 32, 8 * MiB + 32)]


def _two_chunks(mk: Mk, buf: Buf, profile: str, chunk: int = MiB) -> tuple[FakeMooncake, Any,
                                                                            Any, Any]:
    fake, store = mk(profile)
    src, dst = buf(fake, 2 * chunk, fill=3), buf(fake, 2 * chunk)
    p = src.ctypes.data
    assert store.register_buffer(p, chunk) == 0
    assert store.register_buffer(p + chunk, chunk) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    return fake, store, src, dst


def test_released_straddling_slice_fails_with_transfer_fail(mk: Mk, buf: Buf) -> None:
    # §1.7 / §6.1: a slice straddling two registrations finds no buffer -> TRANSFER_FAIL
    fake, store, src, _ = _two_chunks(mk, buf, "released")
    page = src.ctypes.data + MiB - 4096                 # a 8 KiB page across the seam
    assert store.put_from("page", page, 8192) == TRANSFER_FAIL
    assert store.is_exist("page") == 0
    assert store.put_from("inside", src.ctypes.data + MiB, 8192) == 0
    fake.close_all()


def test_released_seam_on_a_slice_boundary_is_fine(mk: Mk, buf: Buf) -> None:
    # §1.7: slices start at the request's address, so a seam exactly on a 64 KiB slice
    # boundary of the request is not straddled
    fake, store, src, dst = _two_chunks(mk, buf, "released")
    start = src.ctypes.data + MiB - 64 * KiB
    assert store.put_from("ok", start, 128 * KiB) == 0
    assert store.get_into("ok", dst.ctypes.data, 128 * KiB) == 128 * KiB
    assert np.array_equal(dst[:128 * KiB], src[MiB - 64 * KiB:MiB + 64 * KiB])
    assert store.put_from("bad", start + 1, 128 * KiB) == TRANSFER_FAIL
    fake.close_all()


def test_head_splits_slices_at_seams(mk: Mk, buf: Buf) -> None:
    # §1.7: HEAD (#3198) splits slices at MR boundaries, so straddling is legal
    fake, store, src, dst = _two_chunks(mk, buf, "head")
    page = src.ctypes.data + MiB - 4096
    assert store.put_from("page", page, 8192) == 0
    assert store.get_into("page", dst.ctypes.data, 8192) == 8192
    assert np.array_equal(dst[:8192], src[MiB - 4096:MiB + 4096])
    fake.close_all()


def test_get_into_a_straddling_destination(mk: Mk, buf: Buf) -> None:
    # §1.7: the local side of a get has the same rule
    for profile, want in (("released", TRANSFER_FAIL), ("head", 8192)):
        fake, store = mk(profile)
        whole = buf(fake, 2 * MiB, fill=1)
        src = buf(fake, 8192, fill=2)
        store.register_buffer(src.ctypes.data, 8192)
        store.register_buffer(whole.ctypes.data, MiB)
        store.register_buffer(whole.ctypes.data + MiB, MiB)
        store.put_from("k", src.ctypes.data, 8192)
        assert store.get_into("k", whole.ctypes.data + MiB - 4096, 8192) == want, profile
        fake.close_all()


def test_mc_slice_size_env(mk: Mk, buf: Buf) -> None:
    # §1.8: MC_SLICE_SIZE moves the slice boundaries
    fake, store = mk(env={"MC_SLICE_SIZE": str(4096)})
    src = buf(fake, 2 * MiB, fill=1)
    store.register_buffer(src.ctypes.data, MiB)
    store.register_buffer(src.ctypes.data + MiB, MiB)
    # 64 KiB at MiB - 32 KiB: with 4 KiB slices the seam falls on a slice boundary
    assert store.put_from("k", src.ctypes.data + MiB - 32 * KiB, 64 * KiB) == 0
    fake.close_all()


@given(offset=st.integers(0, 3 * 64 * KiB), length=st.integers(1, 300 * KiB))
def test_released_put_succeeds_iff_no_te_slice_crosses_the_seam(offset: int,
                                                                length: int) -> None:
    # §1.7 as a property: against a model computed from the slice rule alone
    chunk = 256 * KiB
    fake = FakeMooncake("released", env={})
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", 0, 0, "rdma", "", "m") == 0
    fake.cluster("m").external_segments = True   # other nodes hold the objects (§7)
    pool = fake.virtual(4 * chunk)
    p = pool.data_ptr()
    for i in range(4):
        assert store.register_buffer(p + i * chunk, chunk) == 0
    start = p + offset
    expected_ok = all((a - p) // chunk == (a + n - 1 - p) // chunk
                      for a, n in te_slices(start, length, RELEASED))
    rc = store.put_from("k", start, length)
    assert rc == (0 if expected_ok else TRANSFER_FAIL)
    fake.close_all()


@pytest.mark.parametrize("profile", ["released", "head"])
def test_partly_unregistered_source_fails_in_both(mk: Mk, buf: Buf, profile: str) -> None:
    # §1.3: unregistered memory on the RDMA path -> TRANSFER_FAIL, whatever the profile
    fake, store = mk(profile)
    src = buf(fake, 2 * MiB, fill=1)
    store.register_buffer(src.ctypes.data, MiB)
    assert store.put_from("k", src.ctypes.data + MiB - 4096, 8192) == TRANSFER_FAIL
    fake.close_all()
