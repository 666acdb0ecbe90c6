"""``pyverbs.cq``: CQ and WC (mooncake-verbs.md §4.5).

Protection errors are not raised by ``post_send``: they arrive as completions with a bad
status (§5.3), which is why code must poll and check ``wc.status``. ``poll`` is
non-blocking and returns ``(npolled, [WC, ...])``. Polling a completion frees the
send-queue slots of its QP up to that WR.
"""

from __future__ import annotations

import errno
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from . import enums as V
from .device import Context
from .errors import PyverbsRDMAError, PyverbsUserError

__all__ = ["CQ", "WC"]


class WC:
    """One work completion; ``status`` is an ``ibv_wc_status`` value (§4.6)."""

    def __init__(self, wr_id: int = 0, status: int = 0, opcode: int = 0, vendor_err: int = 0,
                 byte_len: int = 0, qp_num: int = 0, src_qp: int = 0, imm_data: int = 0,
                 wc_flags: int = 0, pkey_index: int = 0, slid: int = 0, sl: int = 0,
                 dlid_path_bits: int = 0) -> None:
        self.wr_id = wr_id
        self.status = status
        self.opcode = opcode
        self.vendor_err = vendor_err
        self.byte_len = byte_len
        self.qp_num = qp_num
        self.src_qp = src_qp
        self.imm_data = imm_data
        self.wc_flags = wc_flags
        self.pkey_index = pkey_index
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits

    def __repr__(self) -> str:
        try:
            status = V.ibv_wc_status(self.status).name
        except ValueError:
            status = str(self.status)
        return (f"WC(wr_id={self.wr_id}, status={status}, opcode={self.opcode}, "
                f"byte_len={self.byte_len}, qp_num={self.qp_num:#x})")


class CQ:
    """A completion queue of ``cqe`` entries on a Context."""

    def __init__(self, creator: Context, cqe: int, cq_context: Any = None,
                 channel: Any = None, comp_vector: int = 0) -> None:
        self._closed = True
        if not isinstance(creator, Context):
            raise PyverbsUserError(f"CQ needs a Context, got {type(creator).__name__}")
        if channel is not None:
            raise PyverbsUserError("kvreg's fake pyverbs does not model completion channels")
        max_cqe = int(creator.nic.attr["max_cqe"])
        if not isinstance(cqe, int) or cqe < 1 or cqe > max_cqe:
            raise PyverbsRDMAError("Failed to create a CQ", errno.EINVAL)
        self._ctx = creator
        self._cqe = cqe
        self.cq_context = cq_context
        self.comp_vector = comp_vector
        # (WC, retire callback): polling a WC frees its QP's send-queue slots
        self._entries: deque[tuple[WC, Callable[[], None] | None]] = deque()
        self._closed = False
        creator.add_ref(self)
        self._refs: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def cqe(self) -> int:
        return self._cqe

    @property
    def ctx(self) -> Context:
        return self._ctx

    def push(self, wc: WC, retire: Callable[[], None] | None = None) -> None:
        """Queue a completion (the fake's data path calls this)."""
        self._entries.append((wc, retire))

    def __len__(self) -> int:
        return len(self._entries)

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        """Up to ``num_entries`` completions, oldest first; never blocks."""
        if self._closed:
            raise PyverbsRDMAError("Failed to poll CQ", errno.EINVAL)
        out: list[WC] = []
        while self._entries and len(out) < num_entries:
            wc, retire = self._entries.popleft()
            if retire is not None:
                retire()
            out.append(wc)
        return len(out), out

    def add_ref(self, obj: Any) -> None:
        self._refs.add(obj)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        for obj in list(self._refs):
            obj.close()
        self._entries.clear()
        self._closed = True

    def __enter__(self) -> CQ:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
