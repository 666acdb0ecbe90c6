"""Pools at unaligned bases, as torch gives them: ``[pool] base_offset``.

torch's CPU allocator calls ``posix_memalign(64)`` (c10/core/impl/alloc_cpu.cpp, ``gAlignment =
64`` in c10/core/alignment.h; with ``THP_MEM_ALLOC_ENABLE=1`` the alignment is the page size,
not 2 MiB). glibc serves a large block by mmap and aligns it inside the mapping ("For mmapped
chunks, just adjust offset", malloc.c ``_int_memalign``), so the tensor starts 64 bytes into a
page. kvreg's virtual buffers were all 2 MiB-aligned, so code computing chunk bases from the
allocation's alignment passed everywhere; the catalog now holds every pool type at torch's base.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvreg.fakes import reserved
from kvreg.fakes.address_space import AddressSpace
from kvreg.fakes.cuda.host_mapping import range_is_mapped
from kvreg.harness.pools.buffers import allocate
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario.format import TORCH_BASE_OFFSET, ScenarioError, load_file

HUGE = 2 << 20
PAGE = 4096
POOL_FILES = ("mha/unaligned_bases", "mha/unaligned_bases_k_only",
              "mha/unaligned_bases_asymmetric", "mha/unaligned_bases_thp",
              "mha/unaligned_bases_group",
              "mla/unaligned_bases", "dsa/unaligned_bases", "mamba/unaligned_bases",
              "deepseek_v4/unaligned_bases_paged", "deepseek_v4/unaligned_bases_state")


@pytest.mark.skipif(os.environ.get("THP_MEM_ALLOC_ENABLE") not in (None, "", "0"),
                    reason="THP_MEM_ALLOC_ENABLE=1 makes torch align large tensors to a page")
def test_torch_puts_a_large_cpu_tensor_64_bytes_into_a_page() -> None:
    """The measurement behind ``base_offset = "torch"`` (torch 2.13 CPU, glibc 2.36).

    Sizes above glibc's largest mmap threshold only (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on
    64-bit, malloc/malloc.c): below it the threshold grows as the process frees mmapped
    chunks, so a 2 MiB tensor may come from the heap, depending on what ran before.
    """
    import torch

    for nbytes in (1 << 26, (1 << 26) + 12345, 1 << 31):
        t = torch.empty(nbytes, dtype=torch.uint8)
        assert t.data_ptr() % PAGE == 64, hex(t.data_ptr())
        assert t.data_ptr() % HUGE != 0
    assert TORCH_BASE_OFFSET % PAGE == 64 and TORCH_BASE_OFFSET % HUGE == PAGE + 64


def test_virtual_buffer_starts_at_the_offset_and_its_page_below_is_unmapped() -> None:
    space = AddressSpace()
    t = space.virtual((1 << 20,), "bfloat16", name="kv", offset=TORCH_BASE_OFFSET)
    base = t.data_ptr()
    assert base % HUGE == TORCH_BASE_OFFSET
    assert space.describe(base) == "kv" and space.describe(base + 10) == "kv+0xa"
    t[0], t[-1] = 1.0, 2.0                      # a real tensor, writable at both ends
    assert float(t[0]) == 1.0 and float(t[-1]) == 2.0
    res = reserved.reservation_of(t)
    assert res is not None and res.start == base - 64 and res.base == base
    # the 64 bytes before the base share its page (an mmap maps pages); the page below does not
    assert range_is_mapped(space, base - 64, 64 + t.nbytes)
    assert not range_is_mapped(space, base - 65, 1)
    assert not range_is_mapped(space, base - TORCH_BASE_OFFSET, PAGE)
    space.release()


@pytest.mark.parametrize("offset", [-16, 4, HUGE, 4097])
def test_reserve_refuses_an_offset_no_allocator_gives(offset: int) -> None:
    with pytest.raises(ValueError, match="offset must be an int in"):
        reserved.reserve(shape=(16,), dtype="float64", offset=offset)


def test_allocate_shifts_every_virtual_buffer() -> None:
    from kvreg.harness.pools import make_geometry

    geometry = make_geometry("mamba", layout="page_first", num_mamba_layers=2,
                             temporal_shape=[2, 4, 4], temporal_dtype="float16",
                             conv_shapes=[[3, 16], [3, 8]], conv_dtype="bfloat16", page_num=8)
    space = AddressSpace()
    buffers = allocate(geometry, space, base_offset=TORCH_BASE_OFFSET)
    assert len(buffers) == len(geometry.buffers()) >= 2
    assert {b.data_ptr() % HUGE for b in buffers} == {TORCH_BASE_OFFSET}
    space.release()


def _write(tmp_path: Path, pool_extra: str, memory: str = "virtual") -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(
        'format = 1\n[pool]\ntype = "mla"\nparams = { layout = "page_first", layer_num = 2, '
        'kv_lora_rank = 64, qk_rope_head_dim = 32, dtype = "bfloat16", page_size = 4 }\n'
        f'memory = "{memory}"\n{pool_extra}\n[[scenario]]\nname = "one"\n'
        'guards = "a pool at an unaligned base registers from its own base"\npages = 4\n')
    return path


def test_format_reads_torch_and_integers(tmp_path: Path) -> None:
    (sc,) = load_file(_write(tmp_path, 'base_offset = "torch"'))
    assert sc.base_offset == TORCH_BASE_OFFSET
    (sc,) = load_file(_write(tmp_path, "base_offset = 446464"))
    assert sc.base_offset == 446464
    (sc,) = load_file(_write(tmp_path, ""))
    assert sc.base_offset == 0


@pytest.mark.parametrize(("extra", "memory", "words"), [
    ("base_offset = 8", "virtual", "a multiple of 16"),
    (f"base_offset = {HUGE}", "virtual", "an integer in [0, 2097152)"),
    ('base_offset = "glibc"', "virtual", '"torch" or an integer'),
    ("base_offset = 64", "real", 'memory = "virtual"'),
])
def test_format_refuses_a_bad_base_offset(tmp_path: Path, extra: str, memory: str,
                                          words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_file(_write(tmp_path, extra, memory))
    assert "pool.base_offset" in str(err.value) and words in str(err.value)


def _catalog(name: str) -> list:
    from kvreg.harness.scenario.format import bundled_root

    root = bundled_root()
    return load_file(root / f"{name}.toml", root)


def test_every_pool_type_has_unaligned_scenarios() -> None:
    types = set()
    for name in POOL_FILES:
        scenarios = _catalog(name)
        assert scenarios and all(s.base_offset % HUGE for s in scenarios), name
        types |= {s.pool_type for s in scenarios}
    assert types == {"mha", "mha_k_only", "mha_asymmetric", "mla", "dsa_indexer", "mamba",
                     "deepseek_v4_paged", "deepseek_v4_state", "group"}


@pytest.mark.parametrize("name", POOL_FILES)
def test_reference_and_broken_twin_at_unaligned_bases(name: str) -> None:
    """kvreg's reference passes each unaligned scenario; code that rounds the base down to
    2 MiB fails each one at its first call, named as bytes before the buffer."""
    reference = make_implementation("kvreg.harness.cuda.reference:register", None, "generic")
    broken = make_implementation(
        f"{Path(__file__).parent / 'impls' / 'aligned_chunk_bases.py'}:register", None,
        "generic")
    for sc in _catalog(name):
        good = run_scenario(sc, reference)
        assert good.verdict == "pass", (sc.id, good.violations)
        bad = run_scenario(sc, broken)
        assert bad.verdict == "fail", sc.id
        first = bad.violations[0]
        assert first.rule == "range-outside-buffer", (sc.id, bad.violations)
        gap = sc.base_offset
        assert "call #1 registers [" in first.message
        assert f"-{gap:#x} ({gap} bytes before " in first.message, first.message
        assert "is not 2 MiB-aligned" in first.message


@pytest.mark.parametrize("sid", ["mla/page_first/above-limit", "mha/layer_first/above-limit"])
def test_the_broken_twin_passes_at_2mib_aligned_bases(sid: str) -> None:
    """Its rounding is a no-op on an aligned base: the unaligned base alone catches it."""
    from kvreg.harness.scenario import load_paths

    (sc,) = [s for s in load_paths() if s.id == sid]
    assert sc.base_offset == 0
    broken = make_implementation(
        f"{Path(__file__).parent / 'impls' / 'aligned_chunk_bases.py'}:register", None,
        "generic")
    result = run_scenario(sc, broken)
    assert result.verdict == "pass", result.violations


def test_real_hardware_buffers_take_the_offset_too() -> None:
    """``allocate_pinnable`` (the real-hardware tier) starts each tensor ``base_offset`` bytes
    into the page-aligned memory it is given, as torch's own tensor would be."""
    import numpy as np

    from kvreg.harness.pools import make_geometry
    from kvreg.harness.pools.buffers import allocate_pinnable

    class Backend:
        def __init__(self) -> None:
            self.raw: list[np.ndarray] = []

        def buffer(self, nbytes: int, *, name: str = "") -> np.ndarray:
            self.raw.append(np.zeros(nbytes, np.uint8))
            return self.raw[-1]

    geometry = make_geometry("mla", layout="page_first", layer_num=2, kv_lora_rank=64,
                             qk_rope_head_dim=32, dtype="bfloat16", page_size=4, page_num=4)
    backend = Backend()
    (t,) = allocate_pinnable(geometry, backend, TORCH_BASE_OFFSET)
    (raw,) = backend.raw
    assert t.data_ptr() == raw.ctypes.data + TORCH_BASE_OFFSET
    assert t.nbytes == geometry.buffers()[0].nbytes == raw.nbytes - TORCH_BASE_OFFSET
