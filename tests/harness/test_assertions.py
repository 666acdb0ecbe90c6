"""PoolCheck / assert_pool_registered: kvreg's rules over a pool's own registrations, with the
sentences `kvreg run` prints for the same run."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from kvreg.fakes import FakeCuda
from kvreg.harness.pool_class.assertions import (
    PoolCheck,
    PoolRegistrationError,
    assert_pool_registered,
    assert_pool_released,
)
from kvreg.harness.pool_class.host_memory import kvreg_host_memory
from kvreg.harness.pools import MHAGeometry, MLAGeometry
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario.format import load_file

GiB = 1 << 30
IMPLS = Path(__file__).parents[1] / "cuda_target" / "impls"


def impl_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"kvreg_test_impl_{name}", IMPLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def correct_register(buffer: torch.Tensor, granularity: int | None, limit: int) -> None:
    """Written unlike kvreg's reference: chunks planned up front, registered from the end."""
    cudart = torch.cuda.cudart()
    total = buffer.numel() * buffer.element_size()
    step = total if granularity is None else limit // granularity * granularity
    chunks = [(off, min(step, total - off)) for off in range(0, total, step)]
    done: list[int] = []
    for off, size in reversed(chunks):
        rc = int(cudart.cudaHostRegister(buffer.data_ptr() + off, size, 0))
        if rc:
            for ptr in done:
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed: rc={rc}")
        done.append(buffer.data_ptr() + off)
    buffer.kvreg_chunks = done  # type: ignore[attr-defined]


def correct_destroy(buffer: torch.Tensor) -> None:
    for ptr in buffer.kvreg_chunks:  # type: ignore[attr-defined]
        torch.cuda.cudart().cudaHostUnregister(ptr)


class Pool:
    """A user's host pool: allocates its buffer and registers it in the constructor."""

    def __init__(self, geometry: Any, register: Any, limit: int) -> None:
        (spec,) = geometry.buffers()
        self.kv_buffer = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype.name))
        register(self.kv_buffer, spec.granularity, limit)


GEO = MHAGeometry("page_first", 4, 3, 128, "bf16", 64, 7000)   # 2.6 GiB, G = 192 KiB: no
# multiple of G is 1 GiB, so seams every GiB cut a page


@pytest.fixture
def fake():
    f = FakeCuda()
    with f.patch(), kvreg_host_memory(f, names=["kv_buffer"]):
        yield f


def test_a_correct_pool_passes_and_its_destroy_too(fake) -> None:
    pool = Pool(GEO, correct_register, GiB)
    check = assert_pool_registered(fake, [pool.kv_buffer], GEO, chunk_limit=GiB)
    assert check.registered() == []
    correct_destroy(pool.kv_buffer)
    check.assert_released()
    assert fake.live_registrations() == []


def test_copies_ran_over_every_page(fake) -> None:
    pool = Pool(GEO, correct_register, GiB)
    check = PoolCheck(fake, {"kv_buffer": pool.kv_buffer}, GEO, chunk_limit=GiB)
    assert check.registered() == []
    transfer = check.record.transfer if check.record else None
    assert transfer is not None and transfer.ok and transfer.copies == 2 * GEO.page_num
    correct_destroy(pool.kv_buffer)


def byte_seams(buffer: torch.Tensor, granularity: int | None, limit: int) -> None:
    impl_module("byte_offset_seams").register(buffer, granularity)


def test_byte_seams_fail_with_kvreg_run_s_own_sentences(monkeypatch, tmp_path) -> None:
    # kvreg run first (it builds its own fake), then the same pool under PoolCheck
    params = ", ".join(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"'
                       for k, v in GEO.params().items() if k != "page_num")
    (tmp_path / "pool.toml").write_text(
        f'format = 1\n[pool]\ntype = "mha"\nparams = {{ {params} }}\nmemory = "virtual"\n'
        '[defaults]\nchunk_gb = 1\n[[scenario]]\nname = "same"\n'
        'guards = "byte seams cut pages (sglang PR #36798)"\n'
        f'pages = {GEO.page_num}\nexercise = ["register", "transfers"]\n')
    (sc,) = load_file(tmp_path / "pool.toml")
    impl = make_implementation(f"{IMPLS / 'byte_offset_seams.py'}:register", style="sglang")
    theirs = [(v.rule, v.message) for v in run_scenario(sc, impl).violations]

    monkeypatch.setenv("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "1")
    fake = FakeCuda()
    with fake.patch(), kvreg_host_memory(fake, names=["kv_buffer"]):
        pool = Pool(GEO, byte_seams, GiB)
        with pytest.raises(PoolRegistrationError) as info:
            assert_pool_registered(fake, [pool.kv_buffer], GEO)   # the limit read from the env
        impl_module("byte_offset_seams").teardown(pool.kv_buffer)
    mine = [(v.rule, v.message) for v in info.value.violations]
    assert {"seams-aligned", "transfer-failed"} <= {rule for rule, _ in mine}
    assert "[seams-aligned] a seam between two registrations of kv_buffer" in str(info.value)
    assert mine == theirs


def test_granularity_instead_of_a_geometry(fake, monkeypatch) -> None:
    monkeypatch.setenv("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "1")
    pool = Pool(GEO, byte_seams, GiB)
    with pytest.raises(PoolRegistrationError, match=r"\[seams-aligned\].*copy unit 5461"):
        assert_pool_registered(fake, {"kv_buffer": pool.kv_buffer}, granularity=192 * 1024,
                               chunk_limit=GiB)
    impl_module("byte_offset_seams").teardown(pool.kv_buffer)


def first_chunk_only(buffer: torch.Tensor, granularity: int | None, limit: int) -> None:
    step = limit // granularity * granularity if granularity else buffer.nbytes
    torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), step, 0)


def test_a_pool_that_registers_only_its_first_chunk(fake) -> None:
    pool = Pool(GEO, first_chunk_only, GiB)
    found = PoolCheck(fake, [pool.kv_buffer], GEO, chunk_limit=GiB, copies=False).registered()
    assert [v.rule for v in found] == ["registered"]
    assert found[0].message.startswith("register() of kv_buffer returned normally but "
                                       "[kv_buffer+0x3fff0000, +")
    torch.cuda.cudart().cudaHostUnregister(pool.kv_buffer.data_ptr())


def test_a_destroy_that_forgets_chunks_leaks_them(fake) -> None:
    pool = Pool(GEO, correct_register, GiB)
    check = assert_pool_registered(fake, [pool.kv_buffer], GEO, chunk_limit=GiB)
    torch.cuda.cudart().cudaHostUnregister(pool.kv_buffer.kvreg_chunks[0])
    with pytest.raises(PoolRegistrationError, match=r"\[leak\] chunk \[kv_buffer\+0x0, "
                                                    r"\+1073676288\) was never released"):
        check.assert_released()
    correct_destroy(pool.kv_buffer)   # the rest, so the second unregister is the bad one
    found = check.released()
    assert [v.rule for v in found] == ["unregister-not-a-live-base"]
    assert "which was already released" in found[0].message
    with pytest.raises(PoolRegistrationError, match="already released"):
        assert_pool_released(fake, [pool.kv_buffer], GEO, chunk_limit=GiB)


def test_assert_pool_released_alone(fake) -> None:
    pool = Pool(GEO, correct_register, GiB)
    with pytest.raises(PoolRegistrationError, match=r"\[leak\] chunk \[kv_buffer"):
        assert_pool_released(fake, [pool.kv_buffer], GEO, chunk_limit=GiB)
    correct_destroy(pool.kv_buffer)
    assert_pool_released(fake, [pool.kv_buffer], GEO, chunk_limit=GiB)


def test_a_swallowed_error_is_named(fake) -> None:
    fake.inject("cudaHostRegister", nth=2, error=2)

    def swallow(buffer: torch.Tensor, granularity: int | None, limit: int) -> None:
        with contextlib.suppress(RuntimeError):     # the bug: the error is dropped
            correct_register(buffer, granularity, limit)

    pool = Pool(GEO, swallow, GiB)
    found = PoolCheck(fake, [pool.kv_buffer], GEO, chunk_limit=GiB).registered()
    assert found and found[0].rule == "error-swallowed"
    assert "cudaHostRegister returned 2" in found[0].message


def test_a_register_that_raised_is_judged_on_its_error(fake) -> None:
    fake.inject("cudaHostRegister", nth=2, error=2)
    buf = torch.empty(GEO.buffers()[0].shape, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError) as info:
        correct_register(buf, GEO.buffers()[0].granularity, GiB)
    # a full rollback and an error that carries its code: nothing to report
    assert PoolCheck(fake, [buf], GEO, chunk_limit=GiB, raised=info.value).registered() == []
    assert fake.live_registrations() == []


def test_an_error_that_hides_the_code_is_reported(fake) -> None:
    fake.inject("cudaHostRegister", nth=2, error=2)
    buf = torch.empty(GEO.buffers()[0].shape, dtype=torch.bfloat16)
    try:
        correct_register(buf, GEO.buffers()[0].granularity, GiB)
    except RuntimeError:
        hidden = RuntimeError("registration failed")
    found = PoolCheck(fake, [buf], GEO, chunk_limit=GiB, raised=hidden).registered()
    assert [v.rule for v in found] == ["error-reported"]
    assert "which does not name cudaErrorMemoryAllocation (2" in found[0].message


def test_mla_granularity_sequence_per_buffer(fake) -> None:
    geo = MLAGeometry("page_first_direct", 2, 512, 64, "bf16", 64, 16)
    pool = Pool(geo, correct_register, GiB)
    assert_pool_registered(fake, [pool.kv_buffer], granularity=[geo.buffers()[0].granularity],
                           chunk_limit=GiB)
    correct_destroy(pool.kv_buffer)


@pytest.mark.parametrize(("args", "kwargs", "error", "words"), [
    ((), {}, ValueError, "give either geometry"),
    ((GEO,), {"granularity": 4}, ValueError, "give either geometry"),
    ((MLAGeometry("page_first", 2, 512, 64, "bf16", 64, 16),), {}, ValueError,
     "the geometry does not describe this pool"),
    ((GEO,), {"pinning": "maybe"}, ValueError, "pinning must be one of"),
    ((GEO,), {"chunk_limit": 0}, ValueError, "chunk_limit must be positive"),
    ((), {"granularity": [1, 2]}, ValueError, "2 value"),
    ((), {"granularity": -5}, ValueError, "positive int or None"),
])
def test_bad_input_is_a_clear_error(fake, args, kwargs, error, words: str) -> None:
    buf = torch.empty(GEO.buffers()[0].shape, dtype=torch.bfloat16)
    with pytest.raises(error, match=words):
        PoolCheck(fake, [buf], *args, **kwargs)


def test_missing_and_misnamed_buffers_are_named(fake) -> None:
    from kvreg.harness.pools import AsymmetricMHAGeometry

    geo = AsymmetricMHAGeometry("page_first", 2, 2, 128, 64, "bf16", 64, 4)
    k = torch.empty(geo.buffers()[0].shape, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"has buffers k_buffer, v_buffer; got 1 tensor.*"
                                         r"missing v_buffer"):
        PoolCheck(fake, [k], geo)
    with pytest.raises(ValueError, match="'v' is not the geometry's 'k_buffer'"):
        PoolCheck(fake, {"v": k, "k": k}, geo)
    with pytest.raises(TypeError, match="expected a tensor"):
        PoolCheck(fake, ["not a tensor"], granularity=None)
    with pytest.raises(TypeError, match="fake must be a FakeCuda"):
        PoolCheck(object(), [k], geo)
