"""The project's own unit tests, on kvreg's fake CUDA runtime (fixture fake_cudart)."""

import mypool
import pytest
import torch


def test_small_pool_registers_and_tears_down(fake_cudart, monkeypatch):
    monkeypatch.setenv("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "1")
    buf = torch.zeros(1 << 20, dtype=torch.uint8)      # a real 1 MiB tensor
    fake_cudart.track(buf, name="pool")
    mypool.register(buf, 4096)
    assert len(fake_cudart.live_registrations()) == 1
    mypool.teardown(buf)
    mypool.teardown(buf)                                 # second teardown: no calls
    assert fake_cudart.trace.codes("cudaHostUnregister") == [0]


def test_failure_rolls_back(fake_cudart, monkeypatch):
    monkeypatch.setenv("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "1")
    buf = fake_cudart.virtual(3 << 30, name="pool")     # 3 GiB, no RAM used
    fake_cudart.inject("cudaHostRegister", nth=2, error=2)
    with pytest.raises(RuntimeError, match="rc=2"):
        mypool.register(buf, 1 << 20)
    assert fake_cudart.live_registrations() == []
