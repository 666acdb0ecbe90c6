"""NIC profiles: what a driver advertises in ``ibv_device_attr`` and how it enforces it.

docs/mooncake-verbs.md §5.2 and §6.4 name the drivers that matter for registration: mlx5 and rxe
advertise ``max_mr_size`` = 2^64-1 (never hit), ionic advertises 2 GiB, erdma 64 GiB and
rejects anything bigger with EINVAL, as EFA does. Behaviour the spec marks [uncertain] is a
field with a conservative default (the choice that catches more bugs), so a test can pin
the choice it relies on and the real-hardware tier can replace it (``NicProfile.replace``).

DeviceAttr values the spec does not give (queue depths, vendor ids, ...) are typical
values, marked "illustrative" below; every one can be overridden per device with
``Fabric.add_device(name, profile, **attrs)``.
"""

from __future__ import annotations

import dataclasses
import errno
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["DEVICE_ATTR_FIELDS", "NIC_PROFILES", "NicProfile", "get_nic_profile"]

GiB = 1 << 30
U64_MAX = (1 << 64) - 1
# verbs.h ibv_qp_type: RC 2, UC 3, UD 4, RAW_PACKET 8, XRC_SEND 9, XRC_RECV 10, DRIVER 0xff
ALL_QP_TYPES = frozenset({2, 3, 4, 8, 9, 10, 0xFF})
# ibv_odp_general_caps SUPPORT | SUPPORT_IMPLICIT; ibv_odp_transport_cap_bits SEND, RECV,
# WRITE, READ (verbs.h)
_ODP_ALL = 0b11
_ODP_RC_RW = 0b1111

# §4.3: every DeviceAttr property, with a neutral default (illustrative unless noted)
DEVICE_ATTR_FIELDS: dict[str, Any] = {
    "fw_version": "1.0.0", "node_guid": 0, "sys_image_guid": 0,
    "max_mr_size": U64_MAX, "page_size_cap": 0xFFFFF000, "vendor_id": 0, "vendor_part_id": 0,
    "hw_ver": 0, "max_qp": 1 << 17, "max_qp_wr": 1 << 15, "device_cap_flags": 0,
    "max_sge": 30, "max_sge_rd": 30, "max_cq": 1 << 17, "max_cqe": (1 << 22) - 1,
    "max_mr": 1 << 24, "max_pd": 1 << 24, "max_qp_rd_atom": 16, "max_ee_rd_atom": 0,
    "max_res_rd_atom": 1 << 21, "max_qp_init_rd_atom": 16, "max_ee_init_rd_atom": 0,
    "atomic_caps": 1, "max_ee": 0, "max_rdd": 0, "max_mw": 1 << 24, "max_raw_ipv6_qps": 0,
    "max_raw_ethy_qp": 0, "max_mcast_grp": 1 << 21, "max_mcast_qp_attach": 240,
    "max_ah": 1 << 24, "max_fmr": 0, "max_map_per_fmr": 0, "max_srq": 1 << 23,
    "max_srq_wr": 1 << 15, "max_srq_sge": 31, "max_pkeys": 128, "local_ca_ack_delay": 16,
    "phys_port_cnt": 1,
}


@dataclass(frozen=True)
class NicProfile:
    """One RDMA driver's advertised limits and registration rules (§5.2)."""

    name: str
    description: str
    # DeviceAttr values that differ from DEVICE_ATTR_FIELDS
    attrs: Mapping[str, Any] = field(default_factory=dict)
    # 1 InfiniBand, 2 Ethernet (RoCE / iWARP)
    link_layer: int = 2
    # §5.2 row "len > device max_mr_size": erdma and EFA check and fail; mlx4/5 and rxe
    # advertise 2^64-1 so the check never fires there.
    enforce_max_mr_size: bool = False
    # the errno of that check: EINVAL in the erdma/efa kernel source. [uncertain] a user saw
    # EIO from erdma (§1.9); set 5 (EIO) to model that report.
    oversize_errno: int = errno.EINVAL
    # §5.2 row "device out of MR/MKEY resources": ENOMEM (erdma) or EAGAIN (mlx5)
    mr_exhausted_errno: int = errno.ENOMEM
    # §5.2 row "ON_DEMAND unsupported": EOPNOTSUPP (EINVAL on old kernels)
    odp_supported: bool = False
    odp_unsupported_errno: int = errno.EOPNOTSUPP
    # §4.6: optional access bits (RELAXED_ORDERING) are masked when unsupported
    relaxed_ordering_supported: bool = True
    # §5.2 row "addr+len overflows": EINVAL (newer kernels: EOVERFLOW)
    overflow_errno: int = errno.EINVAL
    # ibv_create_qp: QP types the driver implements; others fail with EOPNOTSUPP
    # (rxe_qp.c rxe_qp_chk_init)
    qp_types: frozenset[int] = ALL_QP_TYPES
    # ibv_create_qp: the largest max_inline_data (rxe_qp_chk_cap checks it); illustrative
    max_inline_data: int = 1024
    # Context.num_comp_vectors: a CQ's comp_vector must be below it (uverbs create_cq:
    # EINVAL); illustrative
    num_comp_vectors: int = 8
    # the requester's status when the responder QP's qp_access_flags forbid an RDMA
    # READ/WRITE: rxe NAKs "invalid request" (rxe_resp.c check_op_valid) ->
    # IBV_WC_REM_INV_REQ_ERR; [inferred] hardware answers a remote access error
    qp_access_violation_status: int = 10
    # ODP as DeviceAttrEx.odp_caps advertises it: general_caps (bit 0 IBV_ODP_SUPPORT,
    # bit 1 IBV_ODP_SUPPORT_IMPLICIT) and the per-transport bits (ibv_odp_transport_cap_bits)
    odp_general_caps: int = 0
    odp_rc_caps: int = 0
    # §5.6: the provider implements ibv_reg_dmabuf_mr (mlx5, efa, bnxt_re, irdma, ionic,
    # mana in rdma-core's providers/); others answer libibverbs' dummy op: EOPNOTSUPP
    dmabuf_supported: bool = True
    notes: Mapping[str, str] = field(default_factory=dict)

    def device_attrs(self, **overrides: Any) -> dict[str, Any]:
        """The full DeviceAttr field set of a device built from this profile."""
        unknown = set(overrides) - set(DEVICE_ATTR_FIELDS)
        if unknown:
            raise TypeError(f"unknown DeviceAttr field(s): {', '.join(sorted(unknown))} "
                            f"(known: {', '.join(DEVICE_ATTR_FIELDS)})")
        out = dict(DEVICE_ATTR_FIELDS)
        out.update(self.attrs)
        out.update(overrides)
        return out

    def replace(self, **changes: Any) -> NicProfile:
        """A copy with some fields changed; unknown fields raise TypeError naming them."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown NicProfile field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


_PROFILES = [
    NicProfile(
        "mlx5", "NVIDIA ConnectX (mlx5): max_mr_size 2^64-1 is never hit (§5.2)",
        attrs={"max_mr_size": U64_MAX, "vendor_id": 0x02C9, "vendor_part_id": 4123,
               "page_size_cap": 0xFFFFFFFFFFFFF000, "fw_version": "20.39.1002"},
        link_layer=2, enforce_max_mr_size=False, mr_exhausted_errno=errno.EAGAIN,
        odp_supported=True, odp_general_caps=_ODP_ALL, odp_rc_caps=_ODP_RC_RW,
        qp_access_violation_status=10,
        notes={"page_size_cap": "from FW log_pg_sz; illustrative",
               "qp_access_violation_status": "[inferred] NAK remote access error (10)",
               "mr_exhausted_errno": "EAGAIN: CREATE_MKEY no resources (§1.9, §5.2)"}),
    NicProfile(
        "rxe", "Soft-RoCE (rdma_rxe): RXE_MAX_MR_SIZE = 2^64-1, no size limit (§5.2)",
        attrs={"max_mr_size": U64_MAX, "page_size_cap": 0xFFFFF000, "vendor_id": 0xFFFFFF,
               "max_sge": 32, "max_sge_rd": 32, "max_qp": 0x10000,
               # [uncertain] §5.2: rxe's max_mr changed across kernels (0x1000 -> 256K ->
               # DEFAULT_MAX_VALUE); the smallest is the conservative default.
               "max_mr": 0x1000},
        link_layer=2, enforce_max_mr_size=False, mr_exhausted_errno=errno.ENOMEM,
        relaxed_ordering_supported=False, dmabuf_supported=False,
        # rxe_qp_chk_init: RC, UC, UD (and the kernel's GSI) only
        qp_types=frozenset({2, 3, 4}), qp_access_violation_status=9,
        notes={"max_mr": "[uncertain] kernel-dependent; smallest known value",
               "qp_types": "rxe_qp.c rxe_qp_chk_init: EOPNOTSUPP for other types"}),
    NicProfile(
        "ionic", "AMD Pensando ionic: advertises max_mr_size 2 GiB (§1.6, §5.2)",
        attrs={"max_mr_size": 2 * GiB, "vendor_id": 0x1DD8},
        link_layer=2,
        # [uncertain] §1.6/§5.2: enforcement unclear (PR #4168 saw a 4 GiB MR accepted on
        # 1 GiB hugepages). Conservative default: enforce, with EINVAL.
        enforce_max_mr_size=True,
        notes={"enforce_max_mr_size": "[uncertain] advertised limit may not be enforced"}),
    NicProfile(
        "erdma", "Alibaba erdma: 64 GiB max_mr_size, EINVAL above it and for length 0 (§1.9)",
        attrs={"max_mr_size": 64 * GiB, "vendor_id": 0x1DED},
        link_layer=2, enforce_max_mr_size=True, oversize_errno=errno.EINVAL,
        mr_exhausted_errno=errno.ENOMEM, relaxed_ordering_supported=False,
        dmabuf_supported=False,
        notes={"oversize_errno": "[uncertain] EINVAL in kernel source; a user saw EIO (§1.9)"}),
    NicProfile(
        "efa", "AWS EFA: checks max_mr_size and returns EINVAL above it (§5.2)",
        # [uncertain] the spec gives no advertised value for EFA; 64 GiB is a placeholder,
        # override it with add_device(..., max_mr_size=...).
        attrs={"max_mr_size": 64 * GiB, "vendor_id": 0x1D0F},
        link_layer=0, enforce_max_mr_size=True, oversize_errno=errno.EINVAL,
        relaxed_ordering_supported=False,
        notes={"max_mr_size": "[uncertain] placeholder; not in the spec"}),
]

NIC_PROFILES: Mapping[str, NicProfile] = MappingProxyType({p.name: p for p in _PROFILES})


def get_nic_profile(profile: str | NicProfile | None = None) -> NicProfile:
    """A profile by name (default mlx5), or the profile given."""
    if isinstance(profile, NicProfile):
        return profile
    name = profile or "mlx5"
    try:
        return NIC_PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown NIC profile {name!r}; known: "
                         f"{', '.join(NIC_PROFILES)}") from None
