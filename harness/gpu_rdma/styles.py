"""How each implementation style is called on the ``gpu_rdma`` target.

``mooncake_engine``: ``register(engine, buffers) -> handle`` and ``teardown(engine,
handle) -> None``, where ``engine`` is an initialized ``mooncake.engine.TransferEngine``
(rdma protocol, the scenario's NICs) and ``buffers`` a :class:`~.buffers.KvBuffers` (one
node's KV, aux and state buffers). ``handle`` is whatever register returns; kvreg passes it
back to teardown untouched. A ``nixl`` style would take the same KvBuffers with an agent.
Loading and signatures: harness/run/implementation.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvreg.harness.run.contract import StyleContract

from . import reference

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation, StyleCall

    from .buffers import KvBuffers

__all__ = ["STYLE_CALLS", "STYLE_CONTRACTS", "register_buffers", "registers_gpu_buffers",
           "teardown_buffers"]

_P = None
# how the mooncake_engine style calls the two functions (implementation.StyleCall)
STYLE_CALLS: dict[str, tuple[StyleCall, StyleCall]] = {
    "mooncake_engine": (("register(engine, buffers)", (_P, _P), ()),
                        ("teardown(engine, handle)", (_P, _P), ())),
}

# the style declares no keyword contract: what it must do is the engine's (the rules)
STYLE_CONTRACTS: dict[str, StyleContract] = {
    "mooncake_engine": StyleContract(keywords=(), limit_rule=False),
}



def register_buffers(impl: Implementation, engine: Any, buffers: KvBuffers) -> Any:
    """Register one node's buffers through the implementation (or kvreg's reference)."""
    if impl.style == "reference":
        return reference.register(engine, buffers)
    if impl.style == "mooncake_engine":
        assert impl.register_fn is not None
        return impl.register_fn(engine, buffers)
    from kvreg.harness.run.implementation import ImplementationError  # the runner's, when it runs

    raise ImplementationError(f"style {impl.style!r} does not register GPU KV buffers with "
                              "a transfer engine (use --style mooncake_engine)")


def teardown_buffers(impl: Implementation, engine: Any, handle: Any) -> Any:
    """Release what register_buffers returned (once per teardown round that runs)."""
    if impl.style == "reference":
        return reference.teardown(engine, handle)
    assert impl.teardown_fn is not None
    return impl.teardown_fn(engine, handle)


def registers_gpu_buffers(impl: Implementation) -> bool:
    """Whether this implementation can run gpu_rdma scenarios."""
    return impl.style in ("reference", "mooncake_engine")
