"""``nixl._api``: ``nixl_agent`` and ``nixl_agent_config`` over the fake binding.

The Python layer of nixl-cu12 1.5.1 as KV connectors call it (vLLM's NixlConnector: ``from
nixl._api import nixl_agent, nixl_agent_config``): the same conversions of descriptor input
(lists of tuples, Nx3 numpy arrays, torch tensors; a shape it refuses is logged and becomes
``None``, which the binding then refuses with pybind11's TypeError), the same return values
(``add_remote_agent`` returns the name as bytes; ``transfer``/``check_xfer_state`` return
"DONE", "PROC" or "ERR") and the same Python-level errors (``KeyError`` for an unknown
memory type, operation or backend name; ``IndexError`` for an empty list) [OBS-local,
docs/nixl.md §3]. Every call is in the fake's trace (face ``nixl:<agent>``) and goes through
its fault plan (points ``nixl.<method>``).
"""

from __future__ import annotations

import enum
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from .agent import nixlAgent, nixlAgentConfig
from .bindings import (
    DEFAULT_COMM_PORT,
    NIXL_INIT_AGENT,
    NixlError,
    NotModelledError,
    nixl_mem_t,
    nixlRegDList,
    nixlXferDList,
    raise_status,
)

if TYPE_CHECKING:
    from .fake import FakeNixl

__all__ = ["DEFAULT_COMM_PORT", "nixl_agent", "nixl_agent_config", "nixl_prepped_dlist_handle",
           "nixl_thread_sync_t", "nixl_xfer_handle"]

logger = logging.getLogger("nixl")
_MEMS = {"DRAM": nixl_mem_t.DRAM_SEG, "VRAM": nixl_mem_t.VRAM_SEG,
         "FILE": nixl_mem_t.FILE_SEG, "BLOCK": nixl_mem_t.BLK_SEG, "OBJ": nixl_mem_t.OBJ_SEG,
         "cpu": nixl_mem_t.DRAM_SEG, "cuda": nixl_mem_t.VRAM_SEG}
_OPS = {"WRITE": "WRITE", "READ": "READ"}


class nixl_thread_sync_t(enum.Enum):
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 0


class nixl_agent_config:
    """The agent's configuration (the real class's arguments and attributes)."""

    def __init__(self, enable_prog_thread: bool = True, enable_listen_thread: bool = False,
                 listen_port: int = DEFAULT_COMM_PORT, capture_telemetry: bool = False,
                 num_threads: int = 0, backends: list[str] | None = None,
                 sync_mode: nixl_thread_sync_t | None = None) -> None:
        self.backends = list(backends) if backends is not None else ["UCX"]
        self.enable_pthread = enable_prog_thread
        self.enable_listen = enable_listen_thread
        self.port = listen_port
        self.capture_telemetry = capture_telemetry
        self.num_threads = num_threads
        if sync_mode is not None and not isinstance(sync_mode, nixl_thread_sync_t):
            raise TypeError(f"sync_mode must be a nixl_thread_sync_t (got "
                            f"{type(sync_mode).__name__!r})")
        self.sync_mode = sync_mode


class _handle:
    """A handle of the agent that ``release()`` gives back once, through the agent method
    named by ``_RELEASE``; ``release()`` twice is a no-op, as on the real classes."""

    __slots__ = ("_agent", "_handle", "_released")
    _RELEASE: ClassVar[str]

    def __init__(self, agent: nixlAgent, value: int) -> None:
        self._handle = int(value)
        self._agent = agent
        self._released = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(0x{self._handle:x}, released={self._released})"

    def release(self) -> None:
        if not self._released:
            getattr(self._agent, self._RELEASE)(self._handle)
            self._released = True


class nixl_prepped_dlist_handle(_handle):
    """A prepared descriptor list."""

    __slots__ = ()
    _RELEASE = "releasedDlistH"


class nixl_xfer_handle(_handle):
    """A transfer request."""

    __slots__ = ()
    _RELEASE = "releaseXferReq"


def _is_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _tensor_row(t: Any) -> tuple[int, int, int]:
    dev = t.get_device()
    return int(t.data_ptr()), int(t.numel() * t.element_size()), 0 if dev == -1 else int(dev)


class nixl_agent:
    """The fake agent; build it through ``FakeNixl`` (``fake.agent(name)`` or the patch)."""

    _fake: ClassVar[FakeNixl | None] = None

    def __init__(self, agent_name: str, nixl_conf: nixl_agent_config | None = None,
                 instantiate_all: bool = False) -> None:
        fake = type(self)._fake
        if fake is None:
            raise RuntimeError("this nixl_agent class belongs to no FakeNixl; use "
                               "fake.agent() or fake.patch()")
        self.fake: FakeNixl = fake
        conf = nixl_conf or nixl_agent_config()
        cfg = nixlAgentConfig()
        cfg.useProgThread, cfg.useListenThread = conf.enable_pthread, conf.enable_listen
        cfg.listenPort = conf.port
        self.agent = nixlAgent(agent_name, cfg, fake=fake)
        self.name = agent_name
        self.face = f"nixl:{agent_name}"
        self.notifs: dict[str, list[bytes]] = {}
        self.backends: dict[str, int] = {}
        self.backend_mems: dict[str, list[str]] = {}
        self.backend_options: dict[str, dict[str, str]] = {}
        self.plugin_list = self.agent.getAvailPlugins()
        self.nixl_mems = dict(_MEMS)
        self.nixl_ops = dict(_OPS)
        backends = self.plugin_list if instantiate_all and nixl_conf is None else conf.backends
        for bknd in backends:
            if bknd not in self.plugin_list:
                logger.warning("Skipping backend registration %s due to the missing plugin.",
                               bknd)
            else:      # a plugin other than UCX is not modelled: create_backend says so
                self.create_backend(bknd, {})
        fake.agent_objects.append(self)

    # -- plumbing ---------------------------------------------------------------------------
    def _call(self, api: str, args: tuple[Any, ...], body: Callable[[], Any],
              leaves: Callable[[int], None] | None = None) -> Any:
        """Run ``body`` through the fault plan, recording its end in the trace; ``leaves``
        gives the agent the state a real failure of that status leaves before an injected
        one is raised."""
        fake = self.fake
        injected = fake.check_fault(f"nixl.{api}", self.face, api, args)
        try:
            if injected is not None:
                if leaves is not None:
                    leaves(injected)
                raise_status(injected, f"injected by kvreg's fault plan at nixl.{api}")
            result = body()
        except NixlError as exc:
            fake.trace.append(self.face, api, args, int(exc.status), type(exc).__name__,
                              injected is not None)
            raise
        except Exception as exc:
            fake.trace.append(self.face, api, args, None, type(exc).__name__, False)
            raise
        fake.trace.append(self.face, api, args, 0, result, False)
        return result

    def _handles(self, backends: list[str]) -> list[int]:
        return [self.backends[b] for b in backends]

    # -- plugins and backends -----------------------------------------------------------------
    def get_plugin_list(self) -> list[str]:
        return self.plugin_list

    def get_plugin_mem_types(self, backend: str) -> list[str]:
        return self.agent.getPluginParams(backend)[1] if backend in self.plugin_list else []

    def get_plugin_params(self, backend: str) -> dict[str, str]:
        return self.agent.getPluginParams(backend)[0] if backend in self.plugin_list else {}

    def get_backend_mem_types(self, backend: str) -> list[str]:
        return self.backend_mems.get(backend, [])

    def get_backend_params(self, backend: str) -> dict[str, str]:
        return self.backend_options.get(backend, {})

    def create_backend(self, backend: str, initParams: dict[str, str] | None = None) -> None:
        self.backends[backend] = self.agent.createBackend(backend, dict(initParams or {}))
        options, mems = self.agent.getBackendParams(self.backends[backend])
        self.backend_mems[backend] = mems
        self.backend_options[backend] = options

    # -- descriptor lists ---------------------------------------------------------------------
    def get_reg_descs(self, descs: Any, mem_type: str | None = None) -> nixlRegDList | None:
        out: nixlRegDList | None = self._descs(nixlRegDList, descs, mem_type)
        return out

    def get_xfer_descs(self, descs: Any, mem_type: str | None = None) -> nixlXferDList | None:
        out: nixlXferDList | None = self._descs(nixlXferDList, descs, mem_type)
        return out

    def _descs(self, cls: type[Any], descs: Any, mem_type: str | None) -> Any:
        other = nixlXferDList if cls is nixlRegDList else nixlRegDList
        width = 4 if cls is nixlRegDList else 3
        if isinstance(descs, cls):
            return descs
        if isinstance(descs, other):
            logger.error("%s type detected, please use the other list type",
                         type(descs).__name__)
            return None
        # the wheel reads descs[0] before it looks at the input's type: an empty list,
        # array or tensor raises IndexError there [OBS-local]
        first = descs[0]
        if isinstance(first, tuple):
            if mem_type is not None and len(first) == width:
                return cls(self.nixl_mems[mem_type], descs)
            logger.error("Please specify a mem type if not using Tensors" if mem_type is None
                         else f"{width}-tuple list needed")
            return None
        if hasattr(descs, "ndim") and hasattr(descs, "shape") and not _is_tensor(descs):
            if mem_type is not None and descs.ndim == 2 and descs.shape[1] == 3:
                return cls(self.nixl_mems[mem_type], descs)
            logger.error("Please specify a mem type if not using Tensors" if mem_type is None
                         else "Nx3 shape required for transfer descriptor list from numpy "
                         "array")
            return None
        if _is_tensor(descs):
            if not descs.is_contiguous():
                logger.error("Please use a list of contiguous Tensors")
                return None
            row = _tensor_row(descs)
            return cls(self.nixl_mems[_tensor_mem(descs)], [(*row, "") if width == 4
                                                            else row])
        if _is_tensor(first):
            rows = _tensor_rows(descs, width)
            return cls(self.nixl_mems[_tensor_mem(first)], rows) if rows is not None else None
        return None

    # -- registration -------------------------------------------------------------------------
    def register_memory(self, reg_list: Any, mem_type: str | None = None,
                        backends: list[str] | None = None) -> nixlRegDList:
        descs = self.get_reg_descs(reg_list, mem_type)
        handles = self._handles(list(backends or []))
        args = (_ranges(descs), _mem(descs))
        self._call("register_memory", args, lambda: self.agent.registerMem(descs, handles),
                   lambda code: self.agent.register_failed(descs, handles, code))
        return descs  # type: ignore[return-value]

    def deregister_memory(self, dereg_list: nixlRegDList,
                          backends: list[str] | None = None) -> None:
        handles = self._handles(list(backends or []))
        args = (_ranges(dereg_list), _mem(dereg_list))
        self._call("deregister_memory", args,
                   lambda: self.agent.deregisterMem(dereg_list, handles))

    # -- metadata -------------------------------------------------------------------------------
    def get_agent_metadata(self) -> bytes:
        return self.agent.getLocalMD()

    def add_remote_agent(self, metadata: bytes) -> bytes:
        return self._call("add_remote_agent", (len(metadata),),  # type: ignore[no-any-return]
                          lambda: self.agent.loadRemoteMD(metadata))

    def remove_remote_agent(self, agent: str) -> None:
        self._call("remove_remote_agent", (agent,), lambda: self.agent.invalidateRemoteMD(agent))

    def check_remote_metadata(self, agent: str, descs: nixlXferDList | None = None) -> bool:
        descs = descs if descs is not None else nixlXferDList(nixl_mem_t.DRAM_SEG)
        return bool(self.agent.checkRemoteMD(agent, descs) == 0)

    # -- transfers ------------------------------------------------------------------------------
    def prep_xfer_dlist(self, agent_name: str, xfer_list: Any, mem_type: str | None = None,
                        backends: list[str] | None = None) -> nixl_prepped_dlist_handle:
        if agent_name in ("NIXL_INIT_AGENT", ""):
            agent_name = NIXL_INIT_AGENT
        handles = self._handles(list(backends or []))
        if hasattr(xfer_list, "ndim") and xfer_list.ndim == 2 and xfer_list.shape[1] == 5:
            raise NotModelledError("kvreg's fake NIXL agent does not model strided (Nx5) "
                                   "descriptor lists (docs/nixl.md §2)")
        descs = self.get_xfer_descs(xfer_list, mem_type)
        handle = self._call("prep_xfer_dlist", (agent_name, _ranges(descs), _mem(descs)),
                            lambda: self.agent.prepXferDlist(agent_name, descs, handles))
        return nixl_prepped_dlist_handle(self.agent, handle)

    def make_prepped_xfer(self, operation: str, local_xfer_side: nixl_prepped_dlist_handle,
                          local_indices: Any, remote_xfer_side: nixl_prepped_dlist_handle,
                          remote_indices: Any, notif_msg: bytes = b"",
                          backends: list[str] | None = None,
                          skip_desc_merge: bool = False) -> nixl_xfer_handle:
        op = self.nixl_ops[operation]
        handles = self._handles(list(backends or []))
        li, ri = [int(i) for i in local_indices], [int(i) for i in remote_indices]
        handle = self._call(
            "make_prepped_xfer", (operation, tuple(li), tuple(ri)),
            lambda: self.agent.makeXferReq(op, local_xfer_side._handle, li,
                                           remote_xfer_side._handle, ri, _bytes(notif_msg),
                                           handles, skip_desc_merge))
        return nixl_xfer_handle(self.agent, handle)

    def initialize_xfer(self, operation: str, local_descs: nixlXferDList,
                        remote_descs: nixlXferDList, remote_agent: str,
                        notif_msg: bytes = b"", backends: list[str] | None = None
                        ) -> nixl_xfer_handle:
        op = self.nixl_ops[operation]
        handles = self._handles(list(backends or []))
        args = (operation, _ranges(local_descs), _ranges(remote_descs), remote_agent)
        handle = self._call("initialize_xfer", args, lambda: self.agent.createXferReq(
            op, local_descs, remote_descs, remote_agent, _bytes(notif_msg), handles))
        return nixl_xfer_handle(self.agent, handle)

    def transfer(self, handle: nixl_xfer_handle, notif_msg: bytes = b"") -> str:
        def post() -> str:
            return _state(self.agent.postXferReq(handle._handle, _bytes(notif_msg)))
        return self._call("transfer", (handle._handle,), post)  # type: ignore[no-any-return]

    def check_xfer_state(self, handle: nixl_xfer_handle) -> str:
        return _state(self.agent.getXferStatus(handle._handle))

    def release_xfer_handle(self, handle: nixl_xfer_handle) -> None:
        handle.release()

    def release_dlist_handle(self, handle: nixl_prepped_dlist_handle) -> None:
        handle.release()

    # -- notifications --------------------------------------------------------------------------
    def get_new_notifs(self, backends: list[str] | None = None) -> dict[str, list[bytes]]:
        return self.agent.getNotifs({})

    def update_notifs(self, backends: list[str] | None = None) -> dict[str, list[bytes]]:
        self.notifs = self.agent.getNotifs(self.notifs)
        return self.notifs

    def check_remote_xfer_done(self, remote_agent_name: str, lookup_tag: bytes,
                               backends: list[str] | None = None,
                               tag_is_prefix: bool = True) -> bool:
        self.notifs = self.agent.getNotifs(self.notifs)
        for msg in self.notifs.get(remote_agent_name, []):
            if msg.startswith(lookup_tag) if tag_is_prefix else lookup_tag in msg:
                self.notifs[remote_agent_name].remove(msg)
                return True
        return False

    def send_notif(self, remote_agent_name: str, notif_msg: bytes,
                   backend: str | None = None) -> None:
        self.agent.genNotif(remote_agent_name, _bytes(notif_msg))

    def __getattr__(self, name: str) -> Any:
        if name not in _NOT_MODELLED:
            raise AttributeError(f"'nixl_agent' object has no attribute {name!r}")

        def not_modelled(*args: object, **kwargs: object) -> Any:
            raise NotModelledError(f"kvreg's fake nixl_agent does not model {name}() "
                                   "(the modelled methods are those of kvreg.fakes.nixl.api)")
        return not_modelled


# the real agent's methods (1.5.1) the fake does not model (docs/nixl.md §2): present, as on
# the real class, and raising when called
_NOT_MODELLED = frozenset({
    "query_memory", "make_connection", "estimate_xfer_cost", "get_xfer_telemetry",
    "query_xfer_backend", "prep_mem_view", "release_mem_view", "get_partial_agent_metadata",
    "send_local_metadata", "send_partial_agent_metadata", "fetch_remote_metadata",
    "invalidate_local_metadata", "get_remote_descs", "get_serialized_descs",
    "deserialize_descs"})


def _tensor_rows(tensors: Any, width: int) -> list[tuple[Any, ...]] | None:
    """A list of tensors as descriptor rows; None (logged) for a mixed or strided list."""
    rows: list[tuple[Any, ...]] = []
    for t in tensors:
        if t.device != tensors[0].device:
            return None
        if not t.is_contiguous():
            logger.error("Please use a list of contiguous Tensors")
            return None
        rows.append((*_tensor_row(t), "") if width == 4 else _tensor_row(t))
    return rows


def _tensor_mem(t: Any) -> str:
    return "DRAM" if t.get_device() == -1 else "VRAM"


def _ranges(descs: Any) -> tuple[tuple[int, int, int], ...]:
    return tuple(descs.ranges) if isinstance(descs, nixlRegDList | nixlXferDList) else ()


def _mem(descs: Any) -> str:
    return descs.getType().name if isinstance(descs, nixlRegDList | nixlXferDList) else "?"


def _bytes(msg: bytes | str) -> bytes:
    return msg.encode() if isinstance(msg, str) else bytes(msg)


def _state(status: int) -> str:
    return "DONE" if status == 0 else "PROC" if status == 1 else "ERR"

