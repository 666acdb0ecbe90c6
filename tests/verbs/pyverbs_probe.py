"""Dump what a pyverbs installation exposes, as JSON, without any RDMA device.

Run by the system interpreter that has Debian's ``python3-pyverbs`` (``/usr/bin/python3
tests/verbs/pyverbs_probe.py``), and in-process against kvreg's fake (``probe()`` with the
fake's modules patched in), so the conformance test compares the two dumps. It imports
nothing of kvreg and only the standard library besides pyverbs.
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
import types
from collections.abc import Callable
from typing import Any

MODULES = ("pyverbs.pyverbs_error", "pyverbs.device", "pyverbs.pd", "pyverbs.mr",
           "pyverbs.cq", "pyverbs.qp", "pyverbs.wr", "pyverbs.addr", "pyverbs.base",
           "pyverbs.utils", "pyverbs.enums", "pyverbs.libibverbs_enums")
CLASSES = {
    "pyverbs.device": ("Context", "DeviceAttrEx", "ODPCaps", "TSOCaps", "GIDEntry",
                       "PortAttr", "Device"),
    "pyverbs.cq": ("CQ", "CompChannel", "CQEX", "CqInitAttrEx", "WC", "PollCqAttr"),
    "pyverbs.qp": ("QP", "QPEx", "QPAttr", "QPInitAttr", "QPInitAttrEx", "QPCap"),
    "pyverbs.mr": ("MR",),
    "pyverbs.pd": ("PD",),
    "pyverbs.wr": ("SGE", "SendWR", "RecvWR"),
    "pyverbs.addr": ("GID", "AHAttr", "GlobalRoute"),
}
# value ranges the string helpers are compared on
INTS = [*list(range(-2, 40)), 64, 128, 129, 130, 135, 136, 255, 256]
FLAGS = [0] + [1 << i for i in range(40)] + [3, 7, 0x5A5A, (1 << 40) - 1]
STR_HELPERS = {
    "pyverbs.utils": {"qp_type_to_str": INTS, "mtu_to_str": INTS, "mig_state_to_str": INTS,
                      "access_flags_to_str": FLAGS, "rereg_error_to_str": [*INTS, -3, -5]},
    "pyverbs.device": {"port_state_to_str": INTS, "phys_state_to_str": INTS,
                       "speed_to_str": INTS, "width_to_str": INTS,
                       "translate_link_layer": INTS, "translate_mtu": INTS,
                       "translate_node_type": INTS, "translate_transport_type": INTS,
                       "translate_gid_type": INTS, "translate_event_type": INTS,
                       "translate_device_caps": FLAGS, "translate_port_cap_flags": FLAGS,
                       "translate_port_cap_flags2": FLAGS, "guid_to_hex": FLAGS,
                       "guid_format": FLAGS},
    "pyverbs.wr": {"send_flags_to_str": FLAGS},
    "pyverbs.cq": {"cqe_flags_to_str": FLAGS, "create_wc_flags_to_str": FLAGS,
                   "cqe_status_to_str": INTS, "cqe_opcode_to_str": INTS},
}
_QPATTR_FIELDS = ("qp_state", "cur_qp_state", "path_mtu", "path_mig_state", "qkey",
                  "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags", "pkey_index",
                  "alt_pkey_index", "en_sqd_async_notify", "sq_draining", "max_rd_atomic",
                  "max_dest_rd_atomic", "min_rnr_timer", "port_num", "timeout", "retry_cnt",
                  "rnr_retry", "alt_port_num", "alt_timeout", "rate_limit")
_CAP_FIELDS = ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge",
               "max_inline_data")


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
    except Exception as exc:  # the exception type and words are what is compared
        return {"raised": type(exc).__name__, "message": str(exc)}
    return value if isinstance(value, int | str | bool | type(None)) else repr(type(value))


def _names(mod: types.ModuleType) -> list[str]:
    return sorted(n for n, v in vars(mod).items()
                  if not n.startswith("_") and not isinstance(v, types.ModuleType))


def _enums(mod: types.ModuleType) -> dict[str, Any]:
    classes = {n: {m: int(v) for m, v in c.__members__.items()}
               for n, c in vars(mod).items()
               if isinstance(c, type) and issubclass(c, enum.Enum)}
    consts = {n: int(v) for n, v in vars(mod).items()
              if n.startswith("IBV_") and isinstance(v, int) and not isinstance(v, enum.Enum)}
    kinds = sorted({c.__mro__[1].__name__ for c in vars(mod).values()
                    if isinstance(c, type) and issubclass(c, enum.Enum)})
    return {"classes": classes, "constants": consts, "bases": kinds}


def _structs(imp: Callable[[str], types.ModuleType]) -> dict[str, Any]:
    qp = imp("pyverbs.qp")
    addr = imp("pyverbs.addr")
    out: dict[str, Any] = {}
    cap = qp.QPCap()
    out["QPCap()"] = {f: getattr(cap, f) for f in _CAP_FIELDS}
    attr = qp.QPAttr()
    out["QPAttr()"] = {f: getattr(attr, f) for f in _QPATTR_FIELDS}
    init = qp.QPInitAttr()
    out["QPInitAttr()"] = {f: getattr(init, f) for f in (*_CAP_FIELDS, "qp_type", "sq_sig_all")}
    init.max_send_wr = 5
    out["QPInitAttr.max_send_wr writes cap"] = init.cap.max_send_wr
    given = qp.QPCap(max_send_wr=7)
    init2 = qp.QPInitAttr(cap=given)
    given.max_send_wr = 9
    out["QPInitAttr copies its cap"] = init2.max_send_wr
    got = init2.cap
    got.max_send_wr = 11
    out["QPInitAttr.cap is a copy"] = init2.max_send_wr
    attr.ah_attr = addr.AHAttr(dlid=5)
    ah = attr.ah_attr
    ah.dlid = 9
    out["QPAttr.ah_attr is a copy"] = attr.ah_attr.dlid
    out["QPAttr.ah_attr default dlid/port/global"] = [qp.QPAttr().ah_attr.dlid,
                                                      qp.QPAttr().ah_attr.port_num,
                                                      qp.QPAttr().ah_attr.is_global]

    def set_field(value: Any, field: str = "qp_state") -> Any:
        a = qp.QPAttr()
        setattr(a, field, value)
        return getattr(a, field)

    out["QPAttr.qp_state = 1.5"] = _outcome(lambda: set_field(1.5))
    out["QPAttr.dest_qp_num = -1"] = _outcome(lambda: set_field(-1, "dest_qp_num"))
    out["QPAttr.qkey = 'x'"] = _outcome(lambda: set_field("x", "qkey"))
    return out


def _exceptions(imp: Callable[[str], types.ModuleType]) -> dict[str, Any]:
    err = imp("pyverbs.pyverbs_error")
    return {
        "PyverbsError(msg, 22)": str(err.PyverbsError("msg", 22)),
        "PyverbsRDMAError(msg, 12)": [str(err.PyverbsRDMAError("msg", 12)),
                                      err.PyverbsRDMAError("msg", 12).error_code],
        "PyverbsRDMAError(msg)": [str(err.PyverbsRDMAError("msg")),
                                  err.PyverbsRDMAError("msg").error_code],
        "PyverbsUserError(msg)": str(err.PyverbsUserError("msg")),
        "PyverbsError has error_code": hasattr(err.PyverbsError("m"), "error_code"),
        "PyverbsUserError(msg, 5)": _outcome(lambda: err.PyverbsUserError("m", 5)),
    }


CTOR_KWARGS: dict[str, dict[str, Any]] = {
    "pyverbs.wr.SGE": {"addr": 0x1000, "length": 8, "lkey": 1},
    "pyverbs.wr.SendWR": {"wr_id": 1, "opcode": 0, "num_sge": 1, "imm_data": 0,
                          "send_flags": 2, "next_wr": None},
    "pyverbs.wr.RecvWR": {"wr_id": 1, "num_sge": 1, "next_wr": None},
    "pyverbs.qp.QPCap": {"max_send_wr": 2, "max_recv_wr": 2, "max_send_sge": 1,
                         "max_recv_sge": 1, "max_inline_data": 0},
    "pyverbs.qp.QPInitAttr": {"qp_type": 2, "qp_context": None, "scq": None, "rcq": None,
                              "srq": None, "cap": None, "sq_sig_all": 1},
    "pyverbs.qp.QPInitAttrEx": {"qp_type": 2, "qp_context": None, "scq": None, "rcq": None,
                                "srq": None, "cap": None, "sq_sig_all": 0, "comp_mask": 0,
                                "pd": None, "xrcd": None, "create_flags": 0,
                                "max_tso_header": 0, "source_qpn": 0, "hash_conf": None,
                                "ind_table": None, "send_ops_flags": 8},
    "pyverbs.qp.QPAttr": {"qp_state": 1, "cur_qp_state": 0, "port_num": 1, "path_mtu": 3},
    "pyverbs.addr.AHAttr": {"dlid": 1, "sl": 0, "src_path_bits": 0, "static_rate": 0,
                            "is_global": 0, "port_num": 1, "gr": None},
    "pyverbs.addr.GlobalRoute": {"flow_label": 0, "sgid_index": 0, "hop_limit": 1,
                                 "traffic_class": 0},
    "pyverbs.cq.CqInitAttrEx": {"cqe": 10, "channel": None,
                                "comp_vector": 0, "wc_flags": 1, "comp_mask": 0,
                                "flags": 0, "parent_domain": None},
    "pyverbs.cq.PollCqAttr": {},
}


def _ctors(imp: Callable[[str], types.ModuleType]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, kwargs in CTOR_KWARGS.items():
        mod_name, cls = path.rsplit(".", 1)
        mod = imp(mod_name)
        extra: dict[str, Any] = {}
        if cls in ("SendWR", "RecvWR"):
            extra["sg"] = [imp("pyverbs.wr").SGE(0x1000, 8, 1)]
        if cls == "GlobalRoute":
            extra["dgid"] = imp("pyverbs.addr").GID("fe80:0000:0000:0000:0000:0000:0000:0001")
        out[path] = _outcome(lambda mod=mod, cls=cls, kw={**kwargs, **extra}:
                             bool(getattr(mod, cls)(**kw)))
    wr = imp("pyverbs.wr")
    out["SendWR without SGE"] = _outcome(lambda: wr.SendWR(opcode=0))
    out["SGE length 2**32"] = _outcome(lambda: wr.SGE(0x1000, 1 << 32, 1))
    out["AHAttr(is_global=1) without gr"] = _outcome(lambda: imp("pyverbs.addr").AHAttr(
        is_global=1))
    return out


def probe(imp: Callable[[str], types.ModuleType] = importlib.import_module
          ) -> dict[str, Any]:
    """Everything compared, from the pyverbs that ``imp`` imports."""
    out: dict[str, Any] = {"modules": {}, "classes": {}, "strings": {}}
    for name in MODULES:
        try:
            mod = imp(name)
        except ImportError:
            continue
        out["modules"][name] = _names(mod)
        if name.endswith("enums"):
            out[name] = _enums(mod)
    for name, classes in CLASSES.items():
        mod = imp(name)
        for cls in classes:
            if hasattr(mod, cls):
                out["classes"][f"{name}.{cls}"] = sorted(
                    n for n in dir(getattr(mod, cls)) if not n.startswith("_"))
    for name, helpers in STR_HELPERS.items():
        mod = imp(name)
        for fn, values in helpers.items():
            f = getattr(mod, fn)
            out["strings"][f"{name}.{fn}"] = [_outcome(lambda f=f, v=v: f(v)) for v in values]
    out["structs"] = _structs(imp)
    out["exceptions"] = _exceptions(imp)
    out["constructors"] = _ctors(imp)
    utils = imp("pyverbs.utils")
    out["gid"] = {
        "gid_str": utils.gid_str(0x80FE, 0x1234),
        "gid_str_to_array": _outcome(lambda: ",".join(utils.gid_str_to_array(
            "fe80:0000:0000:0000:0002:c903:00a0:b001"))),
        "bad gid": _outcome(lambda: utils.gid_str_to_array("fe80::1")),
        "GID": imp("pyverbs.addr").GID("fe80:0000:0000:0000:0002:c903:00a0:b001").gid,
    }
    return out


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, sort_keys=True)
