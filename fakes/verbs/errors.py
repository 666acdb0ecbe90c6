"""pyverbs' exceptions and the verbs fault points (docs/mooncake-verbs.md §4.2, §4.5, §5.2).

The exception classes are shared by every fabric, so ``except PyverbsRDMAError`` in code
under test catches what any fake raises. The fault points are declared here with the errno
values each call can really produce, so a plan that makes ``ibv_dereg_mr`` fail with
EFAULT, say, is rejected when it is armed.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from ..faults import register_points
from ..not_modelled import NotModelled
from .enums import ibv_wc_status

__all__ = [
    "COVERAGE_HINT",
    "VERBS_POINTS",
    "NotModelledError",
    "PyverbsError",
    "PyverbsRDMAError",
    "PyverbsUserError",
    "StandIns",
    "UntrackedMemoryError",
    "errno_name",
    "wc_status_str",
]


# where an unmodelled name's error sends the reader
COVERAGE_HINT = "COVERAGE: python -m kvreg.fakes.verbs.coverage lists what is modelled"


class PyverbsError(Exception):
    """Base pyverbs error: an errno other than -1 is appended to the message (§4.2).

    As in pyverbs, only :class:`PyverbsRDMAError` exposes ``error_code``.
    """

    def __init__(self, msg: str, error_code: int = -1) -> None:
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg)


class PyverbsRDMAError(PyverbsError):
    """A failed verbs call; ``error_code`` carries its errno, -1 if none (§4.2)."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        super().__init__(msg, error_code)
        self._error_code = error_code

    @property
    def error_code(self) -> int:
        return self._error_code


class PyverbsUserError(PyverbsError):
    """A usage error caught before any verbs call, e.g. a WR without SGE (§4.2, §4.5).

    Its constructor takes the message only, as pyverbs' does.
    """

    def __init__(self, msg: str) -> None:
        super().__init__(msg)


class NotModelledError(NotModelled):
    """A real pyverbs (or Mooncake) API the fake does not implement
    (ARCHITECTURE.md#the-fakes-rules): using it raises this, naming the coverage table, never
    a silent stand-in.

    The name itself exists, as on the real module (``hasattr`` is True, ``from pyverbs.mr
    import DmaBufMR`` works); only calling or instantiating it fails.
    """

    docs = ("a row in docs/mooncake-verbs.md (what the real call does, with its evidence "
            "label) and the call in kvreg's fake pyverbs or store")


class UntrackedMemoryError(RuntimeError):
    """An RDMA or store transfer touched memory that is not mapped in this process.

    Registered process memory is read and written in place (tracked or not); a range that
    was unmapped after it was registered cannot be, since copying there would crash the
    process (a real NIC would still reach the pinned pages). The name is kept from when
    every real buffer had to be tracked.
    """


class StandIns:
    """Mixin: real methods and properties the fake does not model exist on the object
    (``hasattr`` is True, as on the real class) and raise NotModelledError when called.

    A class lists them in ``NOT_MODELLED_ATTRS``.
    """

    NOT_MODELLED_ATTRS: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        if name in type(self).NOT_MODELLED_ATTRS:
            owner = type(self).__name__

            def not_modelled(*args: object, **kwargs: object) -> Any:
                raise NotModelledError(f"kvreg's fake pyverbs does not model {owner}.{name} "
                                       f"({COVERAGE_HINT})")
            return not_modelled
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")


def errno_name(code: int) -> str:
    """``22`` -> ``"EINVAL"``; unknown numbers print as themselves."""
    return errno.errorcode.get(int(code), str(code))


def _errno_for(name_or_code: Any) -> int:
    if isinstance(name_or_code, bool):
        raise TypeError("an errno must be an int or a name like 'EINVAL', not bool")
    if isinstance(name_or_code, int):
        return int(name_or_code)
    if isinstance(name_or_code, str):
        value = getattr(errno, name_or_code, None)
        if name_or_code.startswith("E") and isinstance(value, int):
            return value
        raise ValueError(f"unknown errno name {name_or_code!r}")
    raise TypeError(f"cannot read an errno from {type(name_or_code).__name__}")


def _wc_status_for(name_or_code: Any) -> int:
    if isinstance(name_or_code, bool):
        raise TypeError("a completion status must be an int or a name, not bool")
    if isinstance(name_or_code, int):
        return int(name_or_code)
    if isinstance(name_or_code, str):
        wanted = name_or_code if name_or_code.startswith("IBV_WC_") else "IBV_WC_" + name_or_code
        if wanted in ibv_wc_status.__members__:
            return int(ibv_wc_status[wanted])
        raise ValueError(f"unknown ibv_wc_status name {name_or_code!r}")
    raise TypeError(f"cannot read a completion status from {type(name_or_code).__name__}")


def _wc_status_name(code: int) -> str:
    try:
        return str(ibv_wc_status(code).name)
    except ValueError:
        return str(code)


_WC_STRINGS = {4: "Local protection error", 5: "Work request flushed error",
               10: "Remote access error"}


def wc_status_str(status: int) -> str:
    """The words rdma-core's test utilities use for a status (§4.6, ``wc_status_to_str``)."""
    return _WC_STRINGS.get(int(status), _wc_status_name(status))


# point -> the errno values that call can really fail with.
VERBS_POINTS: dict[str, frozenset[int]] = {
    # §5.2: access/zero length/overflow (EINVAL, EOVERFLOW), can_do_mlock (EPERM), memlock
    # and MR resources (ENOMEM, EAGAIN), unmapped (EFAULT), ODP (EOPNOTSUPP), erdma's EIO
    # report (§1.9)
    "verbs.reg_mr": frozenset({errno.EINVAL, errno.EOVERFLOW, errno.EPERM, errno.ENOMEM,
                               errno.EFAULT, errno.EOPNOTSUPP, errno.EAGAIN, errno.EIO}),
    # §5.1 says only "0 or an errno"; EINVAL (bad handle) and EBUSY (MR still bound) are the
    # kernel's two answers
    "verbs.dereg_mr": frozenset({errno.EINVAL, errno.EBUSY}),
    # §4.5: immediate post errors are ENOMEM (queue full) or EINVAL (bad WR)
    "verbs.post_send": frozenset({errno.ENOMEM, errno.EINVAL}),
    "verbs.post_recv": frozenset({errno.ENOMEM, errno.EINVAL}),
}
# §4.6: a WR can complete with any non-success status
COMPLETION_POINT = "verbs.completion"
COMPLETION_STATUSES = frozenset(int(s) for s in ibv_wc_status if s != 0)

register_points(VERBS_POINTS, code_for=_errno_for, error_name=errno_name)
register_points({COMPLETION_POINT: COMPLETION_STATUSES}, code_for=_wc_status_for,
                error_name=_wc_status_name)
