"""``pyverbs.pd.PD``: the protection domain that MRs and QPs belong to (§4.4).

An MR's keys are only usable by QPs of the same PD: the fake's data path checks it, so code
that registers on one PD and posts on another gets the protection error real NICs give.
"""

from __future__ import annotations

import errno
import weakref
from typing import TYPE_CHECKING, Any

from .device import Context
from .errors import PyverbsRDMAError, PyverbsUserError

if TYPE_CHECKING:
    from .node import Nic

__all__ = ["PD"]


class PD:
    """``ibv_alloc_pd`` on a Context; closing it closes its MRs and QPs (weakrefs)."""

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
