"""ibverbs enum values, loaded from the table generated from rdma-core's verbs.h.

``data/verbs_enums.json`` is written by :mod:`.gen_enums` from ``libibverbs/verbs.h`` (plus
a short supplement of newer members, each with its source), never by hand, so the values
cannot drift from the header; a test regenerates it from the installed header and compares.
Every named enum becomes an ``IntEnum`` class, as pyverbs' Cython ``cpdef enum`` gives
(``pyverbs.enums.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE``; OR-ing two members gives a
plain int); the members of anonymous enums are plain int constants (docs/mooncake-verbs.md §4.1,
§4.6). Both module layouts — ``pyverbs.enums`` (rdma-core < v59) and
``pyverbs.libibverbs_enums`` (v59+) — are built from the same classes.
"""

from __future__ import annotations

import enum
import functools
import json
import types
from importlib import resources
from typing import Any

from ..doors import mark_constant

__all__ = ["ENUMS", "ENUM_CLASSES", "MANDATORY_ACCESS_MASK", "MODULE_CONSTANTS",
           "OPTIONAL_ACCESS_MASK", "SUPPLEMENT", "TABLE_SOURCE", "ibv_access_flags",
           "ibv_mtu", "ibv_node_type", "ibv_port_state", "ibv_qp_attr_mask", "ibv_qp_state",
           "ibv_qp_type", "ibv_send_flags", "ibv_transport_type", "ibv_wc_opcode",
           "ibv_wc_status", "ibv_wr_opcode", "load_table", "new_generation_module",
           "old_generation_module"]


def load_table() -> dict[str, Any]:
    """The generated table: ``{"source", "enums": {name: [[member, value], ...]},
    "constants": {name: value}, "supplement": [...]}``."""
    text = resources.files(__package__).joinpath("data", "verbs_enums.json").read_text(
        encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


_TABLE = load_table()
TABLE_SOURCE: str = _TABLE["source"]
SUPPLEMENT: tuple[dict[str, Any], ...] = tuple(_TABLE["supplement"])

ENUMS: dict[str, Any] = {
    name: enum.IntEnum(name, [(m, v) for m, v in members], module=__name__)
    for name, members in _TABLE["enums"].items()
}
ENUM_CLASSES: tuple[type[enum.IntEnum], ...] = tuple(ENUMS.values())
# (ENUMS is typed Any per class: the members come from the generated table)
MODULE_CONSTANTS: dict[str, int] = {k: int(v) for k, v in _TABLE["constants"].items()}

# the classes the fakes use by name (typed Any: their members come from the table)
ibv_access_flags: Any = ENUMS["ibv_access_flags"]
ibv_wc_status: Any = ENUMS["ibv_wc_status"]
ibv_wr_opcode: Any = ENUMS["ibv_wr_opcode"]
ibv_wc_opcode: Any = ENUMS["ibv_wc_opcode"]
ibv_send_flags: Any = ENUMS["ibv_send_flags"]
ibv_qp_type: Any = ENUMS["ibv_qp_type"]
ibv_qp_state: Any = ENUMS["ibv_qp_state"]
ibv_qp_attr_mask: Any = ENUMS["ibv_qp_attr_mask"]
ibv_mtu: Any = ENUMS["ibv_mtu"]
ibv_port_state: Any = ENUMS["ibv_port_state"]
ibv_node_type: Any = ENUMS["ibv_node_type"]
ibv_transport_type: Any = ENUMS["ibv_transport_type"]

# access bits below the optional range that a device must understand (§4.6): the optional
# range starts at RELAXED_ORDERING (IBV_ACCESS_OPTIONAL_FIRST)
_OPTIONAL_FIRST = int(ibv_access_flags.IBV_ACCESS_RELAXED_ORDERING)
MANDATORY_ACCESS_MASK = _OPTIONAL_FIRST - 1
OPTIONAL_ACCESS_MASK = ~MANDATORY_ACCESS_MASK


def _fill(mod: types.ModuleType) -> types.ModuleType:
    for cls in ENUM_CLASSES:
        setattr(mod, cls.__name__, cls)
        for member_name, member in cls.__members__.items():
            setattr(mod, member_name, member)
    for const, value in MODULE_CONSTANTS.items():
        setattr(mod, const, value)
    return mark_constant(mod)


# the enum modules hold constants only: built once per name and shared by every fake
# fabric (as the real package's modules are one per process); an unchanged target lets a
# door skip copying its namespace again (fakes/doors.py, ``mark_constant``)
@functools.cache
def old_generation_module(name: str = "pyverbs.enums") -> types.ModuleType:
    """``pyverbs.enums`` of rdma-core < v59: the enum classes and every member at module
    level (v44: ``pyverbs.enums.IBV_WC_SUCCESS`` is an ``ibv_wc_status`` member)."""
    return _fill(types.ModuleType(name, "kvreg fake: ibverbs enums (rdma-core < v59 layout)"))


@functools.cache
def new_generation_module(name: str = "pyverbs.libibverbs_enums") -> types.ModuleType:
    """``pyverbs.libibverbs_enums`` of rdma-core >= v59: the same classes and members."""
    return _fill(types.ModuleType(name, "kvreg fake: ibverbs enum classes (rdma-core >= v59 "
                                        "layout)"))
