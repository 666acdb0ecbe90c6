"""How each implementation style is called on the mooncake target: MRs through a Mooncake
store. Only kvreg's reference and the mooncake style register MRs; ``--teardown close``
tears down by closing the store. Loading and signatures: harness/run/implementation.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvreg.harness.run.contract import Contract, StyleContract

from . import reference

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation, StyleCall

__all__ = ["STYLE_CALLS", "STYLE_CONTRACTS", "computes_own_mr_limit", "register_mr",
           "registers_mrs", "teardown_mr"]

_P = None
# how the mooncake style calls the two functions (implementation.StyleCall)
STYLE_CALLS: dict[str, tuple[StyleCall, StyleCall]] = {
    "mooncake": (("register(store, ptr, nbytes, *, max_mr_size, granularity)", (_P, 0, 0),
                  ("max_mr_size", "granularity")),
                 ("teardown(store, ranges)", (_P, _P), ())),
}


def _mooncake_text(contract: Contract) -> str:
    if contract.rejects:
        return (f"contract: max_mr_size and granularity declared by {contract.signature}: an "
                "object stride above max_mr_size refused before any call; MRs judged against "
                "the store profile")
    return (f"contract: none declared by {contract.signature}: judged against the store "
            "profile only (the scenarios of a stride above the MR limit are skipped)")


# how the mooncake style declares its contract (run/contract.py): by register's signature;
# the MR limit it gets is the store's (a fact of the real store, not a promise), so a
# max_mr_size defaulting to None still gets it, and no chunk-over-limit rule judges it
STYLE_CONTRACTS: dict[str, StyleContract] = {
    "mooncake": StyleContract(keywords=("max_mr_size", "granularity"), limit_word="MR-limit",
                              refused="an object stride above the MR limit", limit_rule=False,
                              none_default_gets_value=True, register_text=_mooncake_text,
                              closes="a Mooncake store"),
}


def register_mr(impl: Implementation, store: Any, ptr: int, nbytes: int, *,
                max_mr_size: int | None, granularity: int | None) -> Any:
    """Register one buffer with the store; returns the ranges teardown_mr needs."""
    if impl.style == "reference":
        return reference.register(store, ptr, nbytes, max_mr_size=max_mr_size,
                                  granularity=granularity)
    if impl.style == "mooncake":
        assert impl.register_fn is not None
        return impl.register_fn(store, ptr, nbytes, **impl.contract.kwargs(
            max_mr_size=max_mr_size, granularity=granularity))
    from kvreg.harness.run.implementation import ImplementationError  # the runner's, when it runs

    raise ImplementationError(f"style {impl.style!r} registers CUDA buffers, not MRs "
                              "with a Mooncake store (use --style mooncake)")


def teardown_mr(impl: Implementation, store: Any, ranges: Any) -> Any:
    """Unregister what register_mr returned (called once per teardown round that the
    contract lets run)."""
    if impl.teardown_close:
        return store.close()
    if impl.style == "reference":
        return reference.teardown(store, ranges)
    assert impl.teardown_fn is not None
    return impl.teardown_fn(store, ranges)


def computes_own_mr_limit(impl: Implementation) -> bool:
    """Whether register_mr accepts ``max_mr_size=None`` and then computes the limit itself:
    the reference does; a mooncake-style function says so by giving the parameter the
    default None, or by not taking it."""
    if impl.style == "reference":
        return True
    return impl.style == "mooncake" and not impl.contract.limit


def registers_mrs(impl: Implementation) -> bool:
    """Whether this implementation can run Mooncake scenarios."""
    return impl.style in ("reference", "mooncake")
