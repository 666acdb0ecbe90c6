"""The fake ``pyverbs`` module tree of one node, and the patch that installs it.

``build_modules(node)`` returns ``{"pyverbs": ..., "pyverbs.device": ..., ...}`` with the
layout of rdma-core's pyverbs (§4.1), both enum generations included. ``patch_pyverbs``
puts the tree in ``sys.modules`` for a block — whether or not the real pyverbs is installed
— and restores every entry afterwards. While it is active, importing a pyverbs submodule
the fake does not model fails with an ImportError that says so; a name the fake knows of
but does not model exists, as on the real module (``hasattr`` is True), and raises
:class:`~kvreg.fakes.verbs.errors.NotModelledError` naming the coverage when used.
"""

from __future__ import annotations

import errno
import importlib.abc
import importlib.machinery
import logging
import re
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import TYPE_CHECKING, Any

from ..doors import Door, FacadeModule
from . import addr, cq, dmabuf_mr, errors, mr, pd, qp, qp_attr, qp_ex, strings, wr
from .device import (
    Device,
    DeviceAttr,
    DeviceAttrEx,
    GIDEntry,
    ODPCaps,
    PortAttr,
    TSOCaps,
    bind_context,
    device_list_function,
)
from .enums import new_generation_module, old_generation_module

if TYPE_CHECKING:
    from .node import Node

__all__ = ["MODELLED", "NOT_MODELLED", "build_modules", "door_modules", "patch_pyverbs"]

# real pyverbs names the fake knows of but does not implement (§4.1; rdma-core v44): they
# exist, as on the real module, and raise NotModelledError when used
NOT_MODELLED: dict[str, tuple[str, ...]] = {
    "pyverbs.device": ("DM", "DMMR", "AllocDmAttr", "QueryDeviceExInput", "AsyncEvent",
                       "CQModerationCaps", "PCIAtomicCaps", "PacketPacingCaps", "RSSCaps",
                       "TMCaps", "rdma_get_devices"),
    # MREx: newer than rdma-core v44 (docs/mooncake-verbs.md §4.4)
    "pyverbs.mr": ("MREx", "DMMR", "MW", "MWBindInfo", "MWBind", "mwtype2str"),
    "pyverbs.cq": ("WcTmInfo",),
    "pyverbs.qp": ("DataBuffer", "ECE"),
    "pyverbs.addr": ("AH", "GRH"),
    "pyverbs.pd": ("ParentDomain", "ParentDomainInitAttr", "ParentDomainContext"),
    "pyverbs.base": ("PyverbsCM", "PyverbsObject", "inc_rkey"),
    "pyverbs.wr": ("inc_rkey",),
}


def _placeholder(module: str, name: str) -> type:
    """A stand-in that exists (``hasattr``/import work) but refuses to be used."""

    def refuse(cls: type, *args: object, **kwargs: object) -> Any:
        raise errors.NotModelledError(
            f"kvreg's fake pyverbs does not model {module}.{name} ({errors.COVERAGE_HINT})")

    return type(name, (), {"__new__": refuse, "__module__": module,
                           "__doc__": f"Not modelled by kvreg's fake ({module}.{name})."})


def _module(name: str, doc: str, contents: Mapping[str, Any],
            package: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name, f"kvreg fake of {name}: {doc}")
    for key, value in contents.items():
        setattr(mod, key, value)
    for missing in NOT_MODELLED.get(name, ()):
        setattr(mod, missing, _placeholder(name, missing))
    if package:
        mod.__path__ = []
    mod.__kvreg_fake__ = True  # type: ignore[attr-defined]
    return mod


_EXC = {"PyverbsError": errors.PyverbsError, "PyverbsRDMAError": errors.PyverbsRDMAError,
        "PyverbsUserError": errors.PyverbsUserError}
_UTILS = ("access_flags_to_str", "be64toh", "gid_str", "gid_str_to_array",
          "mig_state_to_str", "mtu_to_str", "qp_state_to_str", "qp_type_to_str",
          "rereg_error_to_str")
_DEVICE_STR = ("guid_format", "guid_to_hex", "phys_state_to_str", "port_state_to_str",
               "speed_to_str", "str_from_flags", "translate_device_caps",
               "translate_event_type", "translate_gid_type", "translate_link_layer",
               "translate_mtu", "translate_node_type", "translate_port_cap_flags",
               "translate_port_cap_flags2", "translate_transport_type", "width_to_str",
               "gid_str")
_CQ_STR = ("cqe_flags_to_str", "cqe_opcode_to_str", "cqe_status_to_str",
           "create_wc_flags_to_str", "flags_to_str")
_QP_STR = ("access_flags_to_str", "gid_str", "mig_state_to_str", "mtu_to_str",
           "qp_state_to_str", "qp_type_to_str")


def _fns(names: Sequence[str]) -> dict[str, Any]:
    return {n: getattr(strings, n) for n in names}


def build_modules(node: Node) -> dict[str, types.ModuleType]:
    """The pyverbs tree as ``node`` sees it: Context and get_device_list find its NICs."""
    errno_fn = {"PyverbsRDMAErrno": _rdma_errno}
    mods = {
        "pyverbs.pyverbs_error": _module("pyverbs.pyverbs_error", "exceptions", _EXC),
        "pyverbs.device": _module("pyverbs.device", "devices and contexts", {
            "Context": bind_context(node), "get_device_list": device_list_function(node),
            "Device": Device, "DeviceAttr": DeviceAttr, "DeviceAttrEx": DeviceAttrEx,
            "PortAttr": PortAttr, "GIDEntry": GIDEntry, "ODPCaps": ODPCaps,
            "TSOCaps": TSOCaps, **_fns(_DEVICE_STR), **_EXC, **errno_fn}),
        "pyverbs.pd": _module("pyverbs.pd", "protection domains",
                              {"PD": pd.PD, **_EXC, **errno_fn}),
        "pyverbs.mr": _module("pyverbs.mr", "memory regions", {
            "MR": mr.MR, "DmaBufMR": dmabuf_mr.DmaBufMR,
            "rereg_error_to_str": strings.rereg_error_to_str,
            "HUGE_PAGE_SIZE": 2 << 20, **_EXC,
            **errno_fn}),
        "pyverbs.dmabuf": _module("pyverbs.dmabuf", "DRM dma-buf allocation", {
            "DmaBuf": dmabuf_mr.bind_dmabuf(node), "PyverbsRDMAErrno": _rdma_errno}),
        "pyverbs.cq": _module("pyverbs.cq", "completion queues", {
            "CQ": cq.CQ, "WC": cq.WC, "CompChannel": cq.CompChannel, "CQEX": cq.CQEX,
            "CqInitAttrEx": cq.CqInitAttrEx, "PollCqAttr": cq.PollCqAttr, **_fns(_CQ_STR),
            "PyverbsError": errors.PyverbsError,
            "PyverbsRDMAError": errors.PyverbsRDMAError, **errno_fn}),
        "pyverbs.qp": _module("pyverbs.qp", "queue pairs", {
            "QP": qp.QP, "QPEx": qp_ex.QPEx, "QPCap": qp_attr.QPCap,
            "QPInitAttr": qp_attr.QPInitAttr, "QPInitAttrEx": qp_attr.QPInitAttrEx,
            "QPAttr": qp_attr.QPAttr, **_fns(_QP_STR), **_EXC, **errno_fn}),
        "pyverbs.wr": _module("pyverbs.wr", "work requests", {
            "SGE": wr.SGE, "SendWR": wr.SendWR, "RecvWR": wr.RecvWR,
            "send_flags_to_str": strings.send_flags_to_str,
            "PyverbsError": errors.PyverbsError,
            "PyverbsUserError": errors.PyverbsUserError, **errno_fn}),
        "pyverbs.addr": _module("pyverbs.addr", "addresses", {
            "GID": addr.GID, "GlobalRoute": addr.GlobalRoute, "AHAttr": addr.AHAttr,
            "gid_str": strings.gid_str, "gid_str_to_array": strings.gid_str_to_array,
            "PyverbsRDMAError": errors.PyverbsRDMAError,
            "PyverbsUserError": errors.PyverbsUserError, **errno_fn}),
        "pyverbs.base": _module("pyverbs.base", "base helpers", {
            "PyverbsRDMAErrno": _rdma_errno, "PyverbsRDMAError": errors.PyverbsRDMAError,
            "LOG_LEVEL": logging.INFO,
            "LOG_FORMAT": "[%(levelname)s] %(asctime)s %(filename)s:%(lineno)s: %(message)s"}),
        "pyverbs.utils": _module("pyverbs.utils", "string helpers", {
            **_fns(_UTILS), "PyverbsUserError": errors.PyverbsUserError}),
        "pyverbs.enums": old_generation_module("pyverbs.enums"),
        "pyverbs.libibverbs_enums": new_generation_module("pyverbs.libibverbs_enums"),
    }
    pkg = _module("pyverbs", "kvreg's fake RDMA fabric", {
        key.split(".", 1)[1]: value for key, value in mods.items()}, package=True)
    pkg.__kvreg_node__ = node  # type: ignore[attr-defined]
    return {"pyverbs": pkg, **mods}


def _rdma_errno(msg: str) -> errors.PyverbsRDMAError:
    """pyverbs' ``PyverbsRDMAErrno(msg)``: the error with the current errno (here EIO)."""
    return errors.PyverbsRDMAError(msg, errno.EIO)


MODELLED: tuple[str, ...] = ("pyverbs", "pyverbs.pyverbs_error", "pyverbs.device",
                             "pyverbs.pd", "pyverbs.mr", "pyverbs.dmabuf", "pyverbs.cq",
                             "pyverbs.qp", "pyverbs.wr", "pyverbs.addr", "pyverbs.base",
                             "pyverbs.utils", "pyverbs.enums", "pyverbs.libibverbs_enums")


class _Refuser(importlib.abc.MetaPathFinder):
    """Makes ``import pyverbs.<unmodelled>`` fail with a message naming the fake."""

    def __init__(self, root: str, modelled: Sequence[str]) -> None:
        self.root = root
        self.modelled = modelled

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(self.root + ".") and fullname not in sys.modules:
            raise ModuleNotFoundError(
                f"kvreg's fake {self.root} does not model {fullname}; modelled: "
                f"{', '.join(self.modelled)}", name=fullname)
        return None


_MISSING = object()


@contextmanager
def patch_modules(modules: Mapping[str, types.ModuleType], root: str) -> Iterator[None]:
    """Install ``modules`` in ``sys.modules`` for the block, restoring what was there.

    Real submodules of ``root`` already imported are hidden for the block too, so the
    fake and the real package never mix.
    """
    saved: dict[str, Any] = {}
    # ``root`` and its submodules, matched in C: sys.modules holds thousands of names once
    # torch is imported, and every scenario of the Mooncake target patches twice
    under = re.compile(re.escape(root) + r"(?:\.|\Z)").match
    for name in list(filter(under, sys.modules)):
        saved[name] = sys.modules.pop(name)
    for name in modules:
        saved.setdefault(name, _MISSING)
    refuser = _Refuser(root, sorted(modules))
    sys.modules.update(modules)
    sys.meta_path.insert(0, refuser)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.meta_path.remove(refuser)
        for name in list(filter(under, sys.modules)):
            del sys.modules[name]
        for name, old in saved.items():
            if old is not _MISSING:
                sys.modules[name] = old


# classes bound to one node (bind_context, bind_dmabuf)
_BOUND = {"pyverbs.device": ("Context",), "pyverbs.dmabuf": ("DmaBuf",)}


def door_modules(modules: Mapping[str, types.ModuleType], bound: Mapping[str, Sequence[str]],
                 stack: ExitStack) -> dict[str, types.ModuleType]:
    """The process's door module for each of ``modules``, entered with it for ``stack``'s
    block: code that keeps a module, function or bound class (``from pyverbs.device import
    Context``) reaches the fake patched in at the time of each call (fakes/doors.py)."""
    doors: dict[str, types.ModuleType] = {}
    for name, module in modules.items():   # every door first: a package's shows its doors
        facade = _FACADES.get(name)
        if facade is None:
            facade = _FACADES[name] = FacadeModule(name, Door(name), classes=bound.get(name, ()),
                                                    package=hasattr(module, "__path__"),
                                                    mirror=True)
        doors[name] = facade
    for name, module in modules.items():
        door: Door = doors[name].__dict__["_kvreg_door"]
        stack.enter_context(door.entered(module))
    return doors


_FACADES: dict[str, FacadeModule] = {}


@contextmanager
def patch_pyverbs(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """``import pyverbs...`` reaches ``modules`` for the block (see the module docstring)."""
    with ExitStack() as stack:
        stack.enter_context(patch_modules(door_modules(modules, _BOUND, stack), "pyverbs"))
        yield
