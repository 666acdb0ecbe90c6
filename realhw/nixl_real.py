"""The real NIXL agent (nixl-cu12 1.5.1, UCX over DRAM) for the ``nixl-real`` tier, always in
a child process.

Two facts of the wheel decide the shape [OBS-local, docs/nixl.md §5]: UCX
listens on every interface address of the machine (its tcp transport: a listening socket
per agent on eth0's address, beside loopback), so the tier runs only in the private network
namespace ``bash .ci/nixl-real PYTHON test`` makes (realhw/mooncake_netns.py: loopback and
one address that exists only there); and a process that created a UCX backend dies with
SIGSEGV at interpreter exit, even after deleting its agents. So the real agents never run
in the test process: :func:`run_real` starts ``python -m kvreg.realhw.nixl_real``, which runs
the differential's sequences (or one named case) on real agents, prints one JSON line with
the results and the process's sockets, and leaves with ``os._exit``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from .mooncake_netns import (
    foreign_sockets,
    namespace_info,
    namespace_problems,
    process_sockets,
)

__all__ = ["CASES", "LAUNCHER", "MARK", "missing_reason", "run_case", "run_real",
           "tier_reason"]

LAUNCHER = "bash .ci/nixl-real PYTHON test"
MARK = "KVREG-NIXL-REAL "
MODULE = "kvreg.realhw.nixl_real"


def missing_reason() -> str | None:
    """What is missing to run the real agent: the wheel (``nixl`` and ``nixl_cu12``)."""
    for name, pip in (("nixl_cu12", "nixl-cu12==1.5.1"), ("nixl", "nixl==1.5.1 --no-deps")):
        if importlib.util.find_spec(name) is None:
            return f"the {name} module is not installed (pip install {pip}; " \
                   f"`{LAUNCHER.replace('test', 'install')}` does both)"
    return None


def tier_reason() -> str | None:
    """Why the real agent must not start here: outside the launcher's private namespace UCX
    would listen on the machine's interfaces; inside it, what is missing."""
    hint = (f"UCX (in the real NIXL agent) listens on every interface address; the agent "
            f"runs only in the private network namespace that `{LAUNCHER}` makes")
    info = namespace_info()
    if info is None:
        return hint
    problems = namespace_problems(info)
    if problems:
        return f"{hint}: {'; '.join(problems)}"
    return missing_reason()


def _sockets() -> list[str]:
    info = namespace_info() or {}
    allowed = [str(info.get("address", ""))] if info.get("address") else []
    socks = process_sockets(os.getpid())
    return [str(s) for s in socks] + ["FOREIGN " + b for b in
                                      foreign_sockets(socks, allowed, wildcard_ok=True)]


# -- named cases the differential never generates: each crashes the real process --------------

def _two(api: Any, buf: Any) -> tuple[Any, Any, int]:
    import ctypes

    a = api.nixl_agent("ca", api.nixl_agent_config(backends=["UCX"]))
    b = api.nixl_agent("cb", api.nixl_agent_config(backends=["UCX"]))
    ptr = ctypes.addressof(buf)
    a.register_memory([(ptr, 4096, 0, "")], "DRAM")
    b.register_memory([(ptr + 4096, 4096, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    return a, b, ptr


def _post_released(api: Any, buf: Any) -> None:
    a, b, ptr = _two(api, buf)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(ptr, 8, 0)], "DRAM"),
                          b.get_xfer_descs([(ptr + 4096, 8, 0)], "DRAM"), "cb")
    h.release()
    a.transfer(h)


def _dereg_twice_in_list(api: Any, buf: Any) -> None:
    a, _b, ptr = _two(api, buf)
    a.register_memory([(ptr, 64, 0, "")], "DRAM")
    a.deregister_memory(a.get_reg_descs([(ptr, 64, 0, ""), (ptr, 64, 0, "")], "DRAM"))


def _exit_after_agent(api: Any, buf: Any) -> None:
    api.nixl_agent("ce", api.nixl_agent_config(backends=["UCX"]))
    sys.stdout.flush()
    sys.exit(0)


CASES = {"post-released-handle": _post_released, "dereg-same-descriptor-twice":
         _dereg_twice_in_list, "exit-after-agent": _exit_after_agent}


# -- the parent's side ----------------------------------------------------------------------

def _child(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", MODULE, *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def run_real(seeds: Sequence[int], length: int, *, timeout: float = 300.0) -> dict[str, Any]:
    """The real agents' results for each seed (``results``: seed -> list) and the child's
    sockets (``sockets``), from one child process."""
    done = _child(["--seeds", ",".join(map(str, seeds)), "--length", str(length)], timeout)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(MARK)), None)
    if done.returncode != 0 or line is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeError(f"the real NIXL child exited {done.returncode} without results:\n"
                           f"{tail}")
    out: dict[str, Any] = json.loads(line[len(MARK):])
    return out


def run_case(name: str, *, timeout: float = 120.0) -> int:
    """The exit status of the child that runs case ``name`` (-11: SIGSEGV)."""
    return _child(["--case", name], timeout).returncode


# -- the child's side -----------------------------------------------------------------------

def _main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--seeds", default="")
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--case", choices=sorted(CASES))
    opts = parser.parse_args(list(argv))
    import importlib
    import logging
    logging.disable(logging.CRITICAL)       # the wheel logs every refused call at ERROR
    try:
        api = importlib.import_module("nixl._api")
    except ImportError:
        # the meta package picks CUDA 13 once cuda.bindings 13 is imported (docs/nixl.md §1);
        # its nixl._api is nixl_cu12._api on this machine anyway
        api = importlib.import_module("nixl_cu12._api")

    if opts.case:
        import ctypes
        buf = (ctypes.c_char * 8192)()
        CASES[opts.case](api, buf)
        sys.stdout.flush()
        os._exit(0)
    from .nixl_diff import generate, make_side, run_side

    results: dict[str, Any] = {}
    sockets: dict[str, None] = {}
    kept = []
    for seed in [int(s) for s in opts.seeds.split(",") if s]:
        side = make_side(api.nixl_agent, api.nixl_agent_config, seed)
        kept.append(side)
        results[str(seed)] = run_side(side, generate(seed, opts.length))
        sockets.update(dict.fromkeys(_sockets()))     # while this seed's agents live
        side.drop_agents()      # their progress threads would spin through later seeds
    print(MARK + json.dumps({"results": results, "sockets": list(sockets)}), flush=True)
    sys.stderr.flush()
    os._exit(0)      # the wheel's UCX backend segfaults at interpreter exit (module docs)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
