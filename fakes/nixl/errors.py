"""The fault points of the fake NIXL agent and the statuses each can really raise.

A fault armed at ``nixl.<method>`` makes that call raise the exception of its status, as
the binding raises it (fakes/nixl/bindings.py); ``nixl.transfer`` takes NIXL_ERR_BACKEND
only (a backend's failure to post) [UNC: no failing post was observed on 1.5.1].
"""

from __future__ import annotations

from typing import Any

from ..faults import register_points
from .bindings import nixl_status_t, status_name

__all__ = ["NIXL_POINTS", "point_name"]


def _codes(*names: str) -> frozenset[int]:
    return frozenset(int(nixl_status_t[n]) for n in names)


NIXL_POINTS: dict[str, frozenset[int] | None] = {
    "nixl.register_memory": _codes("NIXL_ERR_NOT_FOUND", "NIXL_ERR_BACKEND",
                                   "NIXL_ERR_INVALID_PARAM"),
    "nixl.deregister_memory": _codes("NIXL_ERR_NOT_FOUND", "NIXL_ERR_BACKEND"),
    "nixl.add_remote_agent": _codes("NIXL_ERR_MISMATCH", "NIXL_ERR_INVALID_PARAM"),
    "nixl.remove_remote_agent": _codes("NIXL_ERR_NOT_FOUND"),
    "nixl.prep_xfer_dlist": _codes("NIXL_ERR_NOT_FOUND", "NIXL_ERR_BACKEND"),
    "nixl.make_prepped_xfer": _codes("NIXL_ERR_NOT_FOUND", "NIXL_ERR_INVALID_PARAM",
                                     "NIXL_ERR_BACKEND"),
    "nixl.initialize_xfer": _codes("NIXL_ERR_NOT_FOUND", "NIXL_ERR_INVALID_PARAM",
                                   "NIXL_ERR_BACKEND"),
    "nixl.transfer": _codes("NIXL_ERR_BACKEND", "NIXL_ERR_NOT_FOUND"),
}


def _code_for(name_or_code: Any) -> int:
    if isinstance(name_or_code, bool):
        raise TypeError("a NIXL status must be an int or a name, not bool")
    if isinstance(name_or_code, int):
        return int(name_or_code)
    if isinstance(name_or_code, str) and name_or_code in nixl_status_t.__members__:
        return int(nixl_status_t[name_or_code])
    raise ValueError(f"unknown NIXL status {name_or_code!r}")


def point_name(api: str, code: int) -> str:
    return "OK" if code == 0 else status_name(code)


register_points(NIXL_POINTS, code_for=_code_for, error_name=status_name)
