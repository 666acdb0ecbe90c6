"""Run rdma-core's own ``tests/`` against kvreg's fake pyverbs and count the outcomes.

The real library's suite is the best outside check of the fake: every failure is either a
divergence of the fake (fix it, with a test citing the rdma-core test) or a feature it does not
model (an ImportError or NotModelledError, counted apart). One Soft-RoCE device (``rxe0``, the
``rxe`` NIC profile) on one node, as the suite runs on a machine with ``rdma_rxe`` loaded.
Usage (docs/peer-suites.md):

    python tools/peer_suites.py rdma-core /path/to/rdma-core [--json FILE] [--nic mlx5]
        [--render-nodes 1]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
import unittest
from collections import Counter
from pathlib import Path
from typing import Any


class _Counting(unittest.TextTestResult):
    """Counts per outcome and keeps the first line of each failure."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passed: list[str] = []

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self.passed.append(test.id())


class _Unmodelled(type):
    """A pyverbs name the fake does not have: importable, refused when used (NotModelledError),
    so a test module that imports it still runs its other tests."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _unmodelled(f"{cls.__name__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        from kvreg.fakes.verbs.errors import NotModelledError

        raise NotModelledError(f"{cls.__name__} is not modelled by kvreg's fake pyverbs")

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __and__ = __rand__ = __or__


def _unmodelled(name: str) -> Any:
    return _Unmodelled(name, (), {})


def _or_unmodelled(module: types.ModuleType) -> Any:
    """The module's own ``__getattr__`` (a door module's forwards to the fake patched in),
    then an :class:`_Unmodelled` name for what neither the module nor its fake has."""
    own = vars(module).get("__getattr__")
    name = module.__name__

    def lookup(attr: str) -> Any:
        if own is not None:
            try:
                return own(attr)
            except AttributeError:
                pass
        return _unmodelled(f"{name}.{attr}")

    lookup._kvreg_own = own  # type: ignore[attr-defined]
    return lookup


def _restore_getattr(module: types.ModuleType) -> None:
    own = getattr(vars(module).get("__getattr__"), "_kvreg_own", None)
    if own is None:
        vars(module).pop("__getattr__", None)
    else:
        module.__getattr__ = own  # type: ignore[method-assign]


class _UnmodelledFinder:
    """Gives an :class:`_Unmodelled`-filled module for every pyverbs submodule the fake lacks."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith("pyverbs.") or fullname in sys.modules:
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda name: _unmodelled(f"{spec.name}.{name}")  # type: ignore
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _host_tools(real: Any) -> Any:
    """``subprocess.check_output`` as the tools of a host with ``rxe0`` over ``eth0`` answer
    (``rdma link``, ``ip addr``, the sysfs pkey table); anything else runs for real."""

    def check_output(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        text = kwargs.get("universal_newlines") or kwargs.get("text")
        out: str | None = None
        if list(cmd[:3]) == ["rdma", "link", "show"]:
            out = json.dumps([{"ifindex": 1, "ifname": "rxe0", "port": 1, "state": "ACTIVE",
                               "physical_state": "LINK_UP", "netdev": "eth0"}])
        elif list(cmd[:3]) == ["ip", "-j", "addr"]:
            out = json.dumps([{"ifname": "eth0", "address": "02:00:00:00:00:01",
                               "addr_info": [{"family": "inet", "local": "10.0.0.1"}]}])
        elif cmd[0] == "cat" and "/pkeys/" in cmd[1]:
            out = "0xffff\n" if cmd[1].endswith("/0") else "0x0000\n"
        if out is None:
            return real(cmd, *args, **kwargs)
        return out if text else out.encode()

    return check_output


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def run_rdma_core(root: Path, nic: str = "rxe", render_nodes: int = 0) -> dict[str, Any]:
    """Every ``tests/test_*.py`` module of an rdma-core checkout, under the fake: one device
    ``rxe0`` of NIC profile ``nic`` (a Soft-RoCE host by default), and ``render_nodes`` DRM
    render nodes for pyverbs' ``DmaBuf`` (none by default, as on such a host)."""
    from kvreg.fakes.verbs import Fabric

    tests_dir = root / "tests"
    fabric = Fabric(("host",))
    fabric.add_device("rxe0", nic, node="host")
    fabric.node("host").drm_render_nodes = render_nodes
    counts: Counter[str] = Counter()
    failures: dict[str, str] = {}
    not_importable: dict[str, str] = {}
    not_modelled: dict[str, str] = {}
    passed: list[str] = []
    tracebacks: dict[str, str] = {}
    with fabric.patch("host"):
        sys.path.insert(0, str(tests_dir))
        # the package without its __init__ (which imports every module at once, so one
        # provider-specific module the fake does not model would hide all the others)
        package = types.ModuleType("tests")
        package.__path__ = [str(tests_dir)]
        saved = sys.modules.get("tests")
        sys.modules["tests"] = package
        argv, sys.argv = sys.argv, [sys.argv[0], "--dev", "rxe0"]
        import subprocess

        real_check_output = subprocess.check_output
        subprocess.check_output = _host_tools(real_check_output)
        finder = _UnmodelledFinder()
        sys.meta_path.insert(0, finder)
        patched = [m for name, m in sys.modules.items() if name.split(".")[0] == "pyverbs"]
        for m in patched:
            m.__getattr__ = _or_unmodelled(m)  # type: ignore[method-assign]
        try:
            importlib.import_module("args_parser").parser.parse_args()
            for path in sorted(tests_dir.glob("test_*.py")):
                name = f"tests.{path.stem}"
                try:
                    module = importlib.import_module(name)
                except Exception as exc:          # the fake's pyverbs lacks what it needs
                    not_importable[path.stem] = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                suite = unittest.defaultTestLoader.loadTestsFromModule(module)
                runner = unittest.TextTestRunner(stream=open("/dev/null", "w"),  # noqa: SIM115
                                                 resultclass=_Counting, verbosity=0)
                result = runner.run(suite)
                assert isinstance(result, _Counting)
                counts["passed"] += len(result.passed)
                passed.extend(result.passed)
                counts["failed"] += len(result.failures)
                counts["errors"] += len(result.errors)
                counts["skipped"] += len(result.skipped)
                counts["expected failures"] += len(result.expectedFailures)
                for test, text in result.failures + result.errors:
                    if "NotModelledError" in text:
                        counts["not modelled"] += 1
                        not_modelled[test.id()] = _last_line(text)
                        counts["errors" if (test, text) in result.errors else "failed"] -= 1
                    else:
                        failures[test.id()] = _last_line(text)
                        tracebacks[test.id()] = text
        finally:
            subprocess.check_output = real_check_output
            sys.meta_path.remove(finder)
            for m in patched:
                _restore_getattr(m)
            sys.argv = argv
            sys.path.remove(str(tests_dir))
            for mod in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
                del sys.modules[mod]
            if saved is not None:
                sys.modules["tests"] = saved
    return {"counts": dict(counts), "not_importable": not_importable,
            "not_modelled": not_modelled, "passed": passed, "failures": failures,
            "tracebacks": tracebacks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=["rdma-core"])
    parser.add_argument("root", type=Path, help="a checkout of the suite's repository")
    parser.add_argument("--json", type=Path, help="write the full result here")
    parser.add_argument("--nic", default="rxe", help="the device's NIC profile (default rxe)")
    parser.add_argument("--render-nodes", type=int, default=0,
                        help="DRM render nodes for pyverbs' DmaBuf (default 0)")
    args = parser.parse_args(argv)
    result = run_rdma_core(args.root, args.nic, args.render_nodes)
    print(json.dumps(result["counts"]))
    print(f"{len(result['not_importable'])} module(s) not importable under the fake")
    for test, line in sorted(result["failures"].items()):
        print(f"  {test}: {line}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
