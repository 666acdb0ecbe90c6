"""The fake ``pyverbs`` module tree of one node, and the patch that installs it.

``build_modules(node)`` returns ``{"pyverbs": ..., "pyverbs.device": ..., ...}`` with the
layout of rdma-core's pyverbs (§4.1), both enum generations included. ``patch_pyverbs``
puts the tree in ``sys.modules`` for a block — whether or not the real pyverbs is installed
— and restores every entry afterwards. While it is active, importing a pyverbs submodule
the fake does not model fails with an ImportError that says so; a name the fake knows of
but does not model raises :class:`~kvreg.fakes.verbs.errors.NotModelledError`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from . import addr, cq, errors, mr, pd, qp, wr
from .device import Device, DeviceAttr, DeviceAttrEx, PortAttr, bind_context, device_list_function
from .enums import new_generation_module, old_generation_module

if TYPE_CHECKING:
    from .node import Node

__all__ = ["MODELLED", "build_modules", "patch_pyverbs"]

# real pyverbs names the fake knows of but does not implement (§4.1)
_NOT_MODELLED: dict[str, tuple[str, ...]] = {
    "pyverbs.device": ("DM", "AllocDmAttr", "QueryDeviceExInput"),
    "pyverbs.mr": ("MREx", "DmaBufMR", "DMMR", "MW", "MWBindInfo", "MWBind", "Buf", "BufMR"),
    "pyverbs.cq": ("CompChannel", "CQEX", "CqInitAttrEx", "PollCqAttr"),
    "pyverbs.qp": ("QPEx", "QPInitAttrEx", "DataBuffer"),
    "pyverbs.addr": ("AH", "GRH"),
    "pyverbs.pd": ("ParentDomain", "ParentDomainInitAttr", "ParentDomainContext"),
}


def _module(name: str, doc: str, contents: Mapping[str, Any],
            package: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name, f"kvreg fake of {name}: {doc}")
    for key, value in contents.items():
        setattr(mod, key, value)
    if package:
        mod.__path__ = []
    missing = _NOT_MODELLED.get(name, ())
    modelled = sorted(k for k in contents if not k.startswith("_"))

    def __getattr__(attr: str) -> Any:
        if attr in missing:
            raise errors.NotModelledError(
                f"kvreg's fake pyverbs does not model {name}.{attr}; modelled names in "
                f"{name}: {', '.join(modelled)}")
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    mod.__kvreg_fake__ = True  # type: ignore[attr-defined]
    return mod


def build_modules(node: Node) -> dict[str, types.ModuleType]:
    """The pyverbs tree as ``node`` sees it: Context and get_device_list find its NICs."""
    exc = {"PyverbsError": errors.PyverbsError, "PyverbsRDMAError": errors.PyverbsRDMAError,
           "PyverbsUserError": errors.PyverbsUserError}
    mods = {
        "pyverbs.pyverbs_error": _module("pyverbs.pyverbs_error", "exceptions", exc),
        "pyverbs.device": _module("pyverbs.device", "devices and contexts", {
            "Context": bind_context(node), "get_device_list": device_list_function(node),
            "Device": Device, "DeviceAttr": DeviceAttr, "DeviceAttrEx": DeviceAttrEx,
            "PortAttr": PortAttr}),
        "pyverbs.pd": _module("pyverbs.pd", "protection domains", {"PD": pd.PD}),
        "pyverbs.mr": _module("pyverbs.mr", "memory regions", {"MR": mr.MR}),
        "pyverbs.cq": _module("pyverbs.cq", "completion queues", {"CQ": cq.CQ, "WC": cq.WC}),
        "pyverbs.qp": _module("pyverbs.qp", "queue pairs", {
            "QP": qp.QP, "QPCap": qp.QPCap, "QPInitAttr": qp.QPInitAttr, "QPAttr": qp.QPAttr}),
        "pyverbs.wr": _module("pyverbs.wr", "work requests", {
            "SGE": wr.SGE, "SendWR": wr.SendWR, "RecvWR": wr.RecvWR}),
        "pyverbs.addr": _module("pyverbs.addr", "addresses", {
            "GID": addr.GID, "GlobalRoute": addr.GlobalRoute, "AHAttr": addr.AHAttr}),
        "pyverbs.base": _module("pyverbs.base", "base helpers", {
            "PyverbsRDMAErrno": _rdma_errno, "PyverbsRDMAError": errors.PyverbsRDMAError}),
        "pyverbs.enums": old_generation_module("pyverbs.enums"),
        "pyverbs.libibverbs_enums": new_generation_module("pyverbs.libibverbs_enums"),
    }
    pkg = _module("pyverbs", "kvreg's fake RDMA fabric", {
        key.split(".", 1)[1]: value for key, value in mods.items()}, package=True)
    pkg.__kvreg_node__ = node  # type: ignore[attr-defined]
    return {"pyverbs": pkg, **mods}


def _rdma_errno(msg: str) -> errors.PyverbsRDMAError:
    """pyverbs' ``PyverbsRDMAErrno(msg)``: the error with the current errno (here EIO)."""
    import errno as _errno

    return errors.PyverbsRDMAError(msg, _errno.EIO)


MODELLED: tuple[str, ...] = ("pyverbs", "pyverbs.pyverbs_error", "pyverbs.device",
                             "pyverbs.pd", "pyverbs.mr", "pyverbs.cq", "pyverbs.qp",
                             "pyverbs.wr", "pyverbs.addr", "pyverbs.base", "pyverbs.enums",
                             "pyverbs.libibverbs_enums")


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
    for name in list(sys.modules):
        if name == root or name.startswith(root + "."):
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
        for name in list(sys.modules):
            if name == root or name.startswith(root + "."):
                del sys.modules[name]
        for name, old in saved.items():
            if old is not _MISSING:
                sys.modules[name] = old


@contextmanager
def patch_pyverbs(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """``import pyverbs...`` reaches ``modules`` for the block (see the module docstring)."""
    with patch_modules(modules, "pyverbs"):
        yield
