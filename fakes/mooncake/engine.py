"""``mooncake.engine.TransferEngine``: the transfer engine's Python API on the fake fabric.

Methods and return values as the pybind binding of Mooncake 0.3.13.post1
(``mooncake-integration/transfer_engine/transfer_engine_py.cpp``), held call by call
against the real one over tcp (docs/mooncake-verbs.md §8): ints, never exceptions, for
engine errors (zero length -1, overlap -7, an unknown base -3, every transfer failure -1);
batch ids 0 on failure. Before ``initialize()`` the real binding dereferences a null engine
in most methods and the process dies (SIGSEGV): the fake raises
:class:`~.errors.EngineCrash` there. Every call is in the fabric's trace (face
``mooncake.engine:<node>``) and goes through the fault plan (points
``mooncake.engine.<method>``).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..verbs import memory
from ..verbs.errors import NotModelledError
from .engine_managed import ManagedBuffers
from .engine_state import EngineDeployment, EngineState
from .errors import EngineCrash, TeError

__all__ = ["CRASHING", "TransferEngine", "TransferNotify", "TransferOpcode", "bind_engine"]

FAIL = int(TeError.ERR_INVALID_ARGUMENT)
ERR_SOCKET = int(TeError.ERR_SOCKET)

# §8.1: these segfault before initialize() on 0.3.13.post1 (checked in child processes)
CRASHING = frozenset({
    "get_rpc_port", "register_memory", "unregister_memory", "batch_register_memory",
    "batch_unregister_memory", "transfer_sync_write", "transfer_sync_read", "transfer_sync",
    "batch_transfer_sync_write", "batch_transfer_sync_read", "batch_transfer_sync",
    "batch_transfer_async_write", "batch_transfer_async_read", "batch_transfer_async",
    "transfer_submit_write", "get_first_buffer_address", "allocate_managed_buffer",
    "free_managed_buffer", "get_notifies"})
_NOT_MODELLED = frozenset({"get_engine", "get_engine_ptr", "get_local_topology",
                           "warmup_efa_segment"})


class TransferOpcode(enum.IntEnum):
    """``mooncake.engine.TransferOpcode`` (``Read`` 0, ``Write`` 1)."""

    Read = 0
    Write = 1


class TransferNotify:
    """``TransferNotify(name, msg)``; the fake accepts it only as None in transfers."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{what}: incompatible function arguments (expected a non-negative "
                        f"int, got {value!r})")
    return int(value)


def _ints(values: Any, what: str) -> list[int]:
    if not isinstance(values, list | tuple):
        raise TypeError(f"{what}: incompatible function arguments (expected a list of int)")
    return [_int(v, what) for v in values]


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what}: incompatible function arguments (expected str, got "
                        f"{type(value).__name__})")
    return value


class TransferEngine:
    """The fake engine; build it through ``FakeMooncake`` (``fake.engine()`` or the patch)."""

    TransferOpcode: ClassVar[type[TransferOpcode]] = TransferOpcode

    _fake: ClassVar[EngineDeployment | None] = None
    _node_name: ClassVar[str | None] = None
    _ids: ClassVar[Callable[[], int]] = itertools.count(0x5E0000).__next__

    def __init__(self) -> None:
        fake = type(self)._fake
        if fake is None:
            raise RuntimeError("this TransferEngine class belongs to no FakeMooncake; use "
                               "fake.engine() or fake.patch()")
        self._owner: EngineDeployment = fake
        self._node = fake.fabric.node(type(self)._node_name)
        self._state: EngineState | None = None
        self._batches: dict[int, int] = {}
        self._managed: ManagedBuffers | None = None
        self.face = f"mooncake.engine:{self._node.name}"
        fake.engines.append(self)

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_MODELLED:
            def not_modelled(*args: object, **kwargs: object) -> Any:
                raise NotModelledError(f"kvreg's fake TransferEngine does not model {name}() "
                                       "(COVERAGE: the modelled methods are those of "
                                       "kvreg.fakes.mooncake.engine)")
            return not_modelled
        raise AttributeError(f"'TransferEngine' object has no attribute {name!r}")

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def state(self) -> EngineState | None:
        """The initialized engine (None before ``initialize``)."""
        return self._state

    def _need(self, api: str) -> EngineState:
        if self._state is None:
            if self._owner.profile.engine_crashes_before_initialize:
                raise EngineCrash(f"{api}() before initialize(): the real TransferEngine "
                                  "segfaults here (SIGSEGV: its engine pointer is null; "
                                  "docs/mooncake-verbs.md §8.1)")
            raise RuntimeError(f"{api}() before initialize()")
        return self._state

    def _done(self, api: str, args: tuple[Any, ...], code: int, injected: bool = False) -> int:
        self._owner.fabric.trace.append(self.face, api, args, code, code, injected)
        return code

    def _fault(self, api: str, args: tuple[Any, ...]) -> int | None:
        return self._owner.fabric.check_fault(f"mooncake.engine.{api}", self.face, api, args,
                                              self._node)

    # -- lifecycle --------------------------------------------------------------------------
    def initialize(self, local_hostname: str, metadata_server: str, protocol: str,
                   device_name: str) -> int:
        """0; a second call replaces the engine (its registrations and segment go)."""
        return self._initialize("initialize", local_hostname, metadata_server, protocol,
                                device_name)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str,
                       device_name: str, metadata_type: str) -> int:
        _str(metadata_type, "metadata_type")
        return self._initialize("initialize_ext", local_hostname, metadata_server, protocol,
                                device_name)

    def _initialize(self, api: str, hostname: Any, metadata: Any, protocol: Any,
                    device: Any) -> int:
        args = (_str(hostname, "local_hostname"), _str(metadata, "metadata_server"),
                _str(protocol, "protocol"), _str(device, "device_name"))
        injected = self._fault("initialize", args)
        if injected is not None:
            return self._done(api, args, injected, True)
        if protocol == "xgmi":        # §8.1: the one protocol the binding refuses
            return self._done(api, args, FAIL)
        self.kvreg_destroy()
        state = EngineState.build(self._owner, self._node, hostname, metadata, device)
        self._owner.engine_segments[state.segment.name] = state
        self._state = state
        self._managed = ManagedBuffers(self._raw_buffer, self._free_raw)
        return self._done(api, args, 0)

    def kvreg_destroy(self) -> None:
        """Not in the real API (named so no code mistakes it for one): what destroying the
        engine does (registrations dropped, segment withdrawn); ``initialize`` again does it
        too, and ``FakeMooncake.close_all`` for every engine."""
        st = self._state
        if st is None:
            return
        st.core.clear()
        if self._owner.engine_segments.get(st.segment.name) is st:
            del self._owner.engine_segments[st.segment.name]
        self._state = None
        self._managed = None

    def get_rpc_port(self) -> int:
        return self._need("get_rpc_port").rpc_port

    # -- registration -----------------------------------------------------------------------
    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        args = (_int(buffer_addr, "buffer_addr"), _int(capacity, "capacity"))
        st = self._need("register_memory")
        injected = self._fault("register_memory", args)
        if injected is not None:
            return self._done("register_memory", args, injected, True)
        return self._done("register_memory", args, st.core.register(*args))

    def unregister_memory(self, buffer_addr: int) -> int:
        args = (_int(buffer_addr, "buffer_addr"),)
        st = self._need("unregister_memory")
        injected = self._fault("unregister_memory", args)
        if injected is not None:
            return self._done("unregister_memory", args, injected, True)
        return self._done("unregister_memory", args, st.core.unregister(args[0]))

    def batch_register_memory(self, buffer_addresses: list[int], capacities: list[int],
                              location: str = "*") -> int:
        addrs = _ints(buffer_addresses, "buffer_addresses")
        sizes = _ints(capacities, "capacities")
        st = self._need("batch_register_memory")
        if len(addrs) != len(sizes):
            # the binding indexes capacities by the addresses' count: undefined behaviour
            raise ValueError("batch_register_memory: buffer_addresses and capacities differ "
                             f"in length ({len(addrs)} != {len(sizes)}); the real binding "
                             "reads past the shorter list (docs/mooncake-verbs.md §8.3)")
        args = (tuple(addrs), tuple(sizes))
        injected = self._fault("batch_register_memory", args)
        if injected is not None:
            return self._done("batch_register_memory", args, injected, True)
        code = st.core.register_batch(list(zip(addrs, sizes, strict=True)))
        return self._done("batch_register_memory", args, code)

    def batch_unregister_memory(self, buffer_addresses: list[int]) -> int:
        addrs = _ints(buffer_addresses, "buffer_addresses")
        st = self._need("batch_unregister_memory")
        args = (tuple(addrs),)
        injected = self._fault("batch_unregister_memory", args)
        if injected is not None:
            return self._done("batch_unregister_memory", args, injected, True)
        return self._done("batch_unregister_memory", args, st.core.unregister_batch(addrs))

    # -- transfers --------------------------------------------------------------------------
    def _run(self, api: str, point: str, target: Any, entries: Sequence[tuple[int, int, int]],
             write: bool) -> int:
        """Every entry in order; the first that fails makes the call -1 and the later ones
        are not made (the real batch's other entries race with its return, §8.4)."""
        st = self._need(api)
        args = (_str(target, "target_hostname"), tuple(entries), "write" if write else "read")
        peer = st.open(self._owner, target)
        if peer is None:
            return self._done(api, args, FAIL)
        injected = self._fault(point, args)
        if injected is not None:
            return self._done(api, args, injected, True)
        for local, remote, nbytes in entries:
            if not st.move(peer, local, remote, nbytes, write=write):
                return self._done(api, args, FAIL)
        return self._done(api, args, 0)

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                            length: int, transport_hint: str = "") -> int:
        entry = (_int(buffer, "buffer"), _int(peer_buffer_address, "peer_buffer_address"),
                 _int(length, "length"))
        return self._run("transfer_sync_write", "transfer_sync_write", target_hostname,
                         [entry], True)

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                           length: int, transport_hint: str = "") -> int:
        entry = (_int(buffer, "buffer"), _int(peer_buffer_address, "peer_buffer_address"),
                 _int(length, "length"))
        return self._run("transfer_sync_read", "transfer_sync_read", target_hostname,
                         [entry], False)

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                      length: int, opcode: int, notify: TransferNotify | None = None,
                      transport_hint: str = "") -> int:
        _no_notify(notify)
        write = int(opcode) == int(TransferOpcode.Write)
        entry = (_int(buffer, "buffer"), _int(peer_buffer_address, "peer_buffer_address"),
                 _int(length, "length"))
        return self._run("transfer_sync", "transfer_sync_write" if write else
                         "transfer_sync_read", target_hostname, [entry], write)

    def _batch(self, api: str, point: str, target: Any, buffers: Any, peers: Any,
               lengths: Any, write: bool) -> int:
        local = _ints(buffers, "buffers")
        remote = _ints(peers, "peer_buffer_addresses")
        sizes = _ints(lengths, "lengths")
        st = self._need(api)
        if st.open(self._owner, _str(target, "target_hostname")) is not None and \
                not len(local) == len(remote) == len(sizes):
            return self._done(api, (target, len(local), len(remote), len(sizes)), FAIL)
        return self._run(api, point, target, list(zip(local, remote, sizes, strict=False)),
                         write)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: list[int],
                                  peer_buffer_addresses: list[int], lengths: list[int],
                                  transport_hint: str = "") -> int:
        return self._batch("batch_transfer_sync_write", "batch_transfer_sync_write",
                           target_hostname, buffers, peer_buffer_addresses, lengths, True)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: list[int],
                                 peer_buffer_addresses: list[int], lengths: list[int],
                                 transport_hint: str = "") -> int:
        return self._batch("batch_transfer_sync_read", "batch_transfer_sync_read",
                           target_hostname, buffers, peer_buffer_addresses, lengths, False)

    def batch_transfer_sync(self, target_hostname: str, buffers: list[int],
                            peer_buffer_addresses: list[int], lengths: list[int],
                            opcode: int, notify: TransferNotify | None = None,
                            transport_hint: str = "") -> int:
        _no_notify(notify)
        write = int(opcode) == int(TransferOpcode.Write)
        point = "batch_transfer_sync_write" if write else "batch_transfer_sync_read"
        return self._batch("batch_transfer_sync", point, target_hostname, buffers,
                           peer_buffer_addresses, lengths, write)

    # -- asynchronous transfers ---------------------------------------------------------------
    def _submit(self, api: str, point: str, target: Any, buffers: Any, peers: Any,
                lengths: Any, write: bool) -> int:
        """A batch id (never 0) whose status is the transfer's; 0 where the real binding
        returns 0 (unknown target, lists of different lengths)."""
        st = self._need(api)
        if st.open(self._owner, _str(target, "target_hostname")) is None:
            return self._done(api, (target,), 0)
        local, remote = _ints(buffers, "buffers"), _ints(peers, "peer_buffer_addresses")
        sizes = _ints(lengths, "lengths")
        if not len(local) == len(remote) == len(sizes):
            return self._done(api, (target, len(local), len(remote), len(sizes)), 0)
        code = self._run(api, point, target, list(zip(local, remote, sizes, strict=True)),
                         write)
        batch_id = type(self)._ids() << 6
        self._batches[batch_id] = code
        return batch_id

    def batch_transfer_async_write(self, target_hostname: str, buffers: list[int],
                                   peer_buffer_addresses: list[int], lengths: list[int],
                                   transport_hint: str = "") -> int:
        return self._submit("batch_transfer_async_write", "batch_transfer_async_write",
                            target_hostname, buffers, peer_buffer_addresses, lengths, True)

    def batch_transfer_async_read(self, target_hostname: str, buffers: list[int],
                                  peer_buffer_addresses: list[int], lengths: list[int],
                                  transport_hint: str = "") -> int:
        return self._submit("batch_transfer_async_read", "batch_transfer_async_read",
                            target_hostname, buffers, peer_buffer_addresses, lengths, False)

    def batch_transfer_async(self, target_hostname: str, buffers: list[int],
                             peer_buffer_addresses: list[int], lengths: list[int],
                             opcode: int, transport_hint: str = "") -> int:
        write = int(opcode) == int(TransferOpcode.Write)
        point = "batch_transfer_async_write" if write else "batch_transfer_async_read"
        return self._submit("batch_transfer_async", point, target_hostname, buffers,
                            peer_buffer_addresses, lengths, write)

    def transfer_submit_write(self, target_hostname: str, buffer: int,
                              peer_buffer_address: int, length: int,
                              transport_hint: str = "") -> int:
        return self._submit("transfer_submit_write", "batch_transfer_async_write",
                            target_hostname, [buffer], [peer_buffer_address], [length], True)

    def _take(self, api: str, batch_id: int) -> int:
        if batch_id not in self._batches:
            raise EngineCrash(f"{api}({batch_id:#x}): not a live batch id; the real binding "
                              "dereferences it as a BatchDesc pointer (an id is freed once "
                              "its status is read as done; docs/mooncake-verbs.md §8.4)")
        return self._batches.pop(batch_id)

    def get_batch_transfer_status(self, batch_ids: list[int]) -> int:
        """0 when every batch completed, -1 if one failed (every id is then spent)."""
        codes = [self._take("get_batch_transfer_status", _int(b, "batch_id"))
                 for b in _ints(batch_ids, "batch_ids")]
        return FAIL if any(codes) else 0

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, -1 failed (the fake's transfers are done when submitted)."""
        return 1 if self._take("transfer_check_status", _int(batch_id, "batch_id")) == 0 \
            else FAIL

    # -- segments, buffers, probes -------------------------------------------------------------
    def get_first_buffer_address(self, segment_name: str) -> int:
        """The first buffer of the segment as this engine first saw it (§8.5); 0 if none."""
        st = self._need("get_first_buffer_address")
        return st.first_buffer(self._owner, _str(segment_name, "segment_name"))

    def allocate_managed_buffer(self, length: int) -> int:
        self._need("allocate_managed_buffer")
        assert self._managed is not None
        return self._managed.allocate(_int(length, "length"))

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        self._need("free_managed_buffer")
        assert self._managed is not None
        return self._managed.release(_int(buffer_addr, "buffer_addr"), _int(length, "length"))

    def _raw_buffer(self, size: int) -> int:
        st = self._state
        assert st is not None
        base = self._node.space.reserve(size, name=f"mooncake-managed@{st.segment.name}")
        if st.core.register(base, size) != 0:
            self._node.space.forget(base)
            return 0
        return base

    def _free_raw(self, base: int) -> None:
        st = self._state
        assert st is not None
        st.core.unregister(base)
        self._node.space.forget(base)

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        """A plain memcpy (no engine needed)."""
        data = bytes(src_ptr)[:_int(length, "length")]
        memory.write(self._node.space, _int(dest_address, "dest_address"), data)
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        data = memory.read(self._node.space, _int(source_address, "source_address"),
                           _int(length, "length"))
        return data if data is not None else bytes(length)

    def send_probe(self, peer_server_name: str) -> int:
        """-1 before initialize, 0 for a live segment, -102 ERR_SOCKET otherwise."""
        if self._state is None:
            return FAIL
        return 0 if _str(peer_server_name, "peer_server_name") in \
            self._owner.engine_segments else ERR_SOCKET

    def get_notifies(self) -> list[TransferNotify]:
        self._need("get_notifies")
        return []

    # -- helpers for tests (not part of the real API) ---------------------------------------------
    def registered_buffers(self) -> list[tuple[int, int]]:
        """(base, length) of every region in the engine's map."""
        st = self._state
        return sorted(st.core.regions.items()) if st is not None else []


def _no_notify(notify: TransferNotify | None) -> None:
    if notify is not None:
        raise NotModelledError("kvreg's fake TransferEngine does not model transfer "
                               "notifications (notify must be None)")


def bind_engine(fake: EngineDeployment, node: str | None) -> type[TransferEngine]:
    """The engine class whose instances run on ``node`` of ``fake``'s fabric."""
    return type("TransferEngine", (TransferEngine,),
                {"_fake": fake, "_node_name": node, "__module__": "mooncake.engine",
                 "__doc__": TransferEngine.__doc__})

