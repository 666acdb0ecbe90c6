"""``pyverbs.addr``: GID, GlobalRoute, AHAttr — how an RC QP names its peer (§4.5).

The fake routes a connected QP by the address handle it is given in RTR: the destination
GID when ``is_global`` is set, else the destination LID, both unique on one fabric.
"""

from __future__ import annotations

from .errors import PyverbsUserError

__all__ = ["GID", "AHAttr", "GlobalRoute"]


def _normalise_gid(val: str) -> str:
    parts = val.split(":")
    if len(parts) != 8 or not all(1 <= len(p) <= 4 for p in parts):
        raise PyverbsUserError(f"Invalid GID value ({parts}): expected 8 groups of 4 hex "
                               "digits")
    try:
        return ":".join(f"{int(p, 16):04x}" for p in parts)
    except ValueError:
        raise PyverbsUserError(f"Invalid GID value ({parts})") from None


class GID:
    """``ibv_gid`` as the 8-word string pyverbs prints."""

    def __init__(self, val: str | None = None) -> None:
        self._gid = _normalise_gid(val) if val is not None else ":".join(["0000"] * 8)

    @property
    def gid(self) -> str:
        return self._gid

    @gid.setter
    def gid(self, val: str) -> None:
        self._gid = _normalise_gid(val)

    def __str__(self) -> str:
        return self._gid

    def __repr__(self) -> str:
        return f"GID({self._gid!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GID) and other._gid == self._gid

    def __hash__(self) -> int:
        return hash(self._gid)


class GlobalRoute:
    """``ibv_global_route``: the destination GID and GRH fields."""

    def __init__(self, dgid: GID | None = None, flow_label: int = 0, sgid_index: int = 0,
                 hop_limit: int = 1, traffic_class: int = 0) -> None:
        self.dgid = (dgid or GID()).gid
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class


class AHAttr:
    """``ibv_ah_attr``; a global AH needs a GlobalRoute, as in pyverbs."""

    def __init__(self, dlid: int = 0, sl: int = 0, src_path_bits: int = 0,
                 static_rate: int = 0, is_global: int = 0, port_num: int = 1,
                 gr: GlobalRoute | None = None) -> None:
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.is_global = is_global
        self.port_num = port_num
        # pyverbs returns None for the GRH fields of a non-global AH
        self.dgid: str | None = None
        self.flow_label: int | None = None
        self.sgid_index: int | None = None
        self.hop_limit: int | None = None
        self.traffic_class: int | None = None
        if is_global:
            if gr is None:
                raise PyverbsUserError("Global AH Attr is created but gr parameter is None")
            self.dgid = gr.dgid
            self.flow_label = gr.flow_label
            self.sgid_index = gr.sgid_index
            self.hop_limit = gr.hop_limit
            self.traffic_class = gr.traffic_class
