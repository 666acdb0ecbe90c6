"""cudaHostUnregister (docs/cuda-runtime.md §3, §11.2)."""

from __future__ import annotations

import threading

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES

MiB = 1 << 20


def _fake(profile: object = None) -> tuple[FakeCuda, object, int]:
    fake = FakeCuda(profile)  # type: ignore[arg-type]
    base = fake.virtual(16 * MiB, name="pool").data_ptr()
    assert int(fake.runtime.cudaHostRegister(base, 4 * MiB, 0)[0]) == 0
    return fake, fake.runtime, base


def test_exact_base_succeeds_and_removes() -> None:
    # docs/cuda-runtime.md §3 "Exact base of a live registration" -> Success [OBS-ext]
    fake, rt, base = _fake()
    assert int(rt.cudaHostUnregister(base)[0]) == 0
    assert fake.live_registrations() == []
    # the range is free again: re-registering it succeeds
    assert int(rt.cudaHostRegister(base, 4 * MiB, 0)[0]) == 0


@pytest.mark.parametrize("off", [1, 4096, 4 * MiB - 1])
def test_interior_pointer_gives_invalid_value_not_713(off: int) -> None:
    # docs/cuda-runtime.md §3 "Interior pointer of a live registration" -> 1 (not 713)
    # [OBS-ext] NVIDIA test_cudart.py
    fake, rt, base = _fake()
    assert int(rt.cudaHostUnregister(base + off)[0]) == 1
    assert [(r.base, r.size) for r in fake.live_registrations()] == [(base, 4 * MiB)]
    assert int(rt.cudaGetLastError()[0]) == 1


@pytest.mark.parametrize("where", ["just past the end", "elsewhere in the buffer", "far away"])
def test_unknown_pointer_gives_713(where: str) -> None:
    # docs/cuda-runtime.md §3 "Pointer in no registration" -> 713 [OBS-ext] chapel #25669
    fake, rt, base = _fake()
    ptr = {"just past the end": base + 4 * MiB, "elsewhere in the buffer": base + 8 * MiB,
           "far away": 0x7F00_0000_0000}[where]
    assert int(rt.cudaHostUnregister(ptr)[0]) == 713
    assert len(fake.live_registrations()) == 1


def test_second_unregister_gives_713() -> None:
    # docs/cuda-runtime.md §3 "Second unregister of the same base" -> 713 [INF]; §11.2
    fake, rt, base = _fake()
    assert int(rt.cudaHostUnregister(base)[0]) == 0
    assert int(rt.cudaHostUnregister(base)[0]) == 713
    assert int(fake.torch.cudaHostUnregister(base)) == 713


@pytest.mark.parametrize("code", [1, 713])
def test_null_follows_profile(code: int) -> None:
    # docs/cuda-runtime.md §3 "NULL" -> [UNC]: InvalidValue or 713; profile unregister_null_code
    fake, rt, _ = _fake(PROFILES["h200-r580"].replace(unregister_null_code=code))
    assert int(rt.cudaHostUnregister(0)[0]) == code
    assert int(rt.cudaHostUnregister(None)[0]) == code      # cuda-python: None is NULL
    assert int(fake.torch.cudaHostUnregister(0)) == code
    assert len(fake.live_registrations()) == 1


def test_default_null_code_is_one_of_the_spec_answers() -> None:
    # docs/cuda-runtime.md §3 NULL row [UNC]: "InvalidValue or 713"; the default profile
    # answers InvalidValue (1), and nothing is unregistered
    fake, rt, _ = _fake()
    assert int(rt.cudaHostUnregister(0)[0]) == 1
    assert int(rt.cudaGetLastError()[0]) == 1
    assert len(fake.live_registrations()) == 1


def test_host_alloc_pointer_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §3 "Pointer from cudaHostAlloc" -> 1 [OBS-ext] lupine #437
    fake, rt, base = _fake()
    err, ptr = rt.cudaHostAlloc(MiB, 0)
    assert int(err) == 0
    assert int(rt.cudaHostUnregister(ptr)[0]) == 1
    assert int(rt.cudaHostUnregister(ptr + 64)[0]) == 1
    assert int(rt.cudaFreeHost(ptr)[0]) == 0          # the block survived the bad unregister
    assert int(rt.cudaHostUnregister(ptr)[0]) == 713  # now it is unknown
    assert [r.base for r in fake.live_registrations()] == [base]


def test_unregister_one_of_adjacent_registrations_keeps_the_other() -> None:
    # docs/cuda-runtime.md §3 [DOC] "Unmaps the range whose base is ptr"
    fake, rt, base = _fake()
    nxt = base + 4 * MiB
    assert int(rt.cudaHostRegister(nxt, MiB, 0)[0]) == 0
    assert int(rt.cudaHostUnregister(nxt)[0]) == 0
    assert [(r.base, r.size) for r in fake.live_registrations()] == [(base, 4 * MiB)]


def test_unregister_across_faces() -> None:
    # docs/cuda-runtime.md §6 "Registrations are driver-level and shared by all runtimes in the
    # process" [INF]; §3 exact base -> 0
    fake, rt, base = _fake()
    assert int(fake.torch.cudaHostUnregister(base)) == 0   # registered via cuda-python
    assert int(rt.cudaHostUnregister(base)[0]) == 713
    assert fake.live_registrations() == []


def _lock_free_for_other_threads(fake: FakeCuda) -> bool:
    got: list[bool] = []

    def probe() -> None:
        ok = fake.driver.lock.acquire(blocking=False)
        if ok:
            fake.driver.lock.release()
        got.append(ok)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got == [True]


def test_driver_lock_is_released_on_every_outcome() -> None:
    # The driver serialises registrations through one lock (docs/cuda-runtime.md §6: one
    # driver per process); every return path, success or error, must give it back, or the
    # next call from another thread would hang.
    fake, rt, base = _fake()
    calls = [
        lambda: rt.cudaHostRegister(base + MiB, MiB, 0),      # overlap -> 712
        lambda: rt.cudaHostUnregister(base + 64),             # interior -> 1
        lambda: rt.cudaHostUnregister(base + 8 * MiB),        # unknown -> 713
        lambda: rt.cudaHostUnregister(0),                     # NULL -> profile's code
        lambda: rt.cudaHostRegister(base + 8 * MiB, MiB, 0),  # success
        lambda: rt.cudaHostUnregister(base + 8 * MiB),        # success
    ]
    for call in calls:
        call()
        assert _lock_free_for_other_threads(fake)
