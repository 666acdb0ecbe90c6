"""What ``/proc/meminfo`` and the cgroup's files answer on a fake host, and the patch that
makes code reading them (``psutil.virtual_memory()`` included) see it.

psutil reads ``/proc/meminfo`` through ``open`` on every ``virtual_memory()`` call and
computes ``available`` = MemAvailable, ``used`` = total - available, ``free`` = MemFree,
``cached`` = Cached + SReclaimable, ``shared`` = Shmem (psutil 7.1 ``_pslinux.py``,
docs/host.md §4): so the patch serves that file and psutil's own code runs unmodified, on a
host whose figures fall as the ranks fault their pages in. psutil need not be installed.
``/proc/self/cgroup`` and the cgroup mounts of ``/proc/self/mountinfo`` answer as a cgroup2
root at ``/sys/fs/cgroup``, so code that walks to its cgroup's files reads the host's.
"""

from __future__ import annotations

import builtins
import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .fake_host import FakeHost, HostTotals

__all__ = ["CGROUP_DIR", "MEMINFO_PATH", "PROC_CGROUP", "PROC_MOUNTINFO", "cgroup_files",
           "meminfo_fields", "meminfo_text", "patch_host_files"]

MEMINFO_PATH = "/proc/meminfo"
CGROUP_DIR = "/sys/fs/cgroup"


def meminfo_fields(t: HostTotals) -> dict[str, int]:
    """The fields of /proc/meminfo in bytes (fs/proc/meminfo.c; docs/host.md §4). Pins of
    cudaHostRegister are in no field: ``pin_user_pages`` sets no VM_LOCKED, so Mlocked
    counts mlock(2) alone."""
    anon_lru = max(t.anon + t.shm - t.mlocked, 0)
    return {
        "MemTotal": t.ram, "MemFree": t.free, "MemAvailable": t.available, "Buffers": 0,
        # Cached is the page cache, shmem included (NR_FILE_PAGES)
        "Cached": t.page_cache + t.shm, "SwapCached": 0,
        "Active": anon_lru + t.other_used, "Inactive": t.page_cache,
        "Active(anon)": anon_lru + t.other_used, "Inactive(anon)": 0,
        "Active(file)": 0, "Inactive(file)": t.page_cache,
        "Unevictable": t.mlocked, "Mlocked": t.mlocked,
        "SwapTotal": 0, "SwapFree": 0,
        "AnonPages": t.anon + t.other_used, "Mapped": t.shm, "Shmem": t.shm,
        "KReclaimable": 0, "Slab": 0, "SReclaimable": 0, "SUnreclaim": 0,
    }


def meminfo_text(t: HostTotals) -> str:
    """The file's text: ``Name:   <kB> kB`` lines."""
    return "".join(f"{f'{name}:':<16}{value // 1024:>8} kB\n"
                   for name, value in meminfo_fields(t).items())


def cgroup_files(t: HostTotals) -> dict[str, str]:
    """cgroup v2 ``memory.max`` ("max" when unlimited), ``memory.high`` (never set),
    ``memory.current`` and ``memory.stat`` (anon, file = shmem, no file LRU pages: the
    ranks' cgroup holds no page cache), cgroup-v2.rst "Memory Interface Files"."""
    stat = {"anon": t.anon, "file": t.shm, "shmem": t.shm, "file_mapped": t.shm,
            "active_anon": t.anon + t.shm, "inactive_anon": 0, "active_file": 0,
            "inactive_file": 0, "unevictable": t.mlocked}
    return {f"{CGROUP_DIR}/memory.max":
            "max\n" if t.cgroup_max is None else f"{t.cgroup_max}\n",
            f"{CGROUP_DIR}/memory.high": "max\n",
            f"{CGROUP_DIR}/memory.current": f"{t.cgroup_usage}\n",
            f"{CGROUP_DIR}/memory.stat": "".join(f"{k} {v}\n" for k, v in stat.items())}


# the ranks' cgroup is the root of a cgroup2 hierarchy mounted at CGROUP_DIR, as in a
# container with a private cgroup namespace: /proc/self/cgroup and the cgroup lines of
# /proc/self/mountinfo say so, whatever the machine running kvreg has (cgroup v1, v2,
# another path), so code that locates its cgroup (SGLang's host_memory.py) finds the host's
PROC_CGROUP = "/proc/self/cgroup"
PROC_MOUNTINFO = "/proc/self/mountinfo"
_CGROUP2_MOUNT = (f"9999 1 0:9999 / {CGROUP_DIR} rw,nosuid,nodev,noexec,relatime - cgroup2 "
                  "cgroup2 rw\n")


def _mountinfo() -> str:
    """The real mount table without its cgroup mounts, and the host's cgroup2 mount."""
    try:
        with _REAL_OPEN(PROC_MOUNTINFO) as real:
            lines = [line for line in real
                     if " - cgroup " not in line and " - cgroup2 " not in line]
    except OSError:
        lines = []
    return "".join(lines) + _CGROUP2_MOUNT


_HOSTS: list[FakeHost] = []      # the hosts patched in, innermost last
_REAL_OPEN: Callable[..., Any] = builtins.open


def _answer(path: Any) -> str | None:
    if not _HOSTS or not isinstance(path, str | bytes | os.PathLike):
        return None
    name = os.fsdecode(path)
    if name == PROC_CGROUP:
        return "0::/\n"
    if name == PROC_MOUNTINFO:
        return _mountinfo()
    if name != MEMINFO_PATH and not name.startswith(CGROUP_DIR):
        return None
    totals = _HOSTS[-1].totals()
    if name == MEMINFO_PATH:
        return meminfo_text(totals)
    return cgroup_files(totals).get(name)


def _open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    text = _answer(file)
    if text is None or any(c in mode for c in "wax+"):
        return _REAL_OPEN(file, mode, *args, **kwargs)
    if "b" in mode:
        return io.BytesIO(text.encode())
    return io.StringIO(text)


@contextmanager
def patch_host_files(host: FakeHost) -> Iterator[FakeHost]:
    """For the block, reading /proc/meminfo or the cgroup's memory.max / memory.current
    (``open``, ``io.open``, ``pathlib.Path.read_text``) answers from ``host``, read at
    each open. Nests: the innermost host answers."""
    first = not _HOSTS
    _HOSTS.append(host)
    if first:
        builtins.open = _open
        io.open = _open
    try:
        yield host
    finally:
        _HOSTS.remove(host)
        if not _HOSTS:
            builtins.open = _REAL_OPEN
            io.open = _REAL_OPEN
