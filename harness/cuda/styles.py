"""How each implementation style is called on the cuda target (cudaHostRegister of a host
pool): the granularity it gets, its register / teardown call, and the styles that cannot
express a scenario's chunk limit.

The sglang style gets the granularity the real pool passes (None where upstream registers
in one call); the reference gets kvreg's copy unit, because it chunks every layout; the
generic, ctypes and driver styles get the pool's granularity where it passes one and
kvreg's copy unit where it passes None (a None would leave such an implementation no safe
way to chunk a pool above the per-call ceiling). Loading and signatures: run/implementation.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvreg.harness.plan.chunking import reference_unit
from kvreg.harness.pools import BufferSpec
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.run.contract import Contract, StyleContract

from . import reference
from .reference import ENV_CHUNK_GB

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation, StyleCall

__all__ = ["SELF_REACHING", "STYLE_CALLS", "STYLE_CONTRACTS", "check_limit", "granularity",
           "register", "teardown"]

GiB = 1 << 30
# styles whose code reaches CUDA by itself: register(ptr, nbytes, ...) / teardown(ranges)
SELF_REACHING = ("ctypes", "driver")
_P = None
# how each style this target runs calls the two functions (implementation.StyleCall)
STYLE_CALLS: dict[str, tuple[StyleCall, StyleCall]] = {
    "sglang": (("register(buffer, granularity)", (_P, _P), ()),
               ("teardown(buffer)", (_P,), ())),
    "generic": (("register(cudart, ptr, nbytes, *, granularity, chunk_limit)", (_P, 0, 0),
                 ("granularity", "chunk_limit")),
                ("teardown(cudart, ranges)", (_P, _P), ())),
    "ctypes": (("register(ptr, nbytes, *, granularity, chunk_limit)", (0, 0),
                ("granularity", "chunk_limit")),
               ("teardown(ranges)", (_P,), ())),
}
STYLE_CALLS["driver"] = STYLE_CALLS["ctypes"]


def _sglang_text(contract: Contract) -> str:
    return (f"contract: chunk limit from {ENV_CHUNK_GB} (sglang style): each call within it "
            "where a granularity is passed, a granularity above it refused before any call")


def _declared_text(contract: Contract) -> str:
    """A register that declares its contract by its signature (generic, ctypes, driver)."""
    if not contract.limit:
        return (f"contract: none declared by {contract.signature}: judged against the device "
                "profile only")
    return (f"contract: chunk_limit{' and granularity' if contract.granularity else ''} "
            f"declared by {contract.signature}: each call within chunk_limit"
            + (", a granularity above it refused before any call" if contract.rejects else
               "; no granularity declared, so the scenarios of a granularity above the "
               "limit are skipped"))


_DECLARED = StyleContract(limit_word="chunk-limit",
                          refused="a granularity above the chunk limit",
                          register_text=_declared_text)
# how each style declares its contract (run/contract.py): the sglang style by SGLang's own
# code (the limit from the environment, a repeatable teardown, docs/pools.md §1.1); the
# others by register's signature and teardown's ``repeatable`` attribute
STYLE_CONTRACTS: dict[str, StyleContract] = {
    "sglang": StyleContract(source=f"environment:{ENV_CHUNK_GB}", limit_word="chunk-limit",
                            refused="a granularity above the chunk limit", repeatable=True,
                            limit_with_granularity_only=True, register_text=_sglang_text),
    "generic": _DECLARED, "ctypes": _DECLARED, "driver": _DECLARED,
}


def granularity(impl: Implementation, spec: BufferSpec, limit: int,
                families: Sequence[ExtentFamily] | None, index: int) -> int | None:
    """The granularity register gets (None too where its register declares none); a copy
    unit is chosen under ``limit`` only where the register declares a chunk limit."""
    if impl.style in ("generic", *SELF_REACHING):
        if not impl.contract.granularity:
            return None
        if spec.granularity is None:
            return reference_unit(spec, limit if impl.contract.limit else 1 << 62,
                                  families, index)[0]
    if impl.style == "reference":
        return reference_unit(spec, limit, families, index)[0]
    return spec.granularity


def register(impl: Implementation, cudart: Any, buffer: Any, spec: BufferSpec,
             granularity: int | None, limit: int) -> Any:
    """Register one buffer; returns the handle teardown needs."""
    if impl.style == "reference":
        return reference.register(cudart, int(buffer.data_ptr()), spec.nbytes,
                                  granularity=granularity, chunk_limit=limit)
    assert impl.register_fn is not None
    keywords = impl.contract.kwargs(granularity=granularity, chunk_limit=limit)
    if impl.style == "generic":
        return impl.register_fn(cudart, int(buffer.data_ptr()), spec.nbytes, **keywords)
    if impl.style in SELF_REACHING:
        return impl.register_fn(int(buffer.data_ptr()), spec.nbytes, **keywords)
    if impl.style == "sglang":
        impl.register_fn(buffer, granularity)   # upstream passes G positionally
        return buffer
    from kvreg.harness.run.implementation import ImplementationError  # the runner's, when it runs

    raise ImplementationError(f"style {impl.style!r} does not register CUDA buffers")


def teardown(impl: Implementation, cudart: Any, buffer: Any, handle: Any) -> Any:
    """Undo what :func:`register` returned for one buffer."""
    if impl.style == "reference":
        return reference.teardown(cudart, handle)
    assert impl.teardown_fn is not None
    if impl.style == "generic":
        return impl.teardown_fn(cudart, handle)
    if impl.style in SELF_REACHING:
        return impl.teardown_fn(handle)
    return impl.teardown_fn(buffer)


def check_limit(impl: Implementation, limit: int) -> str | None:
    """Why this style cannot run a scenario of this target with ``limit``, or None."""
    if impl.style == "mooncake":
        return ("the mooncake style registers with a Mooncake store; this scenario "
                "registers with CUDA")
    if impl.style == "sglang" and limit % GiB:
        return (f"the sglang style reads whole GiB from SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB;"
                f" this scenario's limit is {limit} bytes")
    return None
