"""A ready Hypothesis state machine for register / copy / teardown lifecycles.

Point it at your own code and Hypothesis drives random lifecycles against the fake: pools of
random page sizes registered under random chunk limits (sometimes with a failing call),
every page copied, torn down (twice where the code declares a repeatable teardown, as ``kvreg
run`` reads it: the ``sglang`` style, or ``teardown.repeatable = True``), and after every step
the fake's live registrations must equal what the model says is registered. A failure names
the rule of ``kvreg run`` it breaks (``[seams-aligned] ...``, ``[registered] ...``), so a test
can expect a rule, not a word::

    from kvreg.harness.state_machine import RegistrationMachine

    class MyPoolMachine(RegistrationMachine):
        style = "sglang"
        register_impl = staticmethod(mypool.register)     # register(buffer, G)
        teardown_impl = staticmethod(mypool.teardown)     # teardown(buffer)

    TestMyPool = MyPoolMachine.TestCase

``style`` also takes the doors that reach CUDA by themselves, as ``kvreg run --style`` does:
``"ctypes"`` (libcudart through ``ctypes.CDLL``) and ``"driver"`` (``cuda.bindings.driver``'s
``cuMemHostRegister``), both ``register(ptr, nbytes, *, granularity, chunk_limit) -> ranges``
and ``teardown(ranges)``. The machine holds ``fake.patch()`` open for the whole lifecycle, so
the code's own loads reach the fake; the driver twins ``cuMemHostRegister`` /
``cuMemHostUnregister`` count as registration calls (faults are armed on both), and the same
rules judge every style.

``style = "mooncake"`` drives a Mooncake store instead (a fake ``MooncakeDistributedStore``,
released profile, set up over RDMA on one mlx5 NIC): ``register(store, ptr, nbytes, *,
max_mr_size, granularity) -> ranges`` and ``teardown(store, ranges)``, as ``kvreg run
--style mooncake`` calls them. The limit is the MR limit, a failing call is
``register_buffer`` returning -600 (INVALID_PARAMS), the live registrations are the store's
buffers, and the copy rule is skipped (the store moves bytes with put/get, not a batch copy).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.harness.cuda import reference
from kvreg.harness.cuda.checks import REGISTER_APIS, UNREGISTER_APIS
from kvreg.harness.cuda.styles import SELF_REACHING
from kvreg.harness.mooncake import reference as mooncake_reference
from kvreg.harness.run.contract import contract_of

__all__ = ["RegistrationMachine"]

_ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
_GiB = 1 << 30
_MACHINE_STYLES = ("generic", "sglang", *SELF_REACHING, "mooncake")
_INVALID_PARAMS = -600      # what the released store's register_buffer returns for a bad MR


class _Live:
    """A live registration, whichever fake holds it."""

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.size = size


class _Pool:
    def __init__(self, buffer: Any, page: int, pages: int, handle: Any) -> None:
        self.buffer = buffer
        self.page = page
        self.pages = pages
        self.handle = handle


class RegistrationMachine(RuleBasedStateMachine):
    """Lifecycle model; subclasses set ``style``, ``register_impl`` and ``teardown_impl``.

    ``style`` is "generic" (``register(cudart, ptr, nbytes, *, granularity, chunk_limit)``),
    "sglang" (``register(buffer, G)`` with cudart from ``torch.cuda.cudart()`` and the
    limit from SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB, in whole GiB), or "ctypes" / "driver"
    (``register(ptr, nbytes, *, granularity, chunk_limit)`` / ``teardown(ranges)``; the code
    loads libcudart or the driver binding itself), or "mooncake" (``register(store, ptr,
    nbytes, *, max_mr_size, granularity)`` / ``teardown(store, ranges)`` on a fake store;
    without ``register_impl`` it runs kvreg's Mooncake reference).
    """

    style: ClassVar[str] = "generic"
    register_impl: ClassVar[Callable[..., Any]] = staticmethod(reference.register)
    teardown_impl: ClassVar[Callable[..., Any]] = staticmethod(reference.teardown)
    profile: ClassVar[str] = "h200-r580"

    pools = Bundle("pools")

    def __init__(self) -> None:
        super().__init__()
        if self.style not in _MACHINE_STYLES:
            raise ValueError(f"{type(self).__name__}.style must be one of "
                             f"{', '.join(_MACHINE_STYLES)}; got {self.style!r}")
        self.fake = FakeCuda(self.profile)
        self.mooncake: Any = None
        self.store: Any = None
        if self.style == "mooncake":
            from kvreg.fakes.mooncake import FakeMooncake

            self.mooncake = FakeMooncake("released")
            self._patch = self.mooncake.patch()
            self.store = self.mooncake.store()
            rc = self.store.setup("node0", "P2PHANDSHAKE", 64 << 20, 16 << 20, "rdma",
                                  "mlx5_0", "127.0.0.1:50051")
            assert rc == 0, f"the fake store's setup returned {rc}"
        else:
            self._patch = self.fake.patch()
        self._patch.__enter__()
        self._old_env = os.environ.get(_ENV_CHUNK_GB)
        self.model: dict[int, tuple[int, int]] = {}   # base -> (nbytes, page) of live pools
        self.limits: dict[int, int] = {}              # base -> the limit it was registered under

    # -- calling the implementation in its style --------------------------------------------------
    def _impls(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        cls = type(self)
        if self.style == "mooncake" and cls.register_impl is reference.register:
            return mooncake_reference.register, mooncake_reference.teardown
        return cls.register_impl, cls.teardown_impl

    def _live(self) -> list[_Live]:
        if self.mooncake is not None:
            return [_Live(b.base, b.size) for b in self.mooncake.live_buffers()]
        return [_Live(r.base, r.size) for r in self.fake.live_registrations()]

    def _arm(self, fail_nth: int | None) -> list[Any]:
        if fail_nth is None:
            return []
        if self.mooncake is not None:
            return [self.mooncake.inject("register_buffer", nth=fail_nth,
                                         error=_INVALID_PARAMS)]
        return [self.fake.inject(api, nth=fail_nth, error=2) for api in sorted(REGISTER_APIS)]

    def _register(self, buffer: Any, page: int, limit: int) -> Any:
        # the contract keywords as kvreg run passes them: none or None where register's
        # signature declares no such contract (kvreg.harness.run.contract)
        register = self._impls()[0]
        contract = contract_of(self.style, register)
        if self.style == "mooncake":
            return register(self.store, buffer.data_ptr(), buffer.nbytes,
                            **contract.kwargs(max_mr_size=limit, granularity=page))
        if self.style == "sglang":
            os.environ[_ENV_CHUNK_GB] = str(limit // _GiB)
            register(buffer, page)
            return buffer
        keywords = contract.kwargs(granularity=page, chunk_limit=limit)
        if self.style in SELF_REACHING:
            return register(buffer.data_ptr(), buffer.nbytes, **keywords)
        return register(self.fake.torch, buffer.data_ptr(), buffer.nbytes, **keywords)

    def _teardown(self, pool: _Pool) -> None:
        if self.style == "mooncake":
            self._impls()[1](self.store, pool.handle)
        elif self.style == "sglang":
            type(self).teardown_impl(pool.buffer)
        elif self.style in SELF_REACHING:
            type(self).teardown_impl(pool.handle)
        else:
            type(self).teardown_impl(self.fake.torch, pool.handle)

    # -- rules --------------------------------------------------------------------------------
    @rule(target=pools, page_kib=st.sampled_from([4, 12, 96, 4392]),
          pages=st.integers(1, 2000), limit_gib=st.integers(1, 3),
          fail_nth=st.none() | st.integers(1, 4))
    def register(self, page_kib: int, pages: int, limit_gib: int,
                 fail_nth: int | None) -> Any:
        page = page_kib * 1024
        space = self.mooncake if self.mooncake is not None else self.fake
        buffer = space.virtual(page * pages, "uint8", name=f"pool{len(self.model)}")
        # the nth registration call fails (out-of-memory, 2 at both CUDA levels, whichever
        # door the code takes; -600 from a store's register_buffer)
        armed = self._arm(fail_nth)
        try:
            handle = self._register(buffer, page, limit_gib * _GiB)
        except Exception:
            fired = any(a.fired for a in armed)
            assert fired, "[unexpected-error] register raised without a failing call"
            mine = [r for r in self._live()
                    if buffer.data_ptr() <= r.base < buffer.data_ptr() + buffer.nbytes]
            assert not mine, (f"[not-rolled-back] failed register left {len(mine)} chunk(s) "
                              "registered")
            return _multiple_none()
        finally:
            (self.mooncake or self.fake).faults.clear()
        if any(a.fired for a in armed):
            raise AssertionError("[error-swallowed] a registration call failed but register() "
                                 "returned normally")
        self.model[buffer.data_ptr()] = (buffer.nbytes, page)
        self.limits[buffer.data_ptr()] = limit_gib * _GiB
        return _Pool(buffer, page, pages, handle)

    @rule(pool=pools)
    def copy_every_page(self, pool: _Pool) -> None:
        if self.mooncake is not None:
            return          # a store moves bytes by put/get; registration is judged below
        rt = self.fake.runtime
        n = pool.pages
        _, dev = rt.cudaMalloc(pool.page)
        _, stream = rt.cudaStreamCreate()
        attrs = rt.cudaMemcpyAttributes()
        attrs.srcAccessOrder = 1
        srcs = pool.buffer.data_ptr() + np.arange(n, dtype=np.uint64) * pool.page
        (err,) = rt.cudaMemcpyBatchAsync(np.full(n, dev, np.uint64), srcs,
                                         np.full(n, pool.page, np.int64), n, [attrs], [0], 1,
                                         stream)[:1]
        rt.cudaStreamDestroy(stream)
        rt.cudaFree(dev)
        fault = self.fake.cuda_runtime.last_copy_fault
        assert int(err) == 0, "[transfer-failed] " + (
            fault.describe() if fault else f"batch copy failed: {int(err)}")

    @rule(pool=consumes(pools))
    def release_twice(self, pool: _Pool) -> None:
        """Teardown, then again where the code declares a repeatable teardown (the real
        machine tears down twice only where the code's own caller does)."""
        self._teardown(pool)
        register, teardown = self._impls()
        ours = teardown in (reference.teardown, mooncake_reference.teardown)
        if contract_of("reference" if ours else self.style, register, teardown).repeatable:
            self._teardown(pool)
        del self.model[pool.buffer.data_ptr()]
        if self.mooncake is not None:
            codes = [c for e in self.mooncake.trace if e.api == "unregister_buffer"
                     for c in [e.code] if c is not None]
        else:
            codes = [c for api in sorted(UNREGISTER_APIS) for c in self.fake.trace.codes(api)]
        assert all(c == 0 for c in codes), f"[unregister-not-a-live-base] an unregister " \
                                           f"failed: {codes}"

    # -- invariants --------------------------------------------------------------------------------
    @invariant()
    def registrations_cover_exactly_the_live_pools(self) -> None:
        covered: dict[int, int] = {}
        for r in self._live():
            owner = next((b for b, (n, _) in self.model.items() if b <= r.base < b + n), None)
            assert owner is not None, (f"[range-outside-buffer] registration at {r.base:#x} "
                                       "belongs to no live pool")
            nbytes, page = self.model[owner]
            assert r.base + r.size <= owner + nbytes, ("[range-outside-buffer] registration "
                                                       "runs past its pool")
            if self.mooncake is not None and r.size > self.limits[owner]:
                raise AssertionError(f"[mr-over-limit] an MR of {r.size} bytes is above the "
                                     f"MR limit {self.limits[owner]}")
            seam = r.base - owner
            assert seam % page == 0, (f"[seams-aligned] a seam at offset {seam} cuts page "
                                      f"{seam // page} of {page} bytes")
            covered[owner] = covered.get(owner, 0) + r.size
        for base, (nbytes, _) in self.model.items():
            assert covered.get(base, 0) == nbytes, (f"[registered] pool at {base:#x} is not "
                                                    "fully registered")

    def teardown(self) -> None:
        try:
            for base in list(self.model):
                del self.model[base]
        finally:
            if self.mooncake is not None:
                self.mooncake.close_all()
            self._patch.__exit__(None, None, None)
            if self._old_env is None:
                os.environ.pop(_ENV_CHUNK_GB, None)
            else:
                os.environ[_ENV_CHUNK_GB] = self._old_env


def _multiple_none() -> Any:
    """A failed register adds nothing to the bundle."""
    from hypothesis.stateful import multiple

    return multiple()
