"""``nixl._bindings`` as the fake agent answers it: status and memory enums, the exceptions,
and the descriptor lists.

Names, values and strings as nixl-cu12 1.5.1's pybind module (``nixl_cu12/_bindings``,
read from the wheel, docs/nixl.md §1): every failing status is raised as the exception of
its own class (``nixlNotFoundError`` for ``NIXL_ERR_NOT_FOUND``, ...), whose ``str`` is the
status name; the exceptions derive from ``Exception`` only. The descriptor lists answer
``descCount``, ``getType``, ``isEmpty`` and indexing (a registration descriptor is
``(addr, len, devID, metaInfo bytes)``, a transfer descriptor ``(addr, len, devID)``) and
have no ``len()``, as the real ones.
"""

from __future__ import annotations

import enum
from typing import Any

from ..not_modelled import NotModelled

__all__ = [
    "BLK_SEG",
    "DEFAULT_COMM_PORT",
    "DRAM_SEG",
    "FILE_SEG",
    "NIXL_INIT_AGENT",
    "OBJ_SEG",
    "STATUS_ERRORS",
    "VRAM_SEG",
    "NixlCrash",
    "NixlError",
    "NotModelledError",
    "incompatible",
    "nixlRegDList",
    "nixlXferDList",
    "nixl_mem_t",
    "nixl_status_t",
    "raise_status",
    "status_name",
]

DEFAULT_COMM_PORT = 8888          # nixlBind.DEFAULT_COMM_PORT [OBS-local, 1.5.1]
NIXL_INIT_AGENT = ""              # nixlBind.NIXL_INIT_AGENT: the empty name [OBS-local]


class nixl_status_t(enum.IntEnum):
    """``nixl_status_t`` (values as in the wheel) [OBS-local]."""

    NIXL_IN_PROG = 1
    NIXL_SUCCESS = 0
    NIXL_ERR_NOT_POSTED = -1
    NIXL_ERR_INVALID_PARAM = -2
    NIXL_ERR_BACKEND = -3
    NIXL_ERR_NOT_FOUND = -4
    NIXL_ERR_MISMATCH = -5
    NIXL_ERR_NOT_ALLOWED = -6
    NIXL_ERR_REPOST_ACTIVE = -7
    NIXL_ERR_UNKNOWN = -8
    NIXL_ERR_NOT_SUPPORTED = -9


class nixl_mem_t(enum.IntEnum):
    """``nixl_mem_t`` [OBS-local]."""

    DRAM_SEG = 0
    VRAM_SEG = 1
    BLK_SEG = 2
    OBJ_SEG = 3
    FILE_SEG = 4


DRAM_SEG, VRAM_SEG = nixl_mem_t.DRAM_SEG, nixl_mem_t.VRAM_SEG
BLK_SEG, OBJ_SEG, FILE_SEG = nixl_mem_t.BLK_SEG, nixl_mem_t.OBJ_SEG, nixl_mem_t.FILE_SEG


class NixlError(Exception):
    """Not in the real module: the base the fake gives its status exceptions so tests can
    catch them all (the real classes derive from ``Exception`` directly)."""

    status: nixl_status_t = nixl_status_t.NIXL_ERR_UNKNOWN


class NixlCrash(RuntimeError):
    """A call the real agent answers with a segfault (SIGSEGV): posting or polling a
    transfer handle after ``release()`` (checked on 1.5.1, docs/nixl.md §5). The fake raises
    this so such code is caught, not handled."""


class NotModelledError(NotModelled):
    """A real NIXL API (or backend, or input form) the fake agent does not implement."""

    docs = "docs/nixl.md §2"


def _exc(name: str, status: nixl_status_t) -> type[NixlError]:
    return type(name, (NixlError,), {"status": status, "__module__": "nixl._bindings",
                                     "__doc__": f"Raised for {status.name}."})


nixlNotPostedError = _exc("nixlNotPostedError", nixl_status_t.NIXL_ERR_NOT_POSTED)
nixlInvalidParamError = _exc("nixlInvalidParamError", nixl_status_t.NIXL_ERR_INVALID_PARAM)
nixlBackendError = _exc("nixlBackendError", nixl_status_t.NIXL_ERR_BACKEND)
nixlNotFoundError = _exc("nixlNotFoundError", nixl_status_t.NIXL_ERR_NOT_FOUND)
nixlMismatchError = _exc("nixlMismatchError", nixl_status_t.NIXL_ERR_MISMATCH)
nixlNotAllowedError = _exc("nixlNotAllowedError", nixl_status_t.NIXL_ERR_NOT_ALLOWED)
nixlRepostActiveError = _exc("nixlRepostActiveError", nixl_status_t.NIXL_ERR_REPOST_ACTIVE)
nixlUnknownError = _exc("nixlUnknownError", nixl_status_t.NIXL_ERR_UNKNOWN)
nixlNotSupportedError = _exc("nixlNotSupportedError", nixl_status_t.NIXL_ERR_NOT_SUPPORTED)

STATUS_ERRORS: dict[int, type[NixlError]] = {
    int(c.status): c for c in (nixlNotPostedError, nixlInvalidParamError, nixlBackendError,
                               nixlNotFoundError, nixlMismatchError, nixlNotAllowedError,
                               nixlRepostActiveError, nixlUnknownError, nixlNotSupportedError)}
EXCEPTIONS = {c.__name__: c for c in STATUS_ERRORS.values()}
__all__ += sorted(EXCEPTIONS)


def status_name(code: int) -> str:
    try:
        return nixl_status_t(int(code)).name
    except ValueError:
        return str(code)


def raise_status(code: int, detail: str = "") -> None:
    """Raise the exception of a failing status; its ``str`` is the status name, as the
    binding's. ``detail`` (what the real agent logs) goes on ``kvreg_detail``."""
    cls = STATUS_ERRORS.get(int(code), nixlUnknownError)
    exc = cls(status_name(code))
    exc.kvreg_detail = detail  # type: ignore[attr-defined]
    raise exc


def incompatible(method: str, signature: str) -> TypeError:
    """pybind11's refusal of an argument of the wrong type (its first line, verbatim)."""
    return TypeError(f"{method}(): incompatible function arguments. The following argument "
                     f"types are supported:\n    1. {signature}")


def _u64(value: Any, what: str) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: not an integer: {value!r}") from None
    if out < 0 or out >= 1 << 64:
        # pybind11 cannot cast a negative Python int to uintptr_t / size_t [OBS-local]
        raise RuntimeError("Unable to cast Python instance of type <class 'int'> to C++ type "
                           "'?' (#define PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug "
                           "mode for details)")
    return out


class _DList:
    """What both descriptor lists share: a memory type and descriptors in order (no
    ``len()``: the binding defines none [OBS-local]; iteration runs on indexing)."""

    _width = 3

    def __init__(self, type: nixl_mem_t, descs: Any = 0) -> None:
        self._type = nixl_mem_t(int(type))
        self._descs: list[tuple[Any, ...]] = []
        if isinstance(descs, int) and not isinstance(descs, bool):
            return
        if hasattr(descs, "ndim") and hasattr(descs, "shape"):          # numpy Nx3
            if descs.ndim != 2 or descs.shape[1] != 3:
                raise RuntimeError(f"{self.__class__.__name__}: the array must be Nx3")
            rows = [tuple(int(v) for v in row) for row in descs.tolist()]
            for row in rows:
                self._add((*row, b"") if self._width == 4 else row)
            return
        for desc in descs:
            self._add(tuple(desc))

    def _add(self, desc: tuple[Any, ...]) -> None:
        if len(desc) != self._width:
            raise RuntimeError(f"{type(self).__name__}: a descriptor has {self._width} "
                               f"fields, got {len(desc)}")
        addr, length, dev = (_u64(desc[0], "addr"), _u64(desc[1], "len"),
                             _u64(desc[2], "devID"))
        if self._width == 4:
            meta = desc[3]
            meta_b = meta.encode() if isinstance(meta, str) else bytes(meta)
            self._descs.append((addr, length, dev, meta_b))
        else:
            self._descs.append((addr, length, dev))

    # -- the binding's methods ----------------------------------------------------------------
    def descCount(self) -> int:
        return len(self._descs)

    def getType(self) -> nixl_mem_t:
        return self._type

    def isEmpty(self) -> bool:
        return not self._descs

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return self._descs[i]

    def append(self, desc: tuple[Any, ...]) -> None:
        self._add(tuple(desc))

    def clear(self) -> None:
        self._descs.clear()

    def __repr__(self) -> str:
        return f"<nixl._bindings.{type(self).__name__} {self._type.name} {self._descs!r}>"

    @property
    def ranges(self) -> list[tuple[int, int, int]]:
        """Not in the real API: (addr, len, devID) of every descriptor."""
        return [(d[0], d[1], d[2]) for d in self._descs]


class nixlRegDList(_DList):
    """Registration descriptors ``(addr, len, devID, metaInfo)``."""

    _width = 4


class nixlXferDList(_DList):
    """Transfer descriptors ``(addr, len, devID)``."""

    _width = 3


nixlRegDList.__module__ = nixlXferDList.__module__ = "nixl._bindings"
