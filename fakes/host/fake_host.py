"""``FakeHost``: one machine's memory shared by N rank processes, and each rank's view of it.

Every rank process opens the same host by path (:class:`SharedState`), so each charge is
host-wide and atomic. What the kernel counts host-wide lives there, in pages: each rank's
anonymous memory, each ``/dev/shm`` file's resident pages (charged once however many ranks
map them), the pages each rank pinned. What only a process knows stays in its
:class:`RankMemory`: which of its own pages it faulted, its pins by base, its mappings of
``/dev/shm`` files. The rules and their sources: docs/host.md.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from . import pages as P
from .limits import HostLimits
from .meetings import Meeting
from .pages import PAGE
from .shared_state import SharedState

__all__ = ["FakeHost", "HostTotals", "OomKilled", "PinTicket", "RankMemory", "SigBus"]

ANON = "anon"


class OomKilled(Exception):
    """The rank was killed by the OOM killer (SIGKILL): its process is gone."""

    def __init__(self, rank: int, reason: str) -> None:
        super().__init__(f"rank {rank} was OOM-killed: {reason}")
        self.rank = rank
        self.reason = reason


class SigBus(Exception):
    """The access raised SIGBUS (a tmpfs page that cannot be allocated, or past the file's
    end): the process dies unless it handles the signal (docs/host.md §2)."""


def _oserror(code: int, what: str) -> OSError:
    return OSError(code, os.strerror(code), what)


@dataclass(frozen=True)
class HostTotals:
    """Host-wide figures in bytes, read in one transaction."""

    ram: int
    anon: int            # the ranks' anonymous memory faulted in
    shm: int             # /dev/shm pages resident
    pinned: int          # distinct pages pinned by cudaHostRegister, all ranks
    mlocked: int
    page_cache: int      # what is left of the reclaimable file cache
    other_used: int
    reserve: int
    wmark_low: int
    cgroup_usage: int    # the ranks' cgroup: their anon and shm pages
    cgroup_max: int | None

    @property
    def free(self) -> int:
        """MemFree."""
        return max(self.ram - self.other_used - self.page_cache - self.anon - self.shm, 0)

    @property
    def available(self) -> int:
        """MemAvailable: si_mem_available() (mm/show_mem.c); shmem is swap-backed and never
        counted as reclaimable (docs/host.md §4)."""
        cache = self.page_cache - min(self.page_cache // 2, self.wmark_low)
        return max(self.free - self.reserve + cache, 0)


@dataclass
class PinTicket:
    """A pin in flight (between :meth:`RankMemory.begin_pin` and ``finish_pin``)."""

    addr: int
    nbytes: int
    segments: list[tuple[str, int, int]]   # (space, page lo, page hi)
    inflight: list[int]                    # ids of the shared-state in-flight entries


def _empty_rank() -> dict[str, Any]:
    return {"anon": 0, "pinned": 0, "mlocked": 0, "shm_rss": 0, "killed": None,
            "exited": False}


def _pages(nbytes: int | None) -> int | None:
    return None if nbytes is None else nbytes // PAGE


class FakeHost:
    """A host every rank process opens by the same path; see docs/host.md."""

    def __init__(self, path: str | os.PathLike[str], limits: HostLimits | None = None) -> None:
        """Open the host at ``path``; ``limits``: what its creator made it with, when the
        caller has them (a rank given them need not read the state to learn them)."""
        self.state = SharedState(path)
        if not self.state.exists():
            raise FileNotFoundError(errno.ENOENT, "no fake host at this path", str(path))
        self.limits = (HostLimits.from_dict(self.state.read()["limits"]) if limits is None
                       else limits)

    @classmethod
    def create(cls, path: str | os.PathLike[str], limits: HostLimits) -> FakeHost:
        """A new host at ``path``; its /dev/shm holds the stale files ``limits`` gives,
        resident (a crashed run wrote them) and mapped by no one."""
        files = {name: {"size": size, "resident": [[0, -(-size // PAGE)]] if size else [],
                        "pins": {}, "mapped_by": [], "unlinked": False, "stale": True}
                 for name, size in limits.stale_shm}
        SharedState(path).create({
            "limits": limits.to_dict(), "ranks": {}, "files": files, "inflight": [],
            "next_id": 1, "page_cache": limits.page_cache // PAGE, "events": []})
        return cls(path, limits)

    def rank(self, rank: int, *, pid: int | None = None) -> RankMemory:
        """Rank ``rank``'s view: one per rank process. ``pid``: the rank's process, which
        an OOM kill by another rank then ends with SIGKILL, as the kernel's does (None: the
        victim learns it at its next call, for ranks that share one process)."""
        return RankMemory(self, rank, pid=pid)

    def rendezvous(self, name: str, parties: int, timeout: float, *,
                   rank: int | None = None) -> bool:
        """Arrive at the meeting ``name`` and wait until ``parties`` callers have arrived
        (True), or ``timeout`` seconds passed (False: a peer that never comes, say one whose
        build failed, delays the others but never holds them). The ranks of a many-rank
        scenario meet here before they register, as an engine's ranks start together after
        their process group forms: so what overlaps in time on a machine (pins of the same
        shared pages) overlaps here too, however the processes were scheduled up to that
        point. A caller that gives its ``rank`` is known by it, and a rank below
        ``parties`` the host's OOM killer took counts as arrived, since it never comes
        (:class:`~.meetings.Meeting`)."""
        meeting = self.meeting(name)
        meeting.arrive(rank)
        return meeting.wait(timeout, parties=parties)

    def meeting(self, name: str) -> Meeting:
        """The meeting ``name`` of this host's ranks, to arrive at and wait on apart."""
        return Meeting(self.state.path, name, self.killed)

    # -- host-wide figures ------------------------------------------------------------------
    def totals(self, state: dict[str, Any] | None = None) -> HostTotals:
        st = self.state.read() if state is None else state
        lim = self.limits
        ranks = st["ranks"].values()
        anon = sum(r["anon"] for r in ranks)
        shm = sum(P.count(f["resident"]) for f in st["files"].values())
        return HostTotals(
            ram=lim.ram, anon=anon * PAGE, shm=shm * PAGE,
            pinned=_pinned_pages(st) * PAGE, mlocked=sum(r["mlocked"] for r in ranks) * PAGE,
            page_cache=st["page_cache"] * PAGE, other_used=lim.other_used,
            reserve=lim.reserve, wmark_low=lim.wmark_low, cgroup_usage=(anon + shm) * PAGE,
            cgroup_max=lim.cgroup_memory_max)

    def shm_files(self) -> dict[str, dict[str, Any]]:
        """The files in /dev/shm: size, resident bytes, the live ranks mapping each, and
        ``stale`` for one a crashed earlier run left (``HostLimits.stale_shm``)."""
        st = self.state.read()
        return {name: {"size": f["size"], "resident": P.count(f["resident"]) * PAGE,
                       "mapped_by": sorted(f["mapped_by"]),
                       **({"stale": True} if f.get("stale") else {})}
                for name, f in st["files"].items() if not f["unlinked"]}

    def events(self) -> list[dict[str, Any]]:
        """What happened to ranks (OOM kills), in order."""
        return list(self.state.read()["events"])

    def rank_pinned(self, rank: int) -> int:
        """Bytes rank ``rank`` holds pinned (its private pages and its shared ones)."""
        st = self.state.read()
        return _rank_pinned_pages(st, str(rank)) * PAGE

    def killed(self) -> dict[int, str]:
        st = self.state.read()
        return {int(r): v["killed"] for r, v in st["ranks"].items() if v["killed"]}


# -- accounting on a state dict (inside one transaction) ---------------------------------------
def _pinned_pages(st: dict[str, Any]) -> int:
    private = sum(r["pinned"] for r in st["ranks"].values())
    shared = sum(P.union_count(list(f["pins"].values())) for f in st["files"].values())
    return int(private + shared)


def _rank_pinned_pages(st: dict[str, Any], rank: str) -> int:
    private = int(st["ranks"].get(rank, _empty_rank())["pinned"])
    return private + sum(P.count(f["pins"].get(rank, [])) for f in st["files"].values())


def _used_pages(st: dict[str, Any]) -> int:
    anon = sum(r["anon"] for r in st["ranks"].values())
    return int(anon + sum(P.count(f["resident"]) for f in st["files"].values()))


def _room(st: dict[str, Any], lim: HostLimits, need: int) -> bool:
    """Whether ``need`` more pages fit the cgroup and the RAM, reclaiming file cache first."""
    used = _used_pages(st)
    cg = _pages(lim.cgroup_memory_max)
    if cg is not None and used + need > cg:
        return False          # memory.max: the cgroup cannot grow (docs/host.md §1)
    free = (lim.ram - lim.other_used - lim.reserve) // PAGE - st["page_cache"] - used
    if need > free:
        reclaimed = min(st["page_cache"], need - free)
        st["page_cache"] -= reclaimed
        free += reclaimed
    return bool(need <= free)


def _drop_file_if_gone(st: dict[str, Any], name: str) -> None:
    """An unlinked file's pages go when nothing refers to them: no mapping and no pin (a
    pin holds its pages after munmap, until it is unregistered: pin_user_pages.rst)."""
    f = st["files"][name]
    if f["unlinked"] and not f["mapped_by"] and not any(f["pins"].values()):
        del st["files"][name]   # the last reference closed: tmpfs frees the pages


def _kill(st: dict[str, Any], rank: str, reason: str) -> None:
    """The rank's process ends (OOM kill or exit): its anonymous memory and pins go, its
    mappings close; the /dev/shm files it did not unlink stay, charged (docs/host.md §2)."""
    r = st["ranks"].setdefault(rank, _empty_rank())
    r.update(anon=0, pinned=0, mlocked=0, shm_rss=0)
    if reason:
        r["killed"] = reason
        st["events"].append({"kind": "oom-kill", "rank": int(rank), "reason": reason})
        pid = r.get("pid")
        if pid is not None and pid != os.getpid():   # the kernel's SIGKILL (the caller
            with suppress(ProcessLookupError):       # itself gets OomKilled)
                os.kill(pid, signal.SIGKILL)
    else:
        r["exited"] = True
    for name in list(st["files"]):
        f = st["files"][name]
        f["pins"].pop(rank, None)
        if int(rank) in f["mapped_by"]:
            f["mapped_by"].remove(int(rank))
        _drop_file_if_gone(st, name)
    st["inflight"] = [e for e in st["inflight"] if e["rank"] != int(rank)]


def _oom(st: dict[str, Any], lim: HostLimits, need: int, caller: str) -> bool:
    """Make room for ``need`` pages by OOM-killing the live rank with the most resident
    memory (oom_badness: its RSS, shmem included), until they fit; True when the caller
    itself was killed (docs/host.md §1)."""
    while not _room(st, lim, need):
        live = [(r["anon"] + r["shm_rss"], -int(k), k) for k, r in st["ranks"].items()
                if not r["killed"] and not r["exited"]]
        if not live:
            return True
        _, _, victim = max(live)
        _kill(st, victim, f"out of memory: {need * PAGE} bytes more did not fit")
        if victim == caller:
            return True
    return False


class RankMemory:
    """One rank process's memory on the host: what it maps, touches, locks and pins."""

    def __init__(self, host: FakeHost, rank: int, *, pid: int | None = None) -> None:
        self.host = host
        self.rank = rank
        self._key = str(rank)
        self._anon_resident: P.Ranges = []        # pages of its own memory faulted in
        self._anon_pinned: P.Ranges = []
        self._anon_mlocked: P.Ranges = []
        self._file_touched: dict[str, P.Ranges] = {}
        self._boundary: Counter[tuple[str, int]] = Counter()
        self._pins: dict[int, PinTicket] = {}     # live pins by base address
        self._maps: list[tuple[int, int, str, int]] = []   # (addr, length, file, offset)
        with host.state.change() as st:
            r = st["ranks"].setdefault(self._key, _empty_rank())
            r["exited"] = False
            if pid is not None:
                r["pid"] = pid

    def set_pid(self, pid: int | None) -> None:
        """The process an OOM kill by another rank sends SIGKILL at once; None: the rank
        learns it at its next call (:meth:`FakeHost.rank`)."""
        with self.host.state.change() as st:
            r = st["ranks"][self._key]
            if pid is None:
                r.pop("pid", None)
            else:
                r["pid"] = pid

    # -- helpers ---------------------------------------------------------------------------
    def _alive(self, st: dict[str, Any]) -> None:
        r = st["ranks"][self._key]
        if r["killed"]:
            raise OomKilled(self.rank, r["killed"])

    def _segments(self, addr: int, nbytes: int) -> list[tuple[str, int, int]]:
        """``[addr, addr + nbytes)`` split into (space, page lo, page hi): a /dev/shm file's
        pages (by file offset) where it is mapped, the rank's own pages elsewhere."""
        out: list[tuple[str, int, int]] = []
        pos, end = addr, addr + nbytes
        for base, length, name, offset in sorted(self._maps):
            if base + length <= pos or base >= end:
                continue
            if base > pos:
                out.append((ANON, *P.page_span(pos, base - pos)))
            lo, hi = max(pos, base), min(end, base + length)
            out.append((f"file:{name}", *P.page_span(offset + lo - base, hi - lo)))
            pos = hi
        if pos < end:
            out.append((ANON, *P.page_span(pos, end - pos)))
        return out

    def _fault(self, st: dict[str, Any], segs: list[tuple[str, int, int]], *,
               beyond_eof: int, tmpfs_full: int) -> tuple[int, int]:
        """Fault the segments' pages in, in order, until a /dev/shm page past the file's end
        (code ``beyond_eof``) or one tmpfs cannot allocate (``tmpfs_full``); (code, pages
        faulted). The pages before a failure stay. The caller checked the RAM first."""
        lim = self.host.limits
        shm_cap = lim.shm_size // PAGE
        shm_used = sum(P.count(f["resident"]) for f in st["files"].values())
        done = 0
        for space, lo, hi in segs:
            if space == ANON:
                self._anon_resident, new = P.add(self._anon_resident, lo, hi)
                st["ranks"][self._key]["anon"] += new
                done += new
                continue
            name = space[5:]
            f = st["files"][name]
            end = min(hi, -(-f["size"] // PAGE))     # the pages before the file's end
            for a, b in P.gaps(f["resident"], lo, end):
                room = shm_cap - shm_used
                if b - a > room:    # the pages before the one tmpfs cannot allocate stay
                    if room > 0:
                        self._fault_file(st, f, name, a, a + room)
                    return tmpfs_full, done + max(room, 0)
                self._fault_file(st, f, name, a, b)
                shm_used += b - a
                done += b - a
            self._fault_file(st, f, name, lo, end)   # this rank's share of what was there
            if end < hi:
                return beyond_eof, done
        return 0, done

    def _fault_file(self, st: dict[str, Any], f: dict[str, Any], name: str, lo: int,
                    hi: int) -> None:
        f["resident"], _ = P.add(f["resident"], lo, hi)
        self._file_touched[name], mine_new = P.add(self._file_touched.get(name, []), lo, hi)
        st["ranks"][self._key]["shm_rss"] += mine_new

    def _new_pages(self, st: dict[str, Any], segs: list[tuple[str, int, int]]) -> int:
        """Pages the segments would fault in (not yet resident)."""
        n = 0
        for space, lo, hi in segs:
            if space == ANON:
                n += (hi - lo) - _covered(self._anon_resident, lo, hi)
            else:
                f = st["files"].get(space[5:])
                n += (hi - lo) - (_covered(f["resident"], lo, hi) if f else 0)
        return n

    # -- /dev/shm files (docs/host.md §2) ----------------------------------------------------
    def shm_create(self, name: str, *, exclusive: bool = True) -> None:
        """``open("/dev/shm/<name>", O_CREAT | (O_EXCL))``: EEXIST when it exists and
        ``exclusive`` (a stale file from a crashed run included)."""
        with self.host.state.change() as st:
            self._alive(st)
            f = st["files"].get(name)
            if f is not None and not f["unlinked"]:
                if exclusive:
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST),
                                          f"/dev/shm/{name}")
                return
            st["files"][name] = {"size": 0, "resident": [], "pins": {}, "mapped_by": [],
                                 "unlinked": False}

    def _file(self, st: dict[str, Any], name: str) -> dict[str, Any]:
        f = st["files"].get(name)
        if f is None or f["unlinked"]:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), f"/dev/shm/{name}")
        return f  # type: ignore[no-any-return]

    def shm_ftruncate(self, name: str, size: int) -> None:
        """ftruncate: sets the size without allocating (sparse), so it succeeds past what
        /dev/shm can hold; shrinking frees the pages past the end."""
        if size < 0:
            raise _oserror(errno.EINVAL, f"/dev/shm/{name}")
        with self.host.state.change() as st:
            self._alive(st)
            f = self._file(st, name)
            f["size"] = size
            f["resident"], _ = P.remove(f["resident"], -(-size // PAGE), 1 << 62)

    def shm_fallocate(self, name: str, offset: int, length: int) -> None:
        """posix_fallocate: allocates the pages now; ENOSPC (nothing allocated) when /dev/shm
        cannot hold them, ENOMEM when the memory cgroup or RAM cannot; grows the size."""
        with self.host.state.change() as st:
            self._alive(st)
            f = self._file(st, name)
            lo, hi = P.page_span(offset, length)
            missing = (hi - lo) - _covered(f["resident"], lo, hi)
            shm_used = sum(P.count(g["resident"]) for g in st["files"].values())
            if shm_used + missing > self.host.limits.shm_size // PAGE:
                raise _oserror(errno.ENOSPC, f"/dev/shm/{name}")
            if not _room(st, self.host.limits, missing):
                raise _oserror(errno.ENOMEM, f"/dev/shm/{name}")
            f["resident"], _ = P.add(f["resident"], lo, hi)
            f["size"] = max(f["size"], offset + length)

    def shm_unlink(self, name: str) -> None:
        """unlink: the name goes now, the pages when the last mapping closes."""
        with self.host.state.change() as st:
            self._alive(st)
            self._file(st, name)["unlinked"] = True
            _drop_file_if_gone(st, name)

    def map_shm(self, name: str, addr: int, length: int, offset: int = 0, *,
                unlinked: bool = False) -> None:
        """mmap(MAP_SHARED) of the file at ``addr`` in this rank's address space.
        ``unlinked``: the mapping was made before the name was unlinked and is seen only
        now (a file still referenced keeps its pages)."""
        with self.host.state.change() as st:
            self._alive(st)
            f = st["files"].get(name) if unlinked else None
            if f is None:
                f = self._file(st, name)
            if self.rank not in f["mapped_by"]:
                f["mapped_by"].append(self.rank)
        self._maps.append((addr, length, name, offset))

    def unmap_shm(self, addr: int) -> None:
        """munmap of the mapping at ``addr`` (its pins stay until unregistered)."""
        entry = next((m for m in self._maps if m[0] == addr), None)
        if entry is None:
            raise ValueError(f"no /dev/shm mapping at {addr:#x}")
        self._maps.remove(entry)
        name = entry[2]
        if any(m[2] == name for m in self._maps):
            return
        with self.host.state.change() as st:
            f = st["files"].get(name)
            if f is not None and self.rank in f["mapped_by"]:
                f["mapped_by"].remove(self.rank)
                _drop_file_if_gone(st, name)

    # -- touching memory ---------------------------------------------------------------------
    def touch(self, addr: int, nbytes: int) -> None:
        """The rank writes ``[addr, addr + nbytes)``: its pages fault in. A /dev/shm page
        tmpfs cannot allocate, or past the file's end, is SIGBUS (:class:`SigBus`); memory
        the cgroup or RAM cannot hold OOM-kills the largest rank (:class:`OomKilled` if it
        is this one)."""
        self._touch(addr, nbytes, populate=False)

    def populate(self, addr: int, nbytes: int) -> None:
        """madvise(MADV_POPULATE_WRITE): as :meth:`touch`, but a page that would raise
        SIGBUS fails the call with EFAULT; the pages before it stay (docs/host.md §2)."""
        self._touch(addr, nbytes, populate=True)

    def _touch(self, addr: int, nbytes: int, *, populate: bool) -> None:
        segs = self._segments(addr, nbytes)
        killed = None
        sig = -1
        with self.host.state.change() as st:
            self._alive(st)
            if _oom(st, self.host.limits, self._new_pages(st, segs), self._key):
                killed = st["ranks"][self._key]["killed"]
            else:
                code, _ = self._fault(st, segs, beyond_eof=-1, tmpfs_full=-1)
                sig = code
        if killed:
            raise OomKilled(self.rank, killed)
        if sig == -1:
            if populate:
                raise _oserror(errno.EFAULT, "madvise(MADV_POPULATE_WRITE)")
            raise SigBus(f"rank {self.rank}: SIGBUS touching [{addr:#x}, {addr + nbytes:#x})")

    # -- mlock and RLIMIT_MEMLOCK (docs/host.md §3) ----------------------------------------------
    def _memlock_code(self, st: dict[str, Any], new: int) -> int:
        lim = self.host.limits
        if lim.cap_ipc_lock or lim.memlock is None:
            return 0
        if lim.memlock == 0:
            return errno.EPERM
        r = st["ranks"][self._key]
        locked = r["mlocked"] + (_rank_pinned_pages(st, self._key)
                                 if lim.pins_count_memlock else 0)
        return errno.ENOMEM if locked + new > lim.memlock // PAGE else 0

    def mlock(self, addr: int, nbytes: int) -> None:
        """mlock(2) of the rank's own memory: EPERM with RLIMIT_MEMLOCK 0, ENOMEM past it
        (none with CAP_IPC_LOCK); the pages fault in and count as Mlocked."""
        segs = self._segments(addr, nbytes)
        if any(space != ANON for space, _, _ in segs):
            raise ValueError("the fake host locks a rank's own memory only")
        _, lo, hi = segs[0]
        new = (hi - lo) - _covered(self._anon_mlocked, lo, hi)
        with self.host.state.change() as st:
            self._alive(st)
            code = self._memlock_code(st, new)
            if code:
                raise _oserror(code, "mlock")
            if not _room(st, self.host.limits, self._new_pages(st, segs)):
                raise _oserror(errno.ENOMEM, "mlock")
            self._fault(st, segs, beyond_eof=0, tmpfs_full=0)
            self._anon_mlocked, added = P.add(self._anon_mlocked, lo, hi)
            st["ranks"][self._key]["mlocked"] += added

    def munlock(self, addr: int, nbytes: int) -> None:
        lo, hi = P.page_span(addr, nbytes)
        self._anon_mlocked, removed = P.remove(self._anon_mlocked, lo, hi)
        with self.host.state.change() as st:
            st["ranks"][self._key]["mlocked"] -= removed

    # -- pinning: the hook cudaHostRegister consults (docs/host.md §5) --------------------------
    def claim(self, nbytes: int) -> None:
        """The pool this rank will pin (kvreg's, declared before any rank registers): with
        ``refusal_order = "rank"`` the host keeps room for the lower ranks' claims."""
        with self.host.state.change() as st:
            st["ranks"][self._key]["claim"] = -(-nbytes // PAGE)

    def begin_pin(self, addr: int, nbytes: int) -> PinTicket:
        """A pin starts: pins of /dev/shm pages are in flight until :meth:`finish_pin`, so
        that another rank pinning the same pages meanwhile is seen as concurrent."""
        if nbytes <= 0:
            raise ValueError("a pin needs a positive size")
        for base, t in self._pins.items():
            if base < addr + nbytes and addr < base + t.nbytes:
                raise ValueError(f"[{addr:#x}, {addr + nbytes:#x}) overlaps a live pin at "
                                 f"{base:#x} (the driver refuses it first with 712)")
        ticket = PinTicket(addr, nbytes, self._segments(addr, nbytes), [])
        shared = [(s, lo, hi) for s, lo, hi in ticket.segments if s != ANON]
        if shared and self.host.limits.concurrent_shared_pin_fails:
            with self.host.state.change() as st:
                self._alive(st)
                for space, lo, hi in shared:
                    entry = {"id": st["next_id"], "rank": self.rank, "space": space,
                             "lo": lo, "hi": hi, "contended": False}
                    st["next_id"] += 1
                    for other in st["inflight"]:
                        if other["space"] == space and other["lo"] < hi and lo < other["hi"]:
                            other["contended"] = entry["contended"] = True
                    st["inflight"].append(entry)
                    ticket.inflight.append(entry["id"])
        return ticket

    def finish_pin(self, ticket: PinTicket) -> int:
        """The pin ends: 0, or the code cudaHostRegister returns (nothing stays pinned)."""
        with self.host.state.change() as st:
            self._alive(st)
            contended = any(e["contended"] for e in st["inflight"] if e["id"] in ticket.inflight)
            st["inflight"] = [e for e in st["inflight"] if e["id"] not in ticket.inflight]
            if contended:
                return 1   # pin_user_pages -ENOMEM after a failed migration (docs/host.md §5)
            code = self._pin_code(st, ticket.segments)
            if code:
                return code
            self._fault(st, ticket.segments, beyond_eof=0, tmpfs_full=0)
            for space, lo, hi in ticket.segments:
                self._add_pinned(st, space, lo, hi)
        self._pins[ticket.addr] = ticket
        return 0

    def pin(self, addr: int, nbytes: int) -> int:
        """Pin ``[addr, addr + nbytes)`` for cudaHostRegister: 0 or the real code."""
        ticket = self.begin_pin(addr, nbytes)
        if ticket.inflight and self.host.limits.shared_pin_window_s:
            time.sleep(self.host.limits.shared_pin_window_s)
        return self.finish_pin(ticket)

    def _pin_code(self, st: dict[str, Any], segs: list[tuple[str, int, int]]) -> int:
        lim = self.host.limits
        shm_cap = lim.shm_size // PAGE
        shm_used = sum(P.count(f["resident"]) for f in st["files"].values())
        new_pinned = 0
        rank_new = 0
        for space, lo, hi in segs:
            if space == ANON:
                new = (hi - lo) - _covered(self._anon_pinned, lo, hi)
                new_pinned += new
                rank_new += new
                continue
            f = st["files"].get(space[5:])
            if f is None or hi > -(-f["size"] // PAGE):
                return 1   # past the file's end: GUP gets SIGBUS -> EFAULT -> 1 (§5)
            missing = (hi - lo) - _covered(f["resident"], lo, hi)
            if shm_used + missing > shm_cap:
                return 1   # tmpfs cannot allocate: SIGBUS in the fault -> EFAULT -> 1 (§5)
            shm_used += missing
            mine = f["pins"].get(self._key, [])
            rank_new += (hi - lo) - _covered(mine, lo, hi)
            before = P.union_count(list(f["pins"].values()))
            after = P.union_count([*f["pins"].values(), [[lo, hi]]])
            new_pinned += after - before
        pinnable = (lim.ram - lim.movable - lim.other_used - lim.reserve) // PAGE
        if _pinned_pages(st) + new_pinned > pinnable:
            return lim.pin_exhausted_code
        if lim.refusal_order == "rank" and rank_new and self._past_rank_share(st, rank_new):
            return lim.pin_exhausted_code
        if lim.pins_count_memlock and self._memlock_code(st, rank_new):
            return lim.pin_exhausted_code
        if not _room(st, lim, self._new_pages(st, segs)):
            return lim.pin_exhausted_code
        return 0

    def _past_rank_share(self, st: dict[str, Any], new: int) -> bool:
        """``refusal_order = "rank"``: whether this rank's pins would pass what is left of
        the host's pinnable memory once the lower ranks' claimed pools are held, as if the
        ranks pinned one after another in rank order (docs/host.md §5)."""
        lower = sum(r.get("claim", 0) for k, r in st["ranks"].items()
                    if int(k) < self.rank and not r["killed"] and not r["exited"])
        share = self.host.limits.pin_capacity // PAGE - lower
        return bool(_rank_pinned_pages(st, self._key) + new > share)

    def _add_pinned(self, st: dict[str, Any], space: str, lo: int, hi: int) -> None:
        for page in {lo, hi - 1}:
            self._boundary[(space, page)] += 1
        if space == ANON:
            self._anon_pinned, new = P.add(self._anon_pinned, lo, hi)
            st["ranks"][self._key]["pinned"] += new
            return
        f = st["files"][space[5:]]
        f["pins"][self._key], _ = P.add(f["pins"].get(self._key, []), lo, hi)

    def unpin(self, addr: int) -> None:
        """cudaHostUnregister of the pin at ``addr``: its pages stay resident, unpinned
        (a page another pin of this rank shares stays pinned)."""
        ticket = self._pins.pop(addr, None)
        if ticket is None:
            raise ValueError(f"no live pin at {addr:#x}")
        with self.host.state.change() as st:
            if st["ranks"][self._key]["killed"]:
                return
            for space, lo, hi in ticket.segments:
                keep_lo = keep_hi = False
                for page in {lo, hi - 1}:
                    self._boundary[(space, page)] -= 1
                    if self._boundary[(space, page)] > 0:
                        keep_lo |= page == lo
                        keep_hi |= page == hi - 1
                    else:
                        del self._boundary[(space, page)]
                a, b = lo + keep_lo, hi - keep_hi
                if space == ANON:
                    self._anon_pinned, removed = P.remove(self._anon_pinned, a, b)
                    st["ranks"][self._key]["pinned"] -= removed
                    continue
                f = st["files"].get(space[5:])
                if f is not None:
                    f["pins"][self._key], _ = P.remove(f["pins"].get(self._key, []), a, b)
                    _drop_file_if_gone(st, space[5:])

    def live_pins(self) -> dict[int, int]:
        """This rank's live pins: base -> bytes."""
        return {base: t.nbytes for base, t in self._pins.items()}

    # -- the process ends ------------------------------------------------------------------
    def exit(self) -> None:
        """The rank's process exits (or dies): everything it held goes but its /dev/shm
        files (stale unless unlinked)."""
        with self.host.state.change() as st:
            if not st["ranks"][self._key]["killed"]:
                _kill(st, self._key, "")
        self._pins.clear()
        self._maps.clear()
        self._anon_resident, self._anon_pinned, self._anon_mlocked = [], [], []
        self._file_touched.clear()
        self._boundary.clear()


_covered = P.covered
