"""kvreg_host_memory: a real pool's large CPU allocations become no-RAM tensors, small ones stay
torch's, and each is named in the fake's trace."""

from __future__ import annotations

import resource

import pytest
import torch

from kvreg.fakes import FakeCuda
from kvreg.harness.pool_class.host_memory import HostMemory, kvreg_host_memory

TiB = 1 << 40


class Allocator:
    """The allocator protocol of SGLang 0.5.23's HostTensorAllocator.allocate."""

    def allocate(self, dims: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
        raise AssertionError("the real allocator must not run under kvreg_host_memory")


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_tib_buffer_is_a_real_tensor_without_ram() -> None:
    before = rss_mib()
    fake = FakeCuda()
    with fake.patch(), kvreg_host_memory(fake, names=["kv_buffer"]) as mem:
        buf = torch.zeros((2, 1 << 20, 1 << 19), dtype=torch.bfloat16)      # 2 TiB
        assert type(buf) is torch.Tensor and buf.device.type == "cpu"
        assert buf.numel() * buf.element_size() == 2 * TiB
        assert buf.stride(1) == 1 << 19 and buf.transpose(0, 1).shape[0] == 1 << 20
        assert float(buf[1, 12345, 678]) == 0.0           # zeros still reads as zeros
        buf[0, 0, 0] = 3.0
        assert float(buf[0, 0, 0]) == 3.0
        (alloc,) = mem.allocations
        assert (alloc.name, alloc.nbytes, alloc.via) == ("kv_buffer", 2 * TiB, "torch.zeros")
        assert alloc.ptr == buf.data_ptr()
        cudart = torch.cuda.cudart()
        assert int(cudart.cudaHostRegister(buf.data_ptr() + (1 << 30), 4096, 0)) == 0
        text = fake.trace.format()
        assert "host.kvreg_host_alloc(kv_buffer" in text
        assert "cudaHostRegister(kv_buffer+0x40000000, 4096, 0)" in text
        torch.cuda.cudart().cudaHostUnregister(buf.data_ptr() + (1 << 30))
    assert rss_mib() - before < 256          # a touched page or two, not 2 TiB


def test_small_tensors_stay_torch_s_own() -> None:
    with kvreg_host_memory(threshold=1 << 20) as mem:
        small = torch.empty([], dtype=torch.float16)      # what SGLang's alloc_mmap asks first
        below = torch.zeros(1 << 17, dtype=torch.float32)            # 512 KiB
        at = torch.empty((1 << 18,), dtype=torch.float32)            # exactly 1 MiB
        assert small.element_size() == 2 and below.sum().item() == 0
    assert [a.nbytes for a in mem.allocations] == [1 << 20]
    assert at.data_ptr() == mem.allocations[0].ptr


def test_calls_torch_must_answer_itself_are_passed_through() -> None:
    with kvreg_host_memory(threshold=1) as mem:
        out = torch.empty(4)
        assert mem.allocations and len(mem.allocations) == 1
        torch.zeros(4, out=out)                      # out=: torch's own
        torch.empty(8, requires_grad=True)
        torch.empty(8, dtype=torch.float32, device="meta")
        torch.empty(torch.Size([3, 2]))               # a torch.Size is a shape too
    assert len(mem.allocations) == 2
    assert mem.allocations[1].shape == (3, 2)


def test_scope_ends_with_the_block() -> None:
    real = (torch.empty, torch.zeros, Allocator.allocate)
    with pytest.raises(RuntimeError), kvreg_host_memory(allocators=[(Allocator, "allocate")]):
        assert torch.empty is not real[0]
        raise RuntimeError("inside")
    assert (torch.empty, torch.zeros, Allocator.allocate) == real


def test_allocator_hook_serves_every_size_and_names_in_order() -> None:
    fake = FakeCuda()
    with kvreg_host_memory(fake, names=["k_buffer", "v_buffer"],
                           allocators=[(Allocator, "allocate")]) as mem:
        k = Allocator().allocate((4, 8), torch.float16, "cpu")
        v = Allocator().allocate((4, 8), torch.float16, "cpu")
        extra = Allocator().allocate((2,), torch.uint8, "cpu")
    assert [a.name for a in mem.allocations] == ["k_buffer", "v_buffer", "host_alloc2"]
    assert mem.allocations[0].via == "Allocator.allocate"
    assert mem.by_name("v_buffer").ptr == v.data_ptr() and k.shape == (4, 8)
    assert fake.space.owner(v.data_ptr() + 3)[0].name == "v_buffer"
    assert extra.numel() == 2
    with pytest.raises(KeyError, match="k_buffer, v_buffer, host_alloc2"):
        mem.by_name("index_buffer")


def test_an_instance_allocator_can_be_hooked_too() -> None:
    alloc = Allocator()
    with kvreg_host_memory(allocators=[(alloc, "allocate")]) as mem:
        alloc.allocate((3,), torch.int32, "cpu")
    assert mem.allocations[0].nbytes == 12


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"threshold": 0}, "threshold must be a positive"),
    ({"threshold": 1.5}, "threshold must be a positive"),
    ({"names": "kv_buffer"}, "distinct buffer names"),
    ({"names": ["a", "a"]}, "distinct buffer names"),
    ({"allocators": [Allocator]}, r"allocators\[0\] must be an \(owner, attribute name\) pair"),
    ({"allocators": [(Allocator, "alloc")]}, "has no method 'alloc'"),
])
def test_bad_options_are_refused_before_anything_is_patched(kwargs, words: str) -> None:
    real = torch.empty
    with pytest.raises(ValueError, match=words), kvreg_host_memory(**kwargs):
        pass
    assert torch.empty is real


def test_non_cpu_allocations_are_refused() -> None:
    with pytest.raises(ValueError, match="CPU allocations only; got device='cuda'"):
        HostMemory().allocate((4,), torch.uint8, "cuda")


def test_empty_and_negative_shapes() -> None:
    memory = HostMemory()
    assert memory.allocate((0, 5), torch.float32).shape == (0, 5)
    with pytest.raises(ValueError, match="negative dimension"):
        memory.allocate((-1,), torch.float32)


def test_fixture_takes_its_options_from_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest, torch

@pytest.mark.kvreg_host_memory(threshold=1 << 20, names=["kv_buffer"])
def test_marked(kvreg_host_memory, kvreg_pool_check, fake_cudart):
    small = torch.empty(1000)
    buf = torch.zeros(1 << 21, dtype=torch.uint8)
    assert [a.name for a in kvreg_host_memory.allocations] == ["kv_buffer"]
    assert fake_cudart.space.owner(buf.data_ptr() + 5)[0].name == "kv_buffer"
    torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), 1 << 20, 0)
    check = kvreg_pool_check([buf], granularity=None)
    assert [v.rule for v in check.registered()] == ["registered"]
    torch.cuda.cudart().cudaHostUnregister(buf.data_ptr())
    assert small.numel() == 1000
''')
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
