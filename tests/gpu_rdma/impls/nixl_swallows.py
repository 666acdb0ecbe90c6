"""Broken: each kind's list registered in a try that logs a failure and goes on (the
exception swallowed), as code written for return codes that never checks them."""

import logging

from descriptor_lists import KINDS, of_kind, teardown

__all__ = ["register", "teardown"]

logger = logging.getLogger(__name__)


def register(agent, buffers):
    done = []
    for kind in KINDS:
        rows = of_kind(buffers, kind)
        if not rows:
            continue
        descs = agent.get_reg_descs(rows, kind)
        try:
            agent.register_memory(descs)
            done.append(descs)
        except Exception as exc:
            logger.debug("NIXL registration of %s failed: %s", kind, exc)
    return done

