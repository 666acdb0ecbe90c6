"""How each implementation style is called on the ``gpu_rdma`` target.

``mooncake_engine``: ``register(engine, buffers) -> handle`` and ``teardown(engine,
handle) -> None``, where ``engine`` is an initialized ``mooncake.engine.TransferEngine``
(rdma protocol, the scenario's NICs) and ``buffers`` a :class:`~.buffers.KvBuffers` (one
node's KV, aux and state buffers). ``handle`` is whatever register returns; kvreg passes it
back to teardown untouched. A ``nixl`` style would take the same KvBuffers with an agent.
Loading and signatures: harness/run/implementation.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvreg.harness.run.contract import StyleContract

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import StyleCall

__all__ = ["STYLE_CALLS", "STYLE_CONTRACTS"]

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

