"""How each implementation style is called on the ``gpu_rdma`` target.

``mooncake_engine``: ``register(engine, buffers) -> handle`` and ``teardown(engine,
handle) -> None``, where ``engine`` is an initialized ``mooncake.engine.TransferEngine``
(rdma protocol, the scenario's NICs) and ``buffers`` a :class:`~.buffers.KvBuffers` (one
node's KV, aux and state buffers). ``handle`` is whatever register returns; kvreg passes it
back to teardown untouched.

``nixl``: ``register(agent, buffers) -> handle`` and ``teardown(agent, handle) -> None``,
where ``agent`` is the node's ``nixl._api.nixl_agent`` (named for the node, the UCX
backend) and ``buffers`` the same KvBuffers (each entry's ``kind`` and ``device`` are
NIXL's descriptor fields). A scenario's ``transport`` option says which of the two it runs;
kvreg's reference runs both. Loading and signatures: harness/run/implementation.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvreg.harness.run.contract import Contract, StyleContract

from . import nixl_reference, reference

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation, StyleCall

    from .buffers import KvBuffers

__all__ = ["STYLE_CALLS", "STYLE_CONTRACTS", "TRANSPORT", "register_buffers",
           "registers_gpu_buffers", "teardown_buffers", "transport_skip_reason"]

_P = None
# how the mooncake_engine style calls the two functions (implementation.StyleCall)
STYLE_CALLS: dict[str, tuple[StyleCall, StyleCall]] = {
    "mooncake_engine": (("register(engine, buffers)", (_P, _P), ()),
                        ("teardown(engine, handle)", (_P, _P), ())),
    "nixl": (("register(agent, buffers)", (_P, _P), ()),
             ("teardown(agent, handle)", (_P, _P), ())),
}
# the transport each style registers with (the scenario's ``transport`` option)
TRANSPORT = {"mooncake_engine": "mooncake", "nixl": "nixl"}



def _engine_text(contract: Contract) -> str:
    # no keyword to read: the line says what the verdicts rest on instead of an empty
    # "declared by" (the style's register takes none)
    return ("contract: none (register(engine|agent, buffers) takes no limit): judged by what "
            "the transfer engine or NIXL agent accepts and what the transfers reach")


# the style declares no keyword contract: what it must do is the engine's (the rules)
STYLE_CONTRACTS: dict[str, StyleContract] = {
    "mooncake_engine": StyleContract(keywords=(), limit_rule=False, register_text=_engine_text),
    "nixl": StyleContract(keywords=(), limit_rule=False, register_text=_engine_text),
}



def register_buffers(impl: Implementation, engine: Any, buffers: KvBuffers) -> Any:
    """Register one node's buffers through the implementation (or kvreg's reference)."""
    if impl.style == "reference":
        if _is_agent(engine):
            return nixl_reference.register(engine, buffers)
        return reference.register(engine, buffers)
    if impl.style in TRANSPORT:
        assert impl.register_fn is not None
        return impl.register_fn(engine, buffers)
    from kvreg.harness.run.implementation import ImplementationError  # the runner's, when it runs

    raise ImplementationError(f"style {impl.style!r} does not register GPU KV buffers with "
                              "a transfer engine or a NIXL agent (use --style mooncake_engine "
                              "or nixl)")


def teardown_buffers(impl: Implementation, engine: Any, handle: Any) -> Any:
    """Release what register_buffers returned (once per teardown round that runs)."""
    if impl.style == "reference":
        if _is_agent(engine):
            return nixl_reference.teardown(engine, handle)
        return reference.teardown(engine, handle)
    assert impl.teardown_fn is not None
    return impl.teardown_fn(engine, handle)


def registers_gpu_buffers(impl: Implementation) -> bool:
    """Whether this implementation can run gpu_rdma scenarios."""
    return impl.style == "reference" or impl.style in TRANSPORT


def transport_skip_reason(impl: Implementation, transport: str) -> str | None:
    """Why a scenario of ``transport`` does not run this implementation (None: it does)."""
    mine = TRANSPORT.get(impl.style, transport)
    if mine == transport:
        return None
    style = next(s for s, t in TRANSPORT.items() if t == transport)
    return (f"the scenario registers through {transport} (transport = {transport!r}); the "
            f"{impl.style} style registers through {mine}: use --style {style}")


def _is_agent(obj: Any) -> bool:
    """Whether the node's registrar is a NIXL agent (else a Transfer Engine)."""
    from kvreg.fakes.nixl.api import nixl_agent
    return isinstance(obj, nixl_agent)
