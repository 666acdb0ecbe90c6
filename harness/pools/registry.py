"""Pool types by name, and construction from plain parameters (scenario files, JSON).

make_geometry turns a typo into a GeometryError that names the parameter and lists the accepted
ones, instead of a TypeError from deep inside a constructor.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from ._checks import GeometryError
from .base import PoolGeometry
from .deepseek_v4 import DeepSeekV4PagedGeometry, DeepSeekV4StateGeometry
from .dsa import DSAIndexerGeometry
from .fastdeploy import FastDeployGeometry
from .group import HostPoolGroup
from .mamba import MambaGeometry
from .mha import AsymmetricMHAGeometry, KOnlyMHAGeometry, MHAGeometry
from .mla import MLAGeometry, MLAKVSplitGeometry

__all__ = ["POOL_TYPES", "accepted_params", "make_geometry"]

POOL_TYPES: dict[str, type[PoolGeometry]] = {
    cls.pool_type: cls
    for cls in (
        MHAGeometry,
        KOnlyMHAGeometry,
        AsymmetricMHAGeometry,
        MLAGeometry,
        MLAKVSplitGeometry,
        DSAIndexerGeometry,
        MambaGeometry,
        DeepSeekV4PagedGeometry,
        DeepSeekV4StateGeometry,
        FastDeployGeometry,
        HostPoolGroup,
    )
}


def accepted_params(pool_type: str) -> dict[str, bool]:
    """Constructor parameters of a pool type, mapped to whether each is required."""
    return dict(_signature_params(_pool_class(pool_type)))


@functools.cache
def _signature_params(cls: type[PoolGeometry]) -> tuple[tuple[str, bool], ...]:
    """Read once per class: inspect.signature costs more than building a geometry."""
    signature = inspect.signature(cls.__init__)
    return tuple((name, param.default is inspect.Parameter.empty)
                 for name, param in signature.parameters.items() if name != "self")


def _pool_class(pool_type: str) -> type[PoolGeometry]:
    if pool_type not in POOL_TYPES:
        raise GeometryError(
            f"pool_type must be one of {', '.join(sorted(POOL_TYPES))}, got {pool_type!r}"
        )
    return POOL_TYPES[pool_type]


def make_geometry(pool_type: str, **params: Any) -> PoolGeometry:
    """Build a geometry from its pool type name and constructor parameters.

    For "group", members may be geometries or mappings {"pool_type": ..., **params}.
    """
    cls = _pool_class(pool_type)
    accepted = accepted_params(pool_type)
    listing = ", ".join(accepted)
    for name in params:
        if name not in accepted:
            raise GeometryError(
                f"unknown parameter {name!r} for pool type {pool_type}; accepted: {listing}"
            )
    missing = [name for name, required in accepted.items() if required and name not in params]
    if missing:
        raise GeometryError(
            f"missing parameter {', '.join(map(repr, missing))} for pool type {pool_type}; "
            f"accepted: {listing}"
        )
    if cls is HostPoolGroup:
        params["members"] = [_member(i, m) for i, m in enumerate(params["members"])]
    return cls(**params)


def _member(index: int, member: Any) -> PoolGeometry:
    if isinstance(member, PoolGeometry):
        return member
    if not isinstance(member, Mapping) or "pool_type" not in member:
        raise GeometryError(f"members[{index}] must be a geometry or a mapping with pool_type")
    spec = dict(member)
    return make_geometry(spec.pop("pool_type"), **spec)
