"""Exact memory geometry of the SGLang / FastDeploy KV host pools, as pure computation.

Each geometry lists its buffers (shape, dtype, the registration granularity upstream passes, the
copy unit real transfers use) and the per-page pointer/size rows L3 storage transfers. Facts come
from docs/pools.md and docs/mooncake-verbs.md §2.3; each module cites its sections.
"""

from __future__ import annotations

from ._checks import GeometryError, NoPageMetaError
from .base import (
    BufferSpec,
    PageExtents,
    PoolGeometry,
    Region,
    Slot,
    base_size_from_host_gb,
    base_size_from_ratio,
    extents_from_slots,
    host_sizing,
)
from .deepseek_v4 import DeepSeekV4PagedGeometry, DeepSeekV4StateGeometry
from .dsa import DSAIndexerGeometry
from .fastdeploy import FastDeployGeometry
from .group import HostPoolGroup
from .mamba import MambaGeometry
from .mha import AsymmetricMHAGeometry, KOnlyMHAGeometry, MHAGeometry
from .mla import MLAGeometry, MLAKVSplitGeometry
from .registry import POOL_TYPES, accepted_params, make_geometry

__all__ = [
    "POOL_TYPES",
    "AsymmetricMHAGeometry",
    "BufferSpec",
    "DSAIndexerGeometry",
    "DeepSeekV4PagedGeometry",
    "DeepSeekV4StateGeometry",
    "FastDeployGeometry",
    "GeometryError",
    "HostPoolGroup",
    "KOnlyMHAGeometry",
    "MHAGeometry",
    "MLAGeometry",
    "MLAKVSplitGeometry",
    "MambaGeometry",
    "NoPageMetaError",
    "PageExtents",
    "PoolGeometry",
    "Region",
    "Slot",
    "accepted_params",
    "base_size_from_host_gb",
    "base_size_from_ratio",
    "extents_from_slots",
    "host_sizing",
    "make_geometry",
]
