"""kvreg.fakes.verbs: a fake RDMA fabric behind the pyverbs API (docs/mooncake-verbs.md §4, §5).

``Fabric`` holds nodes (simulated processes) with NICs; ``node.pyverbs`` — or, inside
``fabric.patch(node)``, a plain ``import pyverbs`` — gives the pyverbs surface that
registration and transfer code uses: devices, contexts, PDs, MRs with the errno rules of
``ibv_reg_mr`` (an unmapped range fails with EFAULT, as pinning does), RC QPs whose RDMA
WRITE/READ/SEND move the bytes of registered process memory in place and fail with the
completions of real NICs. Every fabric is independent; nothing here is global except the
fault-point names (``verbs.reg_mr``, ``verbs.dereg_mr``, ``verbs.post_send``,
``verbs.post_recv``, ``verbs.completion``) and the cached view of this process's mappings
(:mod:`kvreg.fakes.procmaps`). What is not modelled is listed by ``python -m
kvreg.fakes.verbs.coverage``.
"""

from __future__ import annotations

from .enums import ibv_access_flags, ibv_qp_state, ibv_wc_status, ibv_wr_opcode
from .errors import (
    NotModelledError,
    PyverbsError,
    PyverbsRDMAError,
    PyverbsUserError,
    UntrackedMemoryError,
)
from .fabric import PAGE_SIZE, Fabric, LiveMR, MrRecord, Nic, Node
from .profiles import NIC_PROFILES, NicProfile, get_nic_profile

__all__ = ["NIC_PROFILES", "PAGE_SIZE", "Fabric", "LiveMR", "MrRecord", "Nic", "NicProfile",
           "Node", "NotModelledError", "PyverbsError", "PyverbsRDMAError", "PyverbsUserError",
           "UntrackedMemoryError", "get_nic_profile", "ibv_access_flags", "ibv_qp_state",
           "ibv_wc_status", "ibv_wr_opcode"]
