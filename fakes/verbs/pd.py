"""``pyverbs.pd.PD``: the protection domain that MRs and QPs belong to (§4.4).

An MR's keys are only usable by QPs of the same PD: the fake's data path checks it, so code
that registers on one PD and posts on another gets the protection error real NICs give.
"""

from __future__ import annotations

import errno
import weakref
from typing import TYPE_CHECKING, Any

from .device import Context
from .enums import ibv_access_flags
from .errors import PyverbsRDMAError, PyverbsUserError, StandIns

if TYPE_CHECKING:
    from .node import Nic

__all__ = ["PD"]


class PD(StandIns):
    """``ibv_alloc_pd`` on a Context; closing it closes its MRs and QPs (weakrefs)."""

    NOT_MODELLED_ATTRS = frozenset({"handle", "pd", "unimport"})

    def __init__(self, creator: Context, **kwargs: Any) -> None:
        self._closed = True
        self._children: weakref.WeakSet[Any] = weakref.WeakSet()
        if kwargs.get("handle") is not None:
            raise PyverbsUserError("kvreg's fake pyverbs does not model importing a PD "
                                   "(handle=)")
        if not isinstance(creator, Context):
            raise PyverbsUserError(f"PD needs a Context, got {type(creator).__name__}")
        if creator.closed:
            raise PyverbsRDMAError("Failed to allocate PD", errno.EBADF)
        self._ctx = creator
        self._nic: Nic = creator.nic
        self._id = self._nic.new_pd_id()
        self._closed = False
        creator.add_ref(self)

    @property
    def ctx(self) -> Context:
        return self._ctx

    @property
    def nic(self) -> Nic:
        """The fake device (not a pyverbs attribute)."""
        return self._nic

    @property
    def pd_id(self) -> int:
        """The fake's PD number, compared by the data path's key checks."""
        return self._id

    @property
    def closed(self) -> bool:
        return self._closed

    def advise_mr(self, advise: int, flags: int, sg_list: list[Any]) -> None:
        """``ibv_advise_mr``: prefetch pages of ODP MRs of this PD (a hint; the fake keeps
        no page state). EOPNOTSUPP where the device has no ODP or for an unknown advice;
        EINVAL for an SGE outside an ODP MR of this PD [inferred from mlx5 odp.c]."""
        code = self._advise_errno(int(advise), sg_list)
        if code:
            raise PyverbsRDMAError("Failed to advise MR", code)

    def _advise_errno(self, advise: int, sg_list: list[Any]) -> int:
        if self._closed:
            return errno.EINVAL
        # ib_user_ioctl_verbs.h: PREFETCH 0, PREFETCH_WRITE 1, PREFETCH_NO_FAULT 2
        if not self._nic.profile.odp_supported or advise not in (0, 1, 2):
            return errno.EOPNOTSUPP
        if not sg_list:
            return errno.EINVAL
        odp = int(ibv_access_flags.IBV_ACCESS_ON_DEMAND)
        for sge in sg_list:
            rec = self._nic.mr_by_key(int(sge.lkey))
            if rec is None or rec.pd_id != self._id or not rec.access & odp or \
                    not rec.contains(int(sge.addr), int(sge.length)):
                return errno.EINVAL
        return 0

    def add_ref(self, obj: Any) -> None:
        self._children.add(obj)

    def close(self) -> None:
        """Close dependent MRs and QPs, then the PD; a second close does nothing."""
        if self._closed:
            return
        for child in list(self._children):
            child.close()
        self._closed = True

    def __enter__(self) -> PD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
