"""``pyverbs.cq``: CQ, WC, CompChannel, and the extended CQEX (docs/mooncake-verbs.md §4.5).

Protection errors are not raised by ``post_send``: they arrive as completions with a bad
status (§5.3), which is why code must poll and check ``wc.status``. ``poll`` is
non-blocking and returns ``(npolled, [WC, ...])``. Polling a completion frees the
send-queue slots of its QP up to that WR.

Completion events: ``req_notify`` arms a CQ made with a ``CompChannel``; the next
completion queues one event on the channel, which ``get_cq_event`` returns and
``ack_events`` acknowledges (libibverbs ``ibv_req_notify_cq`` / ``ibv_get_cq_event`` /
``ibv_ack_cq_events``). The real ``get_cq_event`` blocks until an event arrives; the fake
never blocks: with no event pending it fails with EAGAIN, as a channel whose fd is
non-blocking does.

``CQEX`` (``ibv_create_cq_ex``) is polled with ``start_poll`` / ``poll_next`` /
``end_poll`` and the ``read_*`` accessors (``ibv_start_poll`` etc.): 0 when a completion
is current, ENOENT when none is left, as pyverbs returns them.
"""

from __future__ import annotations

import errno
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from . import enums as V
from .device import Context
from .errors import PyverbsRDMAError, PyverbsUserError, StandIns

__all__ = ["CQ", "CQEX", "WC", "CompChannel", "CqInitAttrEx", "PollCqAttr"]


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


class CompChannel:
    """``ibv_create_comp_channel``: where armed CQs deliver completion events."""

    def __init__(self, creator: Context) -> None:
        self._closed = True
        if not isinstance(creator, Context):
            raise PyverbsUserError(f"CompChannel needs a Context, got "
                                   f"{type(creator).__name__}")
        if creator.closed:
            raise PyverbsRDMAError("Failed to create a completion channel", errno.EBADF)
        self._ctx = creator
        self._events: deque[CQ] = deque()
        self._closed = False
        creator.add_ref(self)

    def notify(self, cq: CQ) -> None:
        """An armed CQ got a completion (the fake's data path calls this)."""
        self._events.append(cq)

    def get_cq_event(self, expected_cq: CQ) -> None:
        """The next event; it must be ``expected_cq``'s, as pyverbs checks."""
        if self._closed:
            raise PyverbsRDMAError("Failed to get CQ event", errno.EBADF)
        if not self._events:
            # the real call blocks; the fake's channel behaves as a non-blocking fd
            raise PyverbsRDMAError("Failed to get CQ event", errno.EAGAIN)
        cq = self._events.popleft()
        cq.unacked += 1
        if cq is not expected_cq:
            raise PyverbsRDMAError("Received event on an unexpected CQ")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._events.clear()
        self._closed = True

    def __enter__(self) -> CompChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cqe_count(cqe: Any) -> int:
    # pyverbs (Cython) converts cqe to a C int with __int__: 10.0 is 10
    if isinstance(cqe, str | bytes) or not hasattr(cqe, "__int__"):
        raise TypeError("an integer is required")
    return int(cqe)


class CQ(StandIns):
    """A completion queue of ``cqe`` entries on a Context."""

    NOT_MODELLED_ATTRS = frozenset({"resize"})

    def __init__(self, creator: Context, cqe: int, cq_context: Any = None,
                 channel: CompChannel | None = None, comp_vector: int = 0) -> None:
        self._closed = True
        if not isinstance(creator, Context):
            raise PyverbsUserError(f"CQ needs a Context, got {type(creator).__name__}")
        cqe = _cqe_count(cqe)
        comp_vector = _cqe_count(comp_vector)
        if channel is not None and not isinstance(channel, CompChannel):
            raise TypeError(f"channel must be a CompChannel, got {type(channel).__name__}")
        max_cqe = int(creator.nic.attr["max_cqe"])
        # uverbs create_cq: comp_vector >= num_comp_vectors -> EINVAL; cqe out of range
        if cqe < 1 or cqe > max_cqe or not 0 <= comp_vector < creator.num_comp_vectors:
            raise PyverbsRDMAError("Failed to create a CQ", errno.EINVAL)
        self._ctx = creator
        self._cqe = cqe
        self.cq_context = cq_context
        self.comp_vector = comp_vector
        self._channel = channel
        self._armed = False
        self.unacked = 0
        # (WC, retire callback): polling a WC frees its QP's send-queue slots
        self._entries: deque[tuple[WC, Callable[[], None] | None]] = deque()
        self._closed = False
        creator.add_ref(self)
        self._refs: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def comp_channel(self) -> CompChannel | None:
        return self._channel

    def req_notify(self, solicited_only: bool = False) -> None:
        """Arm the CQ: the next completion raises one event on its channel."""
        if self._closed:
            raise PyverbsRDMAError("Request notify CQ returned", errno.EINVAL)
        self._armed = True

    def ack_events(self, num_events: int) -> None:
        """Acknowledge events returned by ``get_cq_event``."""
        self.unacked = max(0, self.unacked - int(num_events))

    @property
    def cqe(self) -> int:
        return self._cqe

    @property
    def ctx(self) -> Context:
        return self._ctx

    def push(self, wc: WC, retire: Callable[[], None] | None = None) -> None:
        """Queue a completion (the fake's data path calls this)."""
        self._entries.append((wc, retire))
        if self._armed and self._channel is not None:
            self._armed = False
            self._channel.notify(self)

    def __len__(self) -> int:
        return len(self._entries)

    def clean(self, qp_num: int) -> None:
        """Drop the unpolled completions of one QP: what moving it to RESET does
        (rdma-core providers/mlx5/verbs.c ``mlx5_modify_qp`` → ``mlx5_cq_clean``)."""
        kept = [(wc, retire) for wc, retire in self._entries if wc.qp_num != qp_num]
        self._entries.clear()
        self._entries.extend(kept)

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


class CqInitAttrEx:
    """``ibv_cq_init_attr_ex``: the CQEX's size, channel, vector and ``wc_flags``."""

    def __init__(self, cqe: int = 100, channel: CompChannel | None = None,
                 comp_vector: int = 0, wc_flags: int = 0, comp_mask: int = 0,
                 flags: int = 0, parent_domain: Any = None) -> None:
        self.cqe = cqe
        self.cq_context: Any = None
        self.comp_channel = channel
        self.comp_vector = comp_vector
        self.wc_flags = wc_flags
        self.comp_mask = comp_mask
        self.flags = flags
        self.parent_domain = parent_domain


class PollCqAttr:
    """``ibv_poll_cq_attr`` (``comp_mask`` must be 0)."""

    def __init__(self) -> None:
        self.comp_mask = 0


class CQEX(CQ, StandIns):
    """``ibv_create_cq_ex``: polled one completion at a time (``start_poll``...)."""

    NOT_MODELLED_ATTRS = frozenset({"read_completion_wallclock_ns", "read_cvlan",
                                    "read_flow_tag", "read_timestamp", "read_tm_info",
                                    "resize"})

    def __init__(self, creator: Context, init_attr: CqInitAttrEx | None = None) -> None:
        attr = init_attr if init_attr is not None else CqInitAttrEx()
        super().__init__(creator, attr.cqe, attr.cq_context, attr.comp_channel,
                         attr.comp_vector)
        self.wc_flags = int(attr.wc_flags)
        self._cur: WC | None = None
        self._polling = False

    def _next(self) -> int:
        n, wcs = self.poll(1)
        self._cur = wcs[0] if n else None
        return 0 if n else errno.ENOENT

    def start_poll(self, attr: PollCqAttr) -> int:
        """0 with a current completion, ENOENT when the CQ is empty."""
        if self._polling:
            raise PyverbsRDMAError("Failed to poll CQ", errno.EINVAL)
        rc = self._next()
        self._polling = rc == 0
        return rc

    def poll_next(self) -> int:
        """0 with the next completion current, ENOENT when none is left."""
        if not self._polling:
            raise PyverbsRDMAError("Failed to poll CQ", errno.EINVAL)
        return self._next()

    def end_poll(self) -> None:
        self._polling = False
        self._cur = None

    def _wc(self) -> WC:
        if self._cur is None:
            raise PyverbsUserError("no current completion: call start_poll() first")
        return self._cur

    @property
    def status(self) -> int:
        """The current completion's status (0, the zeroed field, before any poll)."""
        return self._cur.status if self._cur is not None else 0

    @property
    def wr_id(self) -> int:
        return self._cur.wr_id if self._cur is not None else 0

    def read_opcode(self) -> int:
        return self._wc().opcode

    def read_vendor_err(self) -> int:
        return self._wc().vendor_err

    def read_byte_len(self) -> int:
        return self._wc().byte_len

    def read_imm_data(self) -> int:
        return self._wc().imm_data

    def read_qp_num(self) -> int:
        return self._wc().qp_num

    def read_src_qp(self) -> int:
        return self._wc().src_qp

    def read_wc_flags(self) -> int:
        return self._wc().wc_flags

    def read_slid(self) -> int:
        return self._wc().slid

    def read_sl(self) -> int:
        return self._wc().sl

    def read_dlid_path_bits(self) -> int:
        return self._wc().dlid_path_bits
