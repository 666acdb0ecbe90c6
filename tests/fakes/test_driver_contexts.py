"""The driver's contexts: a current context per host thread (docs/cuda-runtime.md §13).

cuda.h [DOC]: ``cuInit`` creates no context; ``cuDevicePrimaryCtxRetain`` returns the device's
primary context without making it current; ``cuCtxSetCurrent`` replaces the top of the calling
thread's context stack (NULL pops it); ``cuCtxPopCurrent`` on an empty stack and the memory
calls (``cuMemHostRegister``, ``cuMemHostUnregister``, ...) on a thread with no current context
give CUDA_ERROR_INVALID_CONTEXT (201). CUDA Runtime API, "Context Management": the runtime uses
the primary context and makes it current on the thread it is called on [DOC]. Observed:
driver calls on a worker thread with no context fail with CUDA_ERROR_INVALID_CONTEXT, fixed by
retaining the primary context and making it current on that thread (kvcache-ai/Mooncake
PR #2034, LMCache PR #5169) [OBS-ext].
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES
from kvreg.fakes.doors import PROCESS

MiB = 1 << 20
BARE = PROFILES["h200-r580"].replace(patching_thread_context="none")


def _on_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def _initialised() -> tuple[FakeCuda, Any, int]:
    fake = FakeCuda()
    drv = fake.driver_api
    assert int(drv.cuInit(0)[0]) == 0
    return fake, drv, fake.virtual(4 * MiB).data_ptr()


def test_cuinit_makes_no_context_current() -> None:
    fake, drv, base = _initialised()
    err, ctx = drv.cuCtxGetCurrent()
    assert int(err) == 0 and int(ctx) == 0
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 201
    assert int(drv.cuMemHostUnregister(base)[0]) == 201
    assert int(drv.cuCtxGetDevice()[0]) == 201
    assert fake.live_registrations() == []


def test_the_primary_context_made_current_serves_this_thread_only() -> None:
    fake, drv, base = _initialised()
    err, ctx = drv.cuDevicePrimaryCtxRetain(0)
    assert int(err) == 0 and int(drv.cuCtxGetCurrent()[1]) == 0    # retained, not current
    assert int(drv.cuCtxSetCurrent(ctx)[0]) == 0
    assert int(drv.cuCtxGetCurrent()[1]) == int(ctx)
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    # another thread has no context: 201, until it makes one current itself
    assert _on_thread(lambda: int(drv.cuMemHostRegister(base + MiB, MiB, 0)[0])) == 201

    def retained_on_the_thread() -> int:
        err, own = drv.cuDevicePrimaryCtxRetain(0)
        assert int(err) == 0 and int(drv.cuCtxSetCurrent(own)[0]) == 0
        code = int(drv.cuMemHostRegister(base + MiB, MiB, 0)[0])
        assert int(drv.cuCtxSetCurrent(None)[0]) == 0
        assert int(drv.cuDevicePrimaryCtxRelease(0)[0]) == 0
        return code

    assert _on_thread(retained_on_the_thread) == 0
    assert len(fake.live_registrations()) == 2


def test_push_pop_and_set_current_work_on_one_stack() -> None:
    _, drv, base = _initialised()
    assert int(drv.cuCtxPopCurrent()[0]) == 201                    # empty stack
    ctx = drv.cuDevicePrimaryCtxRetain(0)[1]
    assert int(drv.cuCtxPushCurrent(ctx)[0]) == 0
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    err, popped = drv.cuCtxPopCurrent()
    assert int(err) == 0 and int(popped) == int(ctx)
    assert int(drv.cuMemHostUnregister(base)[0]) == 201           # popped: none current
    assert int(drv.cuCtxSetCurrent(ctx)[0]) == 0
    assert int(drv.cuCtxSetCurrent(None)[0]) == 0                  # NULL pops the top
    assert int(drv.cuCtxGetCurrent()[1]) == 0
    assert int(drv.cuCtxPushCurrent(None)[0]) == 201
    assert int(drv.cuCtxSetCurrent(12345)[0]) == 201               # no context of ours


def test_retain_and_release_count() -> None:
    _, drv, _ = _initialised()
    assert int(drv.cuDevicePrimaryCtxRetain(1)[0]) == 101           # one device
    assert int(drv.cuDevicePrimaryCtxRelease(0)[0]) == 201          # nothing retained [INF]
    drv.cuDevicePrimaryCtxRetain(0)
    assert int(drv.cuDevicePrimaryCtxRelease(0)[0]) == 0


@pytest.mark.parametrize("first", [
    lambda f: f.runtime.cudaFree(0),
    lambda f: f.torch.cudaHostRegister(f.virtual(MiB).data_ptr(), MiB, 0),
    lambda f: f.runtime.cudaSetDevice(0),
])
def test_the_runtime_makes_the_primary_context_current_on_its_calling_thread(
        first: Callable[[FakeCuda], Any]) -> None:
    fake = FakeCuda()
    drv = fake.driver_api
    base = fake.virtual(4 * MiB).data_ptr()
    first(fake)
    err, ctx = drv.cuCtxGetCurrent()
    assert int(err) == 0 and int(ctx) == int(drv.cuDevicePrimaryCtxRetain(0)[1])
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    assert int(drv.cuCtxGetDevice()[1]) == 0
    assert _on_thread(lambda: int(drv.cuMemHostRegister(base + MiB, MiB, 0)[0])) == 201
    # a runtime call on the worker thread makes it current there too
    assert _on_thread(lambda: (fake.runtime.cudaFree(0),
                               int(drv.cuMemHostRegister(base + MiB, MiB, 0)[0]))[1]) == 0


def test_the_patching_thread_is_a_serving_engines_main_thread() -> None:
    fake = FakeCuda()
    base = fake.virtual(4 * MiB).data_ptr()
    with fake.patch():
        from cuda.bindings import driver

        assert int(driver.cuMemHostRegister(base, MiB, 0)[0]) == 0   # torch used the runtime
        assert _on_thread(lambda: int(driver.cuMemHostRegister(base + MiB, MiB, 0)[0])) == 201
    bare = FakeCuda(BARE)
    with bare.patch():
        from cuda.bindings import driver

        assert int(driver.cuMemHostRegister(base, MiB, 0)[0]) == 3   # not even initialised


def test_contexts_are_per_fake_unless_the_process_is_carried() -> None:
    one, two = FakeCuda(), FakeCuda()
    one.runtime.cudaFree(0)
    assert int(one.driver_api.cuCtxGetCurrent()[1]) != 0
    two.driver_api.cuInit(0)
    assert int(two.driver_api.cuCtxGetCurrent()[1]) == 0            # another process
    saved = (PROCESS.carry, PROCESS.driver_initialised, PROCESS.contexts)
    PROCESS.carry, PROCESS.driver_initialised, PROCESS.contexts = True, False, None
    try:
        first, later = FakeCuda(BARE), FakeCuda(BARE)
        with first.patch():
            first.driver_api.cuInit(0)
            ctx = first.driver_api.cuDevicePrimaryCtxRetain(0)[1]
            first.driver_api.cuCtxSetCurrent(ctx)
        with later.patch():   # one process: the thread's context is still current
            assert int(later.driver_api.cuCtxGetCurrent()[1]) == int(ctx)
    finally:
        PROCESS.carry, PROCESS.driver_initialised, PROCESS.contexts = saved
