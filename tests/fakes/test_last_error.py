"""Last-error state: per thread, per runtime instance (docs/cuda-runtime.md §6, §11.5)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20


def _last(rt: Any) -> int:
    return int(rt.cudaGetLastError()[0])


def _peek(rt: Any) -> int:
    return int(rt.cudaPeekAtLastError()[0])


def _in_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # surface assertion errors to the main thread
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out[0]


def test_get_clears_peek_does_not() -> None:
    # docs/cuda-runtime.md §6 "cudaGetLastError returns the last error ... then resets it to
    # success. cudaPeekAtLastError reads it without resetting" [DOC]
    fake = FakeCuda()
    rt = fake.runtime
    assert _peek(rt) == 0 and _last(rt) == 0
    assert int(rt.cudaHostUnregister(0x1000)[0]) == 713
    assert _peek(rt) == 713
    assert _peek(rt) == 713
    assert _last(rt) == 713
    assert _last(rt) == 0
    assert _peek(rt) == 0


def test_success_does_not_clear_and_latest_error_wins() -> None:
    # docs/cuda-runtime.md §11.5 "A failed call sets it. GetLastError returns and clears it"
    # [DOC] (only GetLastError resets the slot)
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    rt.cudaHostRegister(base, 0, 0)                       # 1
    assert int(rt.cudaHostRegister(base, MiB, 0)[0]) == 0
    assert _peek(rt) == 1
    rt.cudaHostRegister(base, MiB, 0)                     # 712
    assert _last(rt) == 712


def test_last_error_is_per_thread() -> None:
    # docs/cuda-runtime.md §6 "in the same instance of the CUDA Runtime library in the calling
    # host thread" [DOC]
    fake = FakeCuda()
    rt = fake.runtime
    rt.cudaHostUnregister(0x2000)                          # 713 in the main thread
    assert _in_thread(lambda: (_peek(rt), _last(rt))) == (0, 0)
    assert _peek(rt) == 713

    def fail_and_read() -> tuple[int, int, int]:
        rt.cudaHostRegister(0, 4096, 0)                    # 1 in the worker
        return _peek(rt), _last(rt), _last(rt)

    assert _in_thread(fail_and_read) == (1, 1, 0)
    assert _last(rt) == 713                                # untouched by the worker


def test_registrations_are_shared_across_threads() -> None:
    # docs/cuda-runtime.md §6 "Registrations are driver-level" [INF]
    fake = FakeCuda()
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    assert int(_in_thread(lambda: rt.cudaHostRegister(base, MiB, 0))[0]) == 0
    assert int(rt.cudaHostRegister(base, MiB, 0)[0]) == 712
    assert _in_thread(lambda: _peek(rt)) == 0


def test_torch_error_is_not_seen_by_cuda_python() -> None:
    # docs/cuda-runtime.md §6 "cuda-python's cudaGetLastError cannot clear an error left in
    # torch's runtime, and the reverse also holds" [OBS-ext] maru PR #65, vllm PR #50070
    fake = FakeCuda()
    base = fake.virtual(MiB).data_ptr()
    assert fake.torch.cudaHostRegister(base, 0, 0) == 1
    assert _peek(fake.runtime) == 0
    assert _last(fake.runtime) == 0
    assert fake.torch_runtime.peek_at_last_error() == 1     # still pending in torch's runtime
    assert fake.torch_runtime.peek_at_last_error() == 1


def test_cuda_python_error_is_not_seen_by_torch_runtime() -> None:
    # docs/cuda-runtime.md §6 "and the reverse also holds" [OBS-ext]
    fake = FakeCuda()
    fake.runtime.cudaHostUnregister(0x3000)
    assert fake.torch_runtime.peek_at_last_error() == 0
    assert fake.cuda_runtime.peek_at_last_error() == 713


def test_torch_face_never_clears_and_has_no_get_last_error() -> None:
    # docs/cuda-runtime.md §6 "torch exposes no cudaGetLastError"; §11.5 "torch's binding never
    # clears it" [OBS-local] + [OBS-ext]
    fake = FakeCuda()
    base = fake.virtual(MiB).data_ptr()
    fake.torch.cudaHostRegister(base, 0, 0)                  # 1, pending
    assert fake.torch.cudaHostRegister(base, MiB, 0) == 0
    assert fake.torch.cudaHostUnregister(base) == 0
    assert fake.torch_runtime.peek_at_last_error() == 1
    for name in ("cudaGetLastError", "cudaPeekAtLastError"):
        with pytest.raises(AttributeError):
            getattr(fake.torch, name)


def test_registration_shared_across_faces_gives_712() -> None:
    # docs/cuda-runtime.md §6 "a duplicate made through the other binding should give 712"
    # [INF]; §12 check 8
    fake = FakeCuda()
    base = fake.virtual(4 * MiB).data_ptr()
    assert fake.torch.cudaHostRegister(base, 2 * MiB, 0) == 0
    assert int(fake.runtime.cudaHostRegister(base, 2 * MiB, 0)[0]) == 712
    assert int(fake.runtime.cudaHostRegister(base + MiB, 2 * MiB, 0)[0]) == 712
    # the error is pending in cuda-python's runtime, not torch's
    assert fake.torch_runtime.peek_at_last_error() == 0
    assert _last(fake.runtime) == 712
    # and the reverse direction
    assert int(fake.runtime.cudaHostRegister(base + 2 * MiB, MiB, 0)[0]) == 0
    assert fake.torch.cudaHostRegister(base + 2 * MiB, MiB, 0) == 712
    assert fake.torch_runtime.peek_at_last_error() == 712


def test_injected_error_lands_in_the_calling_runtime() -> None:
    # docs/cuda-runtime.md §6 known failure mode step 1: "A failed cudaHostRegister (code 1, 2
    # or 712) leaves the error pending in torch's runtime" [OBS-ext]
    fake = FakeCuda()
    base = fake.virtual(MiB).data_ptr()
    fake.inject("cudaHostRegister", nth=1, error=2)
    assert fake.torch.cudaHostRegister(base, MiB, 0) == 2
    assert fake.live_registrations() == []
    assert fake.torch_runtime.peek_at_last_error() == 2
    assert _peek(fake.runtime) == 0
    assert fake.torch.cudaHostRegister(base, MiB, 0) == 0   # nth=1 fires once


def test_two_fakes_are_independent() -> None:
    # docs/cuda-runtime.md §6: state belongs to one process; fakes are separate processes
    a, b = FakeCuda(), FakeCuda()
    buf = a.virtual(MiB)
    base = buf.data_ptr()
    b.track(buf, name="same")          # the same address, as in another process
    a.runtime.cudaHostUnregister(base)
    assert _peek(b.runtime) == 0
    assert int(a.runtime.cudaHostRegister(base, MiB, 0)[0]) == 0
    assert int(b.runtime.cudaHostRegister(base, MiB, 0)[0]) == 0
