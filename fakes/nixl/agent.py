"""``nixl._bindings.nixlAgent``: the agent's registrations, remote metadata, descriptor-list
preparations and transfer requests, with the checks and statuses of nixl-cu12 1.5.1.

Each check is the one the real agent makes, in its order, with the status it raises and the
line it logs (kept on the exception as ``kvreg_detail``); docs/nixl.md §3-§5 gives the
observed call behind each. The agent lives in a :class:`~.fake.FakeNixl`, which holds its
memory (real bytes move for DRAM), the fake GPU memory VRAM registrations are checked
against, and the other agents (a loaded remote is a snapshot of its registrations).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cuda.device_memory import device_range
from .bindings import (
    NIXL_INIT_AGENT,
    NixlCrash,
    NotModelledError,
    incompatible,
    nixl_mem_t,
    nixl_status_t,
    nixlRegDList,
    nixlXferDList,
    raise_status,
)
from .sections import Range, populate

if TYPE_CHECKING:
    from .fake import FakeNixl

__all__ = ["MD_TAG", "Xfer", "nixlAgent", "nixlAgentConfig", "populate"]

S = nixl_status_t
MD_TAG = b"nixlSerDes|"                      # the metadata's first bytes [OBS-local]
_UCX_MEMS = (nixl_mem_t.DRAM_SEG, nixl_mem_t.VRAM_SEG)   # getBackendParams(UCX) [OBS-local]
_handles = itertools.count(0x5E1000, 0x40).__next__



class nixlAgentConfig:
    """The binding's config object (fields as ``nixl_agent`` sets them)."""

    def __init__(self) -> None:
        self.useProgThread = True
        self.useListenThread = False
        self.listenPort = 8888
        self.syncMode = 0
        self.pthrDelay = 0
        self.lthrDelay = 100000
        self.captureTelemetry = False


@dataclass
class Remote:
    """A loaded remote agent: its registrations as its metadata carried them."""

    name: str
    regs: dict[int, list[Range]]
    epoch: int


@dataclass
class Prepped:
    agent: str                      # NIXL_INIT_AGENT for the local side
    mem: nixl_mem_t
    descs: list[Range]
    epoch: int | None               # the remote's epoch when prepared


@dataclass
class Xfer:
    op: str                         # "WRITE" | "READ"
    local: list[Range]
    remote: list[Range]
    mems: tuple[nixl_mem_t, nixl_mem_t]
    agent: str
    epoch: int | None
    notif: bytes = b""
    state: str = "NEW"              # NEW, PROC, DONE, ERR
    moved: list[bool] = field(default_factory=list)


class nixlAgent:
    """The fake binding's agent; ``nixl_agent`` (fakes/nixl/api.py) drives it."""

    def __init__(self, name: str, config: nixlAgentConfig, *, fake: FakeNixl) -> None:
        if not isinstance(name, str):
            raise incompatible("__init__", "(self, name: str, cfg: nixlAgentConfig)")
        self.name = name
        self.config = config
        self.fake = fake
        self.backends: dict[int, str] = {}
        # a memory type's section, as nixlLocalSection keeps it: a key is there from the
        # first registration attempt a backend took up until a deregistration empties it
        self.regs: dict[int, list[tuple[int, int, int, bytes]]] = {}
        self.remotes: dict[str, Remote] = {}
        self._epochs: dict[str, int] = {}
        self.prepped: dict[int, Prepped] = {}
        self.xfers: dict[int, Xfer] = {}
        self.notifs: dict[str, list[bytes]] = {}
        # names whose metadata failed to load after UCX took their connection: the agent
        # forgets them, UCX does not, and every later load (even after remove_remote_agent)
        # is INVALID_PARAM [OBS-local]
        self.unloadable: set[str] = set()
        # the device memory behind each VRAM descriptor when it was registered (its buffer
        # ids, GpuMemory.backing): memory released and mapped anew is not reached through it
        self.backing: dict[tuple[int, int, int], tuple[int, ...]] = {}
        fake.agents[name] = self

    # -- plugins and backends -----------------------------------------------------------------
    def getAvailPlugins(self) -> list[str]:
        return list(self.fake.profile.plugins)

    def createBackend(self, backend: str, params: dict[str, str]) -> int:
        if backend != "UCX":
            raise NotModelledError(f"kvreg's fake NIXL agent models the UCX backend only, "
                                   f"not {backend} (docs/nixl.md §2)")
        handle = _handles()
        self.backends[handle] = backend
        return handle

    def getBackendParams(self, handle: int) -> tuple[dict[str, str], list[str]]:
        return {}, [m.name for m in _UCX_MEMS]

    def getPluginParams(self, plugin: str) -> tuple[dict[str, str], list[str]]:
        return {}, [m.name for m in _UCX_MEMS] if plugin == "UCX" else []

    def _mem_backends(self, mem: nixl_mem_t, handles: Sequence[int]) -> list[int]:
        chosen = [h for h in handles if h in self.backends] if handles else list(self.backends)
        return [h for h in chosen if mem in _UCX_MEMS]

    # -- registration -------------------------------------------------------------------------
    def registerMem(self, descs: Any, handles: Sequence[int] = ()) -> S:
        if not isinstance(descs, nixlRegDList):
            raise incompatible("registerMem", "(self: nixl._bindings.nixlAgent, descs: "
                               "nixl._bindings.nixlRegDList, backends: collections.abc."
                               "Sequence[typing.SupportsInt | typing.SupportsIndex] = []) -> "
                               "nixl._bindings.nixl_status_t")
        mem = descs.getType()
        if not self._mem_backends(mem, handles):
            raise_status(S.NIXL_ERR_NOT_FOUND, f"registerMem: no available backends for mem "
                         f"type '{mem.name}'")
        bad = self._vram_refused(descs.ranges) if mem == nixl_mem_t.VRAM_SEG else \
            _null_refused(descs.ranges)
        if bad is not None:
            self.refused(mem)
            raise_status(S.NIXL_ERR_BACKEND, f"nixlUcxContext {self.name}: {bad}; "
                         "registerMem: registration failed for the specified or all "
                         "potential backends")
        # overlapping, duplicate and zero-length descriptors are all taken [OBS-local]
        self.regs.setdefault(int(mem), []).extend(descs[i] for i in range(descs.descCount()))
        if mem == nixl_mem_t.VRAM_SEG and self.fake.gpu is not None:
            for addr, length, dev in descs.ranges:
                self.backing[(addr, length, dev)] = self.fake.gpu.backing(addr, length)
        return S.NIXL_SUCCESS

    def refused(self, mem: nixl_mem_t) -> None:
        """What a backend's refusal of one descriptor of a list leaves: none of the list
        registered (the ones before it are deregistered again), and the section of its
        memory type made if there was none. An empty section makes the agent's metadata
        unloadable until a registration fills it or a deregistration empties it away
        [verified: nixlLocalSection::addDescList, serialize, loadRemoteData; OBS-local,
        docs/nixl.md §3.3]."""
        self.regs.setdefault(int(mem), [])

    def register_failed(self, descs: Any, handles: Sequence[int], status: int) -> None:
        """The state a registerMem that failed with ``status`` leaves, for a fault injected
        there (it stands for such a failure): NIXL_ERR_BACKEND is the backends' refusal
        (:meth:`refused`); registerMem returns no other failure once a backend took the list
        up (NIXL_ERR_NOT_FOUND: no backend for the memory type), so any other leaves all as
        it was [verified: nixlAgent::registerMem]."""
        if status != S.NIXL_ERR_BACKEND or not isinstance(descs, nixlRegDList):
            return
        if self._mem_backends(descs.getType(), handles):
            self.refused(descs.getType())

    def invalidated(self, ranges: Sequence[Range]) -> bool:
        """Whether a VRAM range is reached only through descriptors whose device memory was
        released since they were registered (the MR UCX made through nvidia-peermem was
        invalidated, docs/gpu-rdma.md §7) [UNC]."""
        gpu = self.fake.gpu
        if gpu is None:
            return False
        regs = self.regs.get(int(nixl_mem_t.VRAM_SEG), [])
        for addr, length, dev in ranges:
            over = [r[:3] for r in regs if r[2] == dev and r[0] <= addr
                    and addr + length <= r[0] + r[1]]
            if over and all(self.backing.get(r) != gpu.backing(r[0], r[1]) for r in over):
                return True
        return False

    def _vram_refused(self, ranges: Sequence[Range]) -> str | None:
        if self.fake.profile.vram == "host-ucx" or self.fake.gpu is None:
            return ("VRAM memory is detected as host by UCX. UCX is likely not configured "
                    "with CUDA/ROCm support. VRAM registration cannot proceed.")
        for addr, length, _dev in ranges:
            rng = device_range(self.fake.gpu.driver, addr)
            if rng is None or addr + max(length, 1) > rng.end:
                return (f"VRAM range [{addr:#x}, {addr + length:#x}) is not in one device "
                        "allocation (ucp_mem_map fails) [UNC]")
        return None

    def deregisterMem(self, descs: Any, handles: Sequence[int] = ()) -> S:
        if not isinstance(descs, nixlRegDList):
            raise incompatible("deregisterMem", "(self: nixl._bindings.nixlAgent, descs: "
                               "nixl._bindings.nixlRegDList, backends: ...)")
        mem = int(descs.getType())
        if len(set(descs.ranges)) < descs.descCount():
            raise NixlCrash("deregisterMem with one descriptor twice in the list: the real "
                            "agent dies (SIGSEGV) whatever is registered (docs/nixl.md §3.2)")
        if mem not in self.regs:        # no section: no backend holds this memory type
            raise_status(S.NIXL_ERR_NOT_FOUND, f"deregisterMem: no available backends for "
                         f"mem type '{nixl_mem_t(mem).name}'")
        held = self.regs[mem]
        # a descriptor matches on (addr, len, devID), metaInfo ignored; one that matches
        # nothing fails the call and none of the list is deregistered [OBS-local]
        left = list(held)
        for addr, length, dev in descs.ranges:
            hit = next((i for i, r in enumerate(left) if r[:3] == (addr, length, dev)), None)
            if hit is None:
                raise_status(S.NIXL_ERR_NOT_FOUND, "deregisterMem: deregistration failed on "
                             "at least one backend with status NIXL_ERR_NOT_FOUND")
            else:
                del left[hit]
        # a section its deregistration empties is erased [verified: remDescList]
        if left:
            self.regs[mem] = left
        else:
            del self.regs[mem]
        return S.NIXL_SUCCESS

    @property
    def broken_md(self) -> bool:
        """An empty section: the metadata holds it and no peer can load it (NOT_FOUND)."""
        return any(not rs for rs in self.regs.values())

    def ranges(self, mem: int) -> list[Range]:
        return [(a, n, d) for a, n, d, _ in self.regs.get(int(mem), [])]

    # -- metadata -------------------------------------------------------------------------------
    def getLocalMD(self) -> bytes:
        body = {"name": self.name, "broken": self.broken_md,
                "regs": {str(m): self.ranges(m) for m in self.regs}}
        return MD_TAG + self.name.encode() + b"|kvreg|" + json.dumps(body).encode()

    def loadRemoteMD(self, metadata: Any) -> bytes:
        data = bytes(metadata)
        body: dict[str, Any] | None = None
        if data.startswith(MD_TAG) and b"|kvreg|" in data:
            try:
                body = json.loads(data.split(b"|kvreg|", 1)[1])
            except ValueError:
                body = None
        if not isinstance(body, dict):
            raise_status(S.NIXL_ERR_MISMATCH, "loadRemoteMD: failed to deserialize remote "
                         "metadata")
        assert body is not None
        name = str(body["name"])
        if name == self.name:
            raise_status(S.NIXL_ERR_INVALID_PARAM, "loadRemoteMD: remote agent name same as "
                         "local agent, no need to load metadata")
        if name in self.unloadable:
            raise_status(S.NIXL_ERR_INVALID_PARAM, "loadRemoteMD: error loading connection "
                         "info for backend 'UCX' with status NIXL_ERR_INVALID_PARAM")
        if body.get("broken"):
            self.unloadable.add(name)
            if self.remotes.pop(name, None) is not None:
                self._epochs[name] = self._epochs.get(name, 0) + 1
            raise_status(S.NIXL_ERR_NOT_FOUND, f"loadRemoteMD: error loading remote metadata "
                         f"for agent '{name}' with status NIXL_ERR_NOT_FOUND")
        regs: dict[int, list[Range]] = {int(m): [(int(r[0]), int(r[1]), int(r[2])) for r in rs]
                                        for m, rs in body["regs"].items()}
        epoch = self._epochs.setdefault(name, 0)
        # loading the same agent again adds what it registers now to the view and drops
        # nothing: a region it deregistered stays in the view until remove_remote_agent;
        # handles made before stay valid (a post after a reload is DONE) [OBS-local]
        old = self.remotes.get(name)
        if old is not None:
            for mem, rs in old.regs.items():
                merged = list(rs)
                merged += [r for r in regs.get(mem, []) if r not in rs]
                regs[mem] = merged
        self.remotes[name] = Remote(name, regs, epoch)
        return name.encode()

    def invalidateRemoteMD(self, name: str) -> S:
        # an unknown name is no error [OBS-local]
        if self.remotes.pop(name, None) is not None:
            self._epochs[name] = self._epochs.get(name, 0) + 1
        return S.NIXL_SUCCESS

    def checkRemoteMD(self, name: str, descs: Any) -> S:
        remote = self.remotes.get(name)
        if remote is None:
            return S.NIXL_ERR_NOT_FOUND
        mem = int(descs.getType())
        if populate(remote.regs.get(mem, []), descs.ranges):
            return S.NIXL_SUCCESS
        return S.NIXL_ERR_NOT_FOUND

    def _side(self, agent: str, mem: int) -> tuple[list[Range], int | None] | None:
        """The registrations a side's descriptors must lie in, and the remote's epoch."""
        if agent in (NIXL_INIT_AGENT, self.name):
            return self.ranges(mem), None
        remote = self.remotes.get(agent)
        if remote is None:
            return None
        return remote.regs.get(mem, []), remote.epoch

    def _stale(self, agent: str, epoch: int | None) -> bool:
        if epoch is None:
            return False
        remote = self.remotes.get(agent)
        return remote is None or remote.epoch != epoch

    # -- preparation ----------------------------------------------------------------------------
    def prepXferDlist(self, agent: str, descs: Any, handles: Sequence[int] = ()) -> int:
        if not isinstance(descs, nixlXferDList):
            raise incompatible("prepXferDlist", "(self: nixl._bindings.nixlAgent, "
                               "agent_name: str, descs: nixl._bindings.nixlXferDList, "
                               "backends: ...) -> int")
        mem = descs.getType()
        side = self._side(agent, mem)
        if side is None:
            raise_status(S.NIXL_ERR_NOT_FOUND, f"prepXferDlist: metadata for remote agent "
                         f"'{agent}' not found")
        assert side is not None
        regs, epoch = side
        if not self._mem_backends(mem, handles) or not populate(regs, descs.ranges):
            raise_status(S.NIXL_ERR_NOT_FOUND, "prepXferDlist: failed to prepare the "
                         "descriptors for any of the specified or potential backends for "
                         f"agent '{agent}'")
        handle = _handles()
        self.prepped[handle] = Prepped(agent, mem, descs.ranges, epoch)
        return handle

    def releasedDlistH(self, handle: int) -> S:
        self.prepped.pop(int(handle), None)
        return S.NIXL_SUCCESS

    # -- transfer requests ----------------------------------------------------------------------
    def makeXferReq(self, op: str, local_h: int, local_idx: Any, remote_h: int,
                    remote_idx: Any, notif: bytes = b"", handles: Sequence[int] = (),
                    skip_desc_merge: bool = False) -> int:
        local, remote = self.prepped.get(int(local_h)), self.prepped.get(int(remote_h))
        # a released handle reads as neither side [OBS-local: after release_dlist_handle]
        if local is None or remote is None or local.agent != NIXL_INIT_AGENT or \
                remote.agent == NIXL_INIT_AGENT:
            raise_status(S.NIXL_ERR_INVALID_PARAM, "makeXferReq: invalid sides (local must "
                         "be local, remote must be remote)")
        assert local is not None and remote is not None
        li, ri = [int(i) for i in local_idx], [int(i) for i in remote_idx]
        if len(li) != len(ri) or not li:
            raise_status(S.NIXL_ERR_INVALID_PARAM, f"makeXferReq: different number of "
                         f"indices for local ({len(li)}), remote ({len(ri)})")
        if self._stale(remote.agent, remote.epoch):
            raise_status(S.NIXL_ERR_NOT_FOUND, f"makeXferReq: remote agent '{remote.agent}' "
                         "was invalidated or re-registered after prepped xfer request "
                         "creation; prepped descriptor lists must be re-created")
        for i, (a, b) in enumerate(zip(li, ri, strict=True)):
            for side, idx, n in (("local", a, len(local.descs)), ("remote", b,
                                                                   len(remote.descs))):
                if not 0 <= idx < n:
                    raise_status(S.NIXL_ERR_INVALID_PARAM, f"makeXferReq: {side} index out "
                                 f"of range at index {i} with value {idx}")
            if local.descs[a][1] != remote.descs[b][1]:
                raise_status(S.NIXL_ERR_INVALID_PARAM, f"makeXferReq: length mismatch at "
                             f"index {i} with local index {a} and remote index {b}")
        return self._request(op, [local.descs[a] for a in li], [remote.descs[b] for b in ri],
                             (local.mem, remote.mem), remote.agent, remote.epoch, notif)

    def createXferReq(self, op: str, local: Any, remote: Any, agent: str,
                      notif: bytes = b"", handles: Sequence[int] = ()) -> int:
        if not isinstance(local, nixlXferDList) or not isinstance(remote, nixlXferDList):
            raise incompatible("createXferReq", "(self: nixl._bindings.nixlAgent, operation: "
                               "nixl._bindings.nixl_xfer_op_t, local_descs: nixl._bindings."
                               "nixlXferDList, remote_descs: nixl._bindings.nixlXferDList, "
                               "remote_agent: str, ...) -> int")
        if local.descCount() != remote.descCount():
            raise_status(S.NIXL_ERR_INVALID_PARAM, f"createXferReq: different descriptor "
                         f"list sizes (local={local.descCount()}, remote="
                         f"{remote.descCount()})")
        for i, (a, b) in enumerate(zip(local.ranges, remote.ranges, strict=True)):
            if a[1] != b[1]:
                raise_status(S.NIXL_ERR_INVALID_PARAM, f"createXferReq: length mismatch at "
                             f"index {i}")
        lmem, rmem = local.getType(), remote.getType()
        theirs = self._side(agent, rmem)
        if theirs is None:
            raise_status(S.NIXL_ERR_NOT_FOUND, f"createXferReq: metadata for remote agent "
                         f"'{agent}' not found")
        assert theirs is not None
        if not self._mem_backends(lmem, handles) or (
                agent != self.name and rmem not in _REMOTE_MEMS(self, agent)):
            raise_status(S.NIXL_ERR_NOT_FOUND, "createXferReq: no potential backend found to "
                         "be able to do the transfer")
        if not populate(self.ranges(lmem), local.ranges) or \
                not populate(theirs[0], remote.ranges):
            raise_status(S.NIXL_ERR_NOT_FOUND, "createXferReq: no specified or potential "
                         "backend had the required registrations to be able to do the "
                         "transfer")
        return self._request(op, local.ranges, remote.ranges, (lmem, rmem), agent, theirs[1],
                             notif)

    def _request(self, op: str, local: list[Range], remote: list[Range],
                 mems: tuple[nixl_mem_t, nixl_mem_t], agent: str, epoch: int | None,
                 notif: bytes) -> int:
        handle = _handles()
        self.xfers[handle] = Xfer(op, local, remote, mems, agent, epoch, bytes(notif or b""))
        return handle

    def _xfer(self, handle: int, api: str) -> Xfer:
        xfer = self.xfers.get(int(handle))
        if xfer is None:
            raise NixlCrash(f"{api}({int(handle):#x}): not a live transfer request; the real "
                            "agent dereferences the released handle and the process dies "
                            "(SIGSEGV, docs/nixl.md §5)")
        return xfer

    def postXferReq(self, handle: int, notif: bytes = b"") -> S:
        xfer = self._xfer(handle, "postXferReq")
        if self._stale(xfer.agent, xfer.epoch):
            raise_status(S.NIXL_ERR_NOT_FOUND, f"postXferReq: remote agent '{xfer.agent}' "
                         "was invalidated or re-registered after transfer request creation; "
                         "not posting stale handle")
        xfer.state = self.fake.run_transfer(self, xfer)
        if xfer.state == "ERR":
            return S.NIXL_ERR_BACKEND
        if self.fake.profile.post_status == "PROC":
            xfer.state = "PROC"
            return S.NIXL_IN_PROG
        return S.NIXL_SUCCESS

    def getXferStatus(self, handle: int) -> S:
        xfer = self._xfer(handle, "getXferStatus")
        if xfer.state == "NEW":
            raise_status(S.NIXL_ERR_NOT_POSTED, "getXferStatus: the request was never posted")
        if xfer.state == "PROC":
            xfer.state = "DONE"
        return S.NIXL_SUCCESS if xfer.state == "DONE" else S.NIXL_ERR_BACKEND

    def releaseXferReq(self, handle: int) -> S:
        self._xfer(handle, "releaseXferReq")
        del self.xfers[int(handle)]
        return S.NIXL_SUCCESS

    # -- notifications (kept, not modelled beyond delivery) --------------------------------------
    def getNotifs(self, notifs: dict[str, list[bytes]],
                  handles: Sequence[int] = ()) -> dict[str, list[bytes]]:
        out = {k: list(v) for k, v in notifs.items()}
        for k, v in self.notifs.items():
            out.setdefault(k, []).extend(v)
        self.notifs.clear()
        return out

    def genNotif(self, remote: str, msg: bytes, handle: int | None = None) -> S:
        if remote not in self.remotes:
            raise_status(S.NIXL_ERR_NOT_FOUND, f"genNotif: metadata for remote agent "
                         f"'{remote}' not found")
        peer = self.fake.agents.get(remote)
        if peer is not None:
            peer.notifs.setdefault(self.name, []).append(bytes(msg))
        return S.NIXL_SUCCESS


def _null_refused(ranges: Sequence[Range]) -> str | None:
    """UCX maps no DRAM range at address 0 of a nonzero length (ucp_mem_map: "undefined
    address with nonzero length requires UCP_MEM_MAP_ALLOCATE flag"); a zero-length one is
    taken [OBS-local, docs/nixl.md §3]."""
    if any(addr == 0 and length for addr, length, _dev in ranges):
        return "failed to ucp_mem_map: Invalid parameter"
    return None


def _REMOTE_MEMS(agent: nixlAgent, name: str) -> set[int]:
    """The memory types a loaded remote registered (its backends' view of them)."""
    remote = agent.remotes.get(name)
    return {m for m, rs in remote.regs.items() if rs} if remote else set()

