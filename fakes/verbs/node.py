"""Nodes (simulated processes) and their NICs: MR tables, memlock accounting, ports.

A :class:`Node` has its own address space, ``RLIMIT_MEMLOCK`` and NICs; a :class:`Nic`
holds the MR table whose rules are ``ibv_reg_mr``'s (docs/mooncake-verbs.md §5.2, in
:meth:`Nic.reg_mr`). Both reach the fabric they belong to only through the small
:class:`FabricLike` protocol (trace, fault plan, pyverbs module tree), so this module
imports nothing of the pyverbs face and the fabric imports it, never the reverse.
"""

from __future__ import annotations

import errno
import itertools
import types
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import procmaps
from ..address_space import AddressSpace
from ..recorder import Trace
from . import enums as V
from . import memory
from .errors import PyverbsRDMAError
from .profiles import NicProfile

if TYPE_CHECKING:
    import torch

    from ..dmabuf import DmaBufExport

__all__ = ["PAGE_SIZE", "REAL_ALLOC_LIMIT", "FabricLike", "GpuLike", "LiveMR", "MrRecord", "Nic",
           "Node", "Port"]

PAGE_SIZE = 4096
U64 = 1 << 64
# pyverbs-allocated MR buffers up to this size are real memory; bigger ones are virtual
REAL_ALLOC_LIMIT = 256 << 20


class GpuLike(Protocol):
    """A node's GPUs as its NICs see them (kvreg.fakes.cuda.device_memory.GpuMemory):
    whether an address is device memory, what nvidia-peermem does pinning it, what mapping
    a dma-buf of it does, and the BAR1 account both charge."""

    @property
    def peermem(self) -> bool: ...

    def owns(self, ptr: int) -> bool: ...

    def peer_check(self, ptr: int, length: int) -> tuple[int, int, int]: ...

    def dmabuf_check(self, export: DmaBufExport) -> tuple[int, int, int]: ...

    def bar1_charge(self, device: int, nbytes: int) -> None: ...

    def backing(self, ptr: int, length: int) -> tuple[int, ...]: ...


class FabricLike(Protocol):
    """What a node needs from its fabric: the shared trace and fault plan, and the
    pyverbs module tree built for a node."""

    @property
    def trace(self) -> Trace: ...

    def check_fault(self, point: str, face: str, api: str, args: tuple[Any, ...],
                    node: Node) -> int | None: ...

    def find_port(self, *, lid: int = 0, gid: str | None = None) -> tuple[Nic, Port] | None: ...

    def new_qpn(self) -> int: ...

    def build_modules(self, node: Node) -> dict[str, types.ModuleType]: ...


@dataclass(frozen=True)
class Port:
    """One physical port: its LID (InfiniBand) and GID (RoCE) identify it on the fabric."""

    num: int
    lid: int
    gid: str
    link_layer: int
    state: int = int(V.ibv_port_state.IBV_PORT_ACTIVE)
    max_mtu: int = int(V.ibv_mtu.IBV_MTU_4096)
    active_mtu: int = int(V.ibv_mtu.IBV_MTU_4096)


@dataclass(eq=False)
class MrRecord:
    """One memory region as the NIC sees it (what ``ibv_reg_mr`` created)."""

    nic: Nic
    pd_id: int
    addr: int
    length: int
    access: int
    lkey: int
    rkey: int
    npages: int        # pages charged to RLIMIT_MEMLOCK (0 for on-demand paging)
    owner: str         # "pyverbs" or "mooncake"
    live: bool = True
    # device memory mapped through BAR1 (nvidia-peermem, or a dma-buf of the node's GPU):
    # the GPU and the BAR1 bytes it holds until the MR is released
    gpu_device: int = -1
    gpu_bytes: int = 0
    dmabuf_fd: int = -1   # ibv_reg_dmabuf_mr: the dma-buf it imported
    # where the process sees the byte at iova X: X + host_delta (a DRM dma-buf's mapping)
    host_delta: int = 0
    # the physical device memory nvidia-peermem pinned (GpuMemory.backing at registration)
    gpu_backing: tuple[int, ...] = ()

    @property
    def end(self) -> int:
        return self.addr + self.length

    def contains(self, addr: int, nbytes: int) -> bool:
        """§5.3: a range is usable only if it lies wholly inside this one MR."""
        return self.addr <= addr and addr + nbytes <= self.end

    def invalidated(self) -> bool:
        """Whether the device memory this MR pinned through nvidia-peermem was freed under
        it (``cuMemUnmap`` + ``cuMemRelease``, ``cudaFree``): the driver's free callback made
        the peer client invalidate the MR, so the HCA refuses its keys though the MR is
        still registered (docs/gpu-rdma.md §7) [INF]. Memory mapped again at the same
        address is other memory: the MR stays dead."""
        gpu = self.nic.node.gpu
        if self.gpu_device < 0 or not self.gpu_backing or gpu is None:
            return False
        return gpu.backing(self.addr, self.length) != self.gpu_backing


@dataclass(frozen=True)
class LiveMR:
    """A registered MR for leak reports, with the buffer its address falls in."""

    node: str
    device: str
    addr: int
    length: int
    access: int
    lkey: int
    owner: str
    buffer: str | None
    offset: int | None

    def describe(self) -> str:
        where = f" ({self.buffer} + {self.offset:#x})" if self.buffer is not None else ""
        return (f"{self.node}/{self.device} [{self.addr:#x}, {self.addr + self.length:#x}) "
                f"{self.length} bytes{where} lkey={self.lkey:#x} via {self.owner}")


class Nic:
    """One RDMA device: its DeviceAttr, ports, MR table and QPs."""

    def __init__(self, node: Node, name: str, profile: NicProfile, index: int, guid: int,
                 ports: Sequence[Port], attrs: Mapping[str, Any]) -> None:
        self.node = node
        self.name = name
        self.profile = profile
        self.index = index
        self.guid = guid
        self.ports = list(ports)
        self.attr: dict[str, Any] = profile.device_attrs(**attrs)
        self.attr["node_guid"] = self.attr["node_guid"] or guid
        self.attr["sys_image_guid"] = self.attr["sys_image_guid"] or guid
        self._mrs: dict[int, MrRecord] = {}
        self._keys = itertools.count(0x100)
        self._pd_ids = itertools.count(1)
        self.qps: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()

    def __repr__(self) -> str:
        return f"Nic({self.node.name}/{self.name}, profile={self.profile.name})"

    @property
    def face(self) -> str:
        return f"verbs:{self.node.name}/{self.name}"

    def set_attr(self, **attrs: Any) -> None:
        """Override DeviceAttr fields (e.g. ``max_mr_size``, ``max_mr``) of this device."""
        self.attr.update({k: v for k, v in self.profile.device_attrs(**attrs).items()
                          if k in attrs})

    def new_pd_id(self) -> int:
        return next(self._pd_ids)

    # -- MR table -------------------------------------------------------------------------
    def live_mrs(self) -> list[MrRecord]:
        return sorted(self._mrs.values(), key=lambda r: (r.addr, r.lkey))

    def mr_by_key(self, key: int) -> MrRecord | None:
        """The live MR whose lkey/rkey is ``key`` (the fake uses one key for both)."""
        return self._mrs.get(key)

    @property
    def pinned_bytes(self) -> int:
        """Memlock charged by this device's MRs (each MR counts, §5.2)."""
        return sum(r.npages for r in self._mrs.values()) * PAGE_SIZE

    def reg_mr(self, addr: int, length: int, access: int, *, pd_id: int,
               owner: str = "pyverbs") -> MrRecord:
        """``ibv_reg_mr``: an MR, or PyverbsRDMAError with the errno of §5.2."""
        args = (addr, length, access)
        injected = self.node.fabric.check_fault("verbs.reg_mr", self.face, "reg_mr", args,
                                                self.node)
        code = injected if injected is not None else self._reg_errno(addr, length, access)
        if code:
            self.node.fabric.trace.append(self.face, "reg_mr", args, code, None,
                                          injected is not None)
            raise PyverbsRDMAError(
                f"Failed to register a MR. length: {length}, access flags: {access}", code)
        key = next(self._keys)
        odp = bool(access & V.ibv_access_flags.IBV_ACCESS_ON_DEMAND)
        gpu_device, gpu_bytes = self._gpu_pin(addr, length)
        rec = MrRecord(self, pd_id, addr, length, self._effective_access(access), key, key,
                       0 if odp or gpu_device >= 0 else _npages(addr, length), owner,
                       gpu_device=gpu_device, gpu_bytes=gpu_bytes,
                       gpu_backing=self.node.gpu.backing(addr, length)
                       if gpu_device >= 0 and self.node.gpu is not None else ())
        self._mrs[key] = rec
        self.node.pinned_pages += rec.npages
        self.node.fabric.trace.append(self.face, "reg_mr", args, 0, key, False)
        return rec

    def _gpu_pin(self, addr: int, length: int) -> tuple[int, int]:
        """(device, BAR1 bytes) nvidia-peermem pinned for a new MR; (-1, 0) for host memory."""
        gpu = self.node.gpu
        if gpu is None or not gpu.owns(addr):
            return -1, 0
        _, device, nbytes = gpu.peer_check(addr, length)
        gpu.bar1_charge(device, nbytes)
        return device, nbytes

    def adopt(self, rec: MrRecord) -> MrRecord:
        """Enter an MR another registration path built (ibv_reg_dmabuf_mr) in the table."""
        self._mrs[rec.lkey] = rec
        return rec

    def new_key(self) -> int:
        return next(self._keys)

    def rereg_mr(self, rec: MrRecord, addr: int, length: int, access: int,
                 pd_id: int) -> int:
        """``ibv_rereg_mr`` in the kernel: new translation/access/PD; an errno, 0 if done.

        The checks are ``ibv_reg_mr``'s (§5.2) on the new values; on failure the MR keeps
        its old values (mlx5/rxe rereg either applies all or nothing).
        """
        args = (addr, length, access)
        pinned = rec.npages
        self.node.pinned_pages -= pinned        # the old pages are released first
        code = self._reg_errno(addr, length, access, replacing=1)
        if code:
            self.node.pinned_pages += pinned
            self.node.fabric.trace.append(self.face, "rereg_mr", args, code, None, False)
            return code
        odp = bool(access & V.ibv_access_flags.IBV_ACCESS_ON_DEMAND)
        rec.addr, rec.length, rec.pd_id = addr, length, pd_id
        rec.access = self._effective_access(access)
        rec.npages = 0 if odp else _npages(addr, length)
        self.node.pinned_pages += rec.npages
        self.node.fabric.trace.append(self.face, "rereg_mr", args, 0, rec.lkey, False)
        return 0

    def dereg_mr(self, rec: MrRecord) -> None:
        """``ibv_dereg_mr``; an injected failure leaves the MR registered."""
        args = (rec.addr, rec.length, rec.lkey)
        injected = self.node.fabric.check_fault("verbs.dereg_mr", self.face, "dereg_mr", args,
                                                self.node)
        if injected is not None:
            self.node.fabric.trace.append(self.face, "dereg_mr", args, injected, None, True)
            raise PyverbsRDMAError("Failed to dereg MR", injected)
        self.release(rec)
        self.node.fabric.trace.append(self.face, "dereg_mr", args, 0, None, False)

    def release(self, rec: MrRecord) -> None:
        """Drop an MR without a fault check (finalizers, closing a PD or Context)."""
        if rec.live and self._mrs.pop(rec.lkey, None) is rec:
            rec.live = False
            self.node.pinned_pages -= rec.npages
            if rec.gpu_bytes and self.node.gpu is not None:
                self.node.gpu.bar1_charge(rec.gpu_device, -rec.gpu_bytes)

    def _effective_access(self, access: int) -> int:
        # §4.6: optional-range bits are silently masked when the device lacks them
        if not self.profile.relaxed_ordering_supported:
            access &= ~int(V.ibv_access_flags.IBV_ACCESS_RELAXED_ORDERING)
        return access

    def _reg_errno(self, addr: int, length: int, access: int, replacing: int = 0) -> int:
        """The errno ``ibv_reg_mr`` fails with, in the kernel's order of checks; 0 if none.

        ``replacing``: MRs this call replaces (a rereg does not count against ``max_mr``).
        """
        F = V.ibv_access_flags
        p = self.profile
        access = self._effective_access(access)
        # §5.2: REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (ib_check_mr_access)
        if access & (F.IBV_ACCESS_REMOTE_WRITE | F.IBV_ACCESS_REMOTE_ATOMIC) and \
                not access & F.IBV_ACCESS_LOCAL_WRITE:
            return errno.EINVAL
        odp = bool(access & F.IBV_ACCESS_ON_DEMAND)
        # §5.2: ON_DEMAND unsupported
        if odp and not p.odp_supported:
            return p.odp_unsupported_errno
        # implicit ODP (NULL, SIZE_MAX) needs IBV_ODP_SUPPORT_IMPLICIT (mlx5 mr.c
        # create_user_odp_mr: EINVAL without it)
        if odp and addr == 0 and length == U64 - 1 and not p.odp_general_caps & 0b10:
            return errno.EINVAL
        # §5.2: length 0 (npages == 0; erdma/efa check it explicitly)
        if length == 0:
            return errno.EINVAL
        # §5.2: len > max_mr_size, only where the driver checks (erdma, efa, ionic option)
        if p.enforce_max_mr_size and length > int(self.attr["max_mr_size"]):
            return p.oversize_errno
        # §5.2: addr+len or its page-aligned end overflows
        if addr + length > U64 or _page_up(addr + length) > U64:
            return p.overflow_errno
        gpu = self.node.gpu
        if gpu is not None and gpu.owns(addr):
            # §5.5: device memory is pinned by nvidia-peermem, or not at all (EFAULT)
            err = gpu.peer_check(addr, length)[0]
            if err:
                return err
        elif not odp:
            err = self.node.memlock_errno(_npages(addr, length))
            if err:
                return err
            # §5.2: pinning (umem.c ib_umem_get -> pin_user_pages) fails with EFAULT on an
            # unmapped page, or on a read-only one when the MR is writable (FOLL_WRITE)
            if not self.node.pinnable(addr, length, write=bool(access & WRITABLE_ACCESS)):
                return errno.EFAULT
        # §5.2: device out of MR resources (max_mr): ENOMEM (erdma) / EAGAIN (mlx5)
        if len(self._mrs) - replacing >= int(self.attr["max_mr"]):
            return p.mr_exhausted_errno
        return 0


# umem.c/ib_verbs.h ib_access_writable: these bits make the kernel pin with FOLL_WRITE
WRITABLE_ACCESS = int(V.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE |
                      V.ibv_access_flags.IBV_ACCESS_REMOTE_WRITE |
                      V.ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC |
                      V.ibv_access_flags.IBV_ACCESS_MW_BIND)


def _page_up(x: int) -> int:
    return (x + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE


def _npages(addr: int, length: int) -> int:
    """Pages pinned for ``[addr, addr+len)``: whole pages covering it (§5.2, alignment row)."""
    return (_page_up(addr + length) - addr // PAGE_SIZE * PAGE_SIZE) // PAGE_SIZE


class Node:
    """One simulated process on the fabric: address space, memlock limit, NICs."""

    def __init__(self, fabric: FabricLike, name: str, space: AddressSpace | None,
                 memlock_limit: int | None) -> None:
        self.fabric = fabric
        self.name = name
        self.space = space if space is not None else AddressSpace()
        # RLIMIT_MEMLOCK in bytes; None = unlimited or CAP_IPC_LOCK (§5.2)
        self.memlock_limit = memlock_limit
        # False: a machine without the kernel RDMA stack, where ibv_get_device_list returns
        # NULL and pyverbs raises (§4.3)
        self.rdma_stack = True
        # the process's GPUs (Node.attach_gpu; docs/mooncake-verbs.md §5.5): None, no GPU
        self.gpu: GpuLike | None = None
        # DRM render nodes /dev/dri/renderD128... pyverbs' DmaBuf allocates from (§5.6)
        self.drm_render_nodes = 0
        self.pinned_pages = 0
        self.nics: dict[str, Nic] = {}
        self._allocs: dict[int, np.ndarray] = {}
        self._modules: dict[str, types.ModuleType] | None = None

    def __repr__(self) -> str:
        return f"Node({self.name!r}, nics={list(self.nics)})"

    # -- memory -----------------------------------------------------------------------
    def attach_gpu(self, gpu: GpuLike | None) -> None:
        """Let this node's NICs see a fake CUDA driver's device memory (``FakeCuda``'s
        ``gpu_memory()``): MRs over it follow nvidia-peermem's rules (§5.5)."""
        self.gpu = gpu

    def track(self, obj: Any, *, name: str = "") -> Any:
        """Name a real buffer in traces and leak reports (optional: registered process
        memory is read and written in place whether tracked or not)."""
        self.space.track(obj, name=name)
        return obj

    def virtual(self, shape: Sequence[int] | int, dtype: Any = "uint8", *,
                name: str = "") -> torch.Tensor:
        """A CPU ``torch.Tensor`` of any size over reserved memory (no RAM until touched); the
        fake never moves its bytes: registration-only use."""
        return self.space.virtual(shape, dtype, name=name)

    def alloc(self, length: int) -> int:
        """A zeroed, page-aligned buffer as pyverbs' MR allocates it (§4.4)."""
        if length > REAL_ALLOC_LIMIT:
            return self.space.reserve(length, name=f"pyverbs-buf-{length}", align=PAGE_SIZE)
        raw = np.zeros(length + PAGE_SIZE, dtype=np.uint8)
        start = (-raw.ctypes.data) % PAGE_SIZE
        view = raw[start:start + length]
        addr = int(view.ctypes.data)
        self._allocs[addr] = raw
        self.space.track(view, name=f"pyverbs-buf@{addr:#x}")
        return addr

    def pinnable(self, addr: int, length: int, *, write: bool) -> bool:
        """Whether the kernel could pin ``[addr, addr+length)``: a reserved virtual range,
        a tracked buffer, or process memory mapped (writable when ``write``)."""
        kind = memory.classify(self.space, addr, length, write=write, fresh=True)
        if kind == "virtual":
            hit = self.space.owner(addr)
            return hit is not None and addr + length <= hit[0].end
        if kind == "untracked" and not procmaps.available():
            return True      # no /proc: nothing to check against (the old behaviour)
        return kind != "untracked"

    def free(self, addr: int) -> None:
        self._allocs.pop(addr, None)
        self.space.forget(addr)

    @property
    def pinned_bytes(self) -> int:
        """``mm->pinned_vm`` in bytes: every MR on every device counts (§5.2, §1.9)."""
        return self.pinned_pages * PAGE_SIZE

    def memlock_errno(self, npages: int) -> int:
        """§5.2: EPERM if the process may not lock at all, ENOMEM past RLIMIT_MEMLOCK."""
        if self.memlock_limit is None:
            return 0
        if self.memlock_limit == 0:
            return errno.EPERM
        if self.pinned_pages + npages > self.memlock_limit // PAGE_SIZE:
            return errno.ENOMEM
        return 0

    # -- pyverbs ------------------------------------------------------------------------
    @property
    def modules(self) -> dict[str, types.ModuleType]:
        """The fake ``pyverbs`` module tree as this node sees it."""
        if self._modules is None:
            self._modules = self.fabric.build_modules(self)
        return self._modules

    @property
    def pyverbs(self) -> types.ModuleType:
        return self.modules["pyverbs"]

    def resolve(self, ptr: int) -> tuple[str, int] | None:
        hit = self.space.owner(ptr)
        return None if hit is None else (hit[0].name, hit[1])
