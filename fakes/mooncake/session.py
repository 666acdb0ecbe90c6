"""The store client's behaviour behind the binding: setup, registration, put/get, batches.

Each rule cites docs/mooncake-verbs.md. ``MooncakeDistributedStore`` (``store.py``) checks
argument types as pybind would and delegates here; every call lands in the fabric's trace
(face ``mooncake:<node>``) and goes through the fault plan (points ``mooncake.*``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..verbs import memory
from ..verbs.enums import ibv_access_flags as F
from ..verbs.node import Nic, Node
from .config import ReplicateConfig
from .deployment import Cluster, Deployment, StoredObject
from .errors import ErrorCode, StoreCrash
from .transfer_engine import FakeTransferEngine

__all__ = ["Client", "Session", "StoredObject", "atoll"]

OK = 0
INVALID = int(ErrorCode.INVALID_PARAMS)
NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)
TRANSFER_FAIL = int(ErrorCode.TRANSFER_FAIL)
HAS_LEASE = int(ErrorCode.OBJECT_HAS_LEASE)
NO_HANDLE = int(ErrorCode.NO_AVAILABLE_HANDLE)
# §7: what a dummy client's register_buffer returns for memory outside its shared memory
DUMMY_REGISTER = -1
# §7 (checked on 0.3.13.post1, tests/mooncake_real/test_crashes.py): these calls segfault
# the real process before setup()/after close(); put_from (-600), get (b""),
# batch_put_from_multi_buffers ([]), close (0) and health_check (1) check first
CRASHING = frozenset({
    "register_buffer", "unregister_buffer", "is_exist", "batch_is_exist", "remove",
    "batch_remove", "remove_all", "remove_by_regex", "get_size", "get_into", "put",
    "batch_put_from", "batch_get_into", "batch_get_into_multi_buffers"})
PROTOCOLS = ("rdma", "tcp", "efa", "cxi")
Parts = Sequence[tuple[int, int]]


@dataclass(eq=False)
class Client:
    """What ``setup`` builds (the RealClient): engine, cluster, registered buffers."""

    hostname: str
    protocol: str
    te: FakeTransferEngine
    cluster: Cluster
    max_mr_size: int
    buffers: dict[int, int] = field(default_factory=dict)   # registered_buffer_sizes_
    internal: list[int] = field(default_factory=list)       # segments, local buffer
    reserved: list[int] = field(default_factory=list)       # virtual memory setup reserved
    dummy: bool = False                                     # setup_dummy (§7)


def atoll(text: str | None) -> int:
    """C ``atoll``: the leading integer of the string, 0 if there is none (§1.6)."""
    m = re.match(r"\s*([+-]?\d+)", text or "")
    return int(m.group(1)) if m else 0


def _setup_args(local_hostname: str, metadata_server: str, global_segment_size: int,
                local_buffer_size: int, protocol: str, rdma_devices: str,
                master_server_addr: str, engine: Any = None, enable_ssd_offload: bool = False,
                ssd_offload_path: str = "", tenant_id: str = "default",
                enable_client_http_server: bool = False, client_http_port: int = 9300) -> None:
    """The positional ``setup`` overload's signature (§1.2): the first 7 are required."""


_SETUP = inspect.signature(_setup_args)


class Session:
    """One store object's state; ``client`` is None before setup and after close."""

    def __init__(self, fake: Deployment, node: Node) -> None:
        self.fake = fake
        self.node = node
        self.client: Client | None = None
        self.face = f"mooncake:{node.name}"

    # -- plumbing ---------------------------------------------------------------------------
    def _record(self, api: str, args: tuple[Any, ...], code: int | None,
                injected: bool = False) -> None:
        self.fake.fabric.trace.append(self.face, api, args, code, code, injected)

    def _fault(self, point: str, api: str, args: tuple[Any, ...]) -> int | None:
        return self.fake.fabric.check_fault(f"mooncake.{point}", self.face, api, args,
                                            self.node)

    def _done(self, api: str, args: tuple[Any, ...], code: int,
              injected: bool = False) -> int:
        self._record(api, args, code, injected)
        return code

    def no_client(self, api: str) -> int:
        """A call without a client: the real crash, made loud (§7), or INVALID_PARAMS."""
        if self.fake.profile.crashes_without_client and api in CRASHING:
            raise StoreCrash(f"{api}() before setup() or after close(): the real "
                             "MooncakeDistributedStore segfaults here (SIGSEGV: it "
                             "dereferences its null client; docs/mooncake-verbs.md §7)")
        return self._done(api, (), INVALID)

    def lease(self, c: Client, obj: StoredObject) -> None:
        """§7: a read grants the object a lease of default_kv_lease_ttl."""
        if self.fake.profile.reads_take_lease:
            until = c.cluster.clock() + self.fake.profile.default_kv_lease_ttl_ms / 1000
            obj.lease_until = max(obj.lease_until, until)

    def lookup(self, key: str) -> StoredObject | None:
        """The object, leased by this read (§7); None on a miss."""
        c = self.client
        assert c is not None
        obj = c.cluster.objects.get(key)
        if obj is not None:
            self.lease(c, obj)
        return obj

    # -- setup / close ----------------------------------------------------------------------
    def setup(self, *args: Any, **kwargs: Any) -> int:
        try:
            bound = _SETUP.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"setup(): incompatible function arguments: {exc}") from None
        a = bound.arguments
        return self._setup(str(a["local_hostname"]), int(a["global_segment_size"]),
                           int(a["local_buffer_size"]), str(a["protocol"]),
                           str(a["rdma_devices"]), str(a["master_server_addr"]))

    def setup_dummy(self, server_address: str) -> int:
        """A client backed by a standalone ``mooncake_client`` (§7): tcp, no devices, and
        process memory outside its shared memory is refused."""
        rc = self._setup("dummy", 0, 0, "tcp", "", server_address, dummy=True)
        if rc == 0 and self.client is not None:
            # the standalone client mounts its own segment; it outlives this dummy
            standalone = ("mooncake_client", server_address)
            if standalone not in self.client.cluster.segments:
                self.client.cluster.segments.append(standalone)
        return rc

    def setup_from_dict(self, config: Mapping[str, Any]) -> int:
        """The dict overload: values are stringified; two keys are required (§1.2)."""
        cfg = {str(k): str(v) for k, v in config.items()}
        if "local_hostname" not in cfg or "metadata_server" not in cfg:
            return self._done("setup", (dict(cfg),), INVALID)
        return self._setup(cfg["local_hostname"],
                           atoll(cfg.get("global_segment_size", str(16 << 20))),
                           atoll(cfg.get("local_buffer_size", str(16 << 20))),
                           cfg.get("protocol", "tcp"), cfg.get("rdma_devices", ""),
                           cfg.get("master_server_addr", "127.0.0.1:50051"))

    def _devices(self, protocol: str, rdma_devices: str) -> list[Nic] | None:
        if protocol == "tcp":
            return []
        names = [n.strip() for n in rdma_devices.split(",") if n.strip()]
        if not names:
            return list(self.node.nics.values()) or None   # auto-discovery
        if any(n not in self.node.nics for n in names):
            return None                                    # [inferred] unknown HCA
        return [self.node.nics[n] for n in names]

    def _setup(self, hostname: str, gseg: int, lbuf: int, protocol: str, rdma_devices: str,
               master: str, *, dummy: bool = False) -> int:
        args = (hostname, gseg, lbuf, protocol, rdma_devices, master)
        injected = self._fault("setup", "setup", args)
        if injected is not None:
            return self._done("setup", args, injected, True)
        profile = self.fake.profile
        devices = self._devices(protocol, rdma_devices)
        if protocol not in PROTOCOLS or devices is None:
            return self._done("setup", args, INVALID)
        if self.client is not None:
            if not profile.resetup_replaces_client:
                return self._done("setup", args, INVALID)
            self._teardown()   # §7: the new client replaces the old one [inferred: order]
        env = self.fake.env()
        # §1.6: 1 TiB, or MC_MAX_MR_SIZE (v0.3.11+, atoll, > 0 only), lowered to every opened
        # device's max_mr_size (no device with tcp)
        limit = profile.max_mr_size_default
        if profile.reads_mc_max_mr_size and atoll(env.get("MC_MAX_MR_SIZE")) > 0:
            limit = atoll(env.get("MC_MAX_MR_SIZE"))
        for nic in devices:
            limit = min(limit, int(nic.attr["max_mr_size"]))
        slice_size = atoll(env.get("MC_SLICE_SIZE")) or profile.slice_size   # §1.8
        store_limit = protocol in profile.store_limit_protocols
        # §1.6: local_buffer_size goes through the store-level size check
        if store_limit and lbuf > limit:
            return self._done("setup", args, INVALID)
        te = FakeTransferEngine(self.node, devices, profile, limit, slice_size)
        client = Client(hostname, protocol, te, self.fake.cluster(master), limit, dummy=dummy)
        seg_access = int(F.IBV_ACCESS_LOCAL_WRITE | F.IBV_ACCESS_REMOTE_WRITE |
                         F.IBV_ACCESS_REMOTE_READ) | self._ro()
        pieces: list[tuple[int, int, int]] = []
        if gseg > 0:
            base = self.node.space.reserve(gseg, name=f"mooncake-segment@{hostname}")
            client.reserved.append(base)
            # §1.6: released setup splits the global segment into <= max_mr_size segments
            step = limit if store_limit else gseg
            pieces += [(base + off, min(step, gseg - off), seg_access)
                       for off in range(0, gseg, step)]
        if lbuf > 0:
            base = self.node.space.reserve(lbuf, name=f"mooncake-local-buffer@{hostname}")
            client.reserved.append(base)
            pieces.append((base, lbuf, self._user_access()))
        for addr, size, access in pieces:
            if te.register(addr, size, access, remote_accessible=access == seg_access) != 0:
                for done in client.internal:
                    te.unregister(done)
                self._release(client)
                return self._done("setup", args, INVALID)
            client.internal.append(addr)
        if gseg > 0:
            client.cluster.segments.append(client)
        self.client = client
        return self._done("setup", args, OK)

    def _release(self, client: Client) -> None:
        for base in client.reserved:
            self.node.space.forget(base)
        client.reserved.clear()

    def _ro(self) -> int:
        return int(F.IBV_ACCESS_RELAXED_ORDERING) if self.fake.profile.relaxed_ordering else 0

    def _user_access(self) -> int:
        return self.fake.profile.user_buffer_access | self._ro()

    def close(self) -> int:
        """tearDownAll: every registration (user buffers, segments) is unregistered."""
        if self.client is None:
            return self._done("close", (), OK)
        return self._done("close", (), OK if self._teardown() else INVALID)

    def _teardown(self) -> bool:
        """Unregister everything, unmount the segment (its objects go, §7), drop the client."""
        c = self.client
        assert c is not None
        failed = False
        for base in [*c.buffers, *c.internal]:
            failed |= c.te.unregister(base) != 0
        c.buffers.clear()
        c.internal.clear()
        self._release(c)
        if self.fake.profile.objects_live_in_segments:
            c.cluster.drop_segment(c)
        self.client = None
        return not failed

    # -- registration -------------------------------------------------------------------------
    def register_buffer(self, ptr: int, size: int) -> int:
        args = (ptr, size)
        c = self.client
        if c is None:
            return self.no_client("register_buffer")
        injected = self._fault("register_buffer", "register_buffer", args)
        if injected is not None:
            return self._done("register_buffer", args, injected, True)
        if c.dummy and self.fake.profile.dummy_refuses_process_memory:
            # §7: "not in any registered shared memory" (the fake models no shm)
            return self._done("register_buffer", args, DUMMY_REGISTER)
        # §1.5 step 2 (CheckRegisterMemoryParams): null, zero length, the size limit (§1.6)
        if ptr == 0 or size == 0:
            return self._done("register_buffer", args, INVALID)
        if c.protocol in self.fake.profile.store_limit_protocols and size > c.max_mr_size:
            return self._done("register_buffer", args, INVALID)
        # §1.4: any TE failure (overlap -7, an MR failure) becomes INVALID_PARAMS
        if c.te.register(ptr, size, self._user_access()) != 0:
            return self._done("register_buffer", args, INVALID)
        c.buffers[ptr] = size
        return self._done("register_buffer", args, OK)

    def unregister_buffer(self, ptr: int) -> int:
        args = (ptr,)
        c = self.client
        if c is None:
            return self.no_client("unregister_buffer")
        injected = self._fault("unregister_buffer", "unregister_buffer", args)
        if injected is not None:
            return self._done("unregister_buffer", args, injected, True)
        # §1.5 step 5: the exact base, else ERR_ADDRESS_NOT_REGISTERED -> -600
        code = c.te.unregister(ptr)
        c.buffers.pop(ptr, None)
        if ptr in c.internal:
            c.internal.remove(ptr)
        return self._done("unregister_buffer", args, INVALID if code else OK)

    # -- data path ----------------------------------------------------------------------------
    def _transfer_ok(self, c: Client, ranges: Parts) -> bool:
        """§1.3: unregistered memory fails on the RDMA path; tcp needs no MR."""
        if c.protocol == "tcp" or self.fake.profile.store_memcpy:
            return True
        return all(c.te.transfer_ok(p, n) for p, n in ranges if n)

    def put_one(self, key: str, parts: Parts | None, size: int,
                config: ReplicateConfig | None, *, data: bytes | None = None,
                api: str = "put_from", batch: bool = False) -> int:
        args = (key, *parts[0]) if parts is not None and len(parts) == 1 else (key, size)
        c = self.client
        if c is None:
            return self.no_client(api)
        if parts is not None and not parts:
            return self._done(api, args, INVALID)   # [inferred] ptr/size lists of one key differ
        if size == 0:
            # §1.2: put_from of size 0 logs a warning and returns 0; §7: a batch entry of
            # size 0 is -600
            return self._done(api, args, INVALID if batch else OK)
        if config is not None and config.prefer_alloc_in_same_node:
            return self._done(api, args, INVALID)   # §1.3
        injected = self._fault("put", api, args)
        if injected is not None:
            return self._done(api, args, injected, True)
        if parts is not None and c.dummy and self.fake.profile.dummy_refuses_process_memory:
            return self._done(api, args, INVALID)   # §7: not in the client's shared memory
        if key in c.cluster.objects:
            return self._done(api, args, OK)    # §1.3: OBJECT_ALREADY_EXISTS -> 0, no rewrite
        owner = self._placement(c)
        if owner is NO_SPACE:
            return self._done(api, args, NO_HANDLE)  # §7: no segment mounted anywhere
        if parts is not None:
            if not self._transfer_ok(c, parts):
                return self._done(api, args, TRANSFER_FAIL)
            data = _read_parts(self.node, parts)
            size = sum(n for _, n in parts)
        c.cluster.objects[key] = StoredObject(size, data, owner)
        return self._done(api, args, OK)

    def _placement(self, c: Client) -> object | None:
        """The client whose segment takes a new object: this one's if it mounted one, else
        the first mounted (the real master picks at random among several: a named
        divergence); None for another node's, NO_SPACE when there is none (§7)."""
        if not self.fake.profile.objects_live_in_segments:
            return None
        if c in c.cluster.segments:
            return c
        if c.cluster.segments:
            return c.cluster.segments[0]
        return None if c.cluster.external_segments else NO_SPACE

    def get_one(self, key: str, parts: Parts, api: str = "get_into") -> int:
        """One read: the checks, then the copy into ``parts``."""
        code, obj = self._read_check(key, parts, api)
        if obj is None:
            return code
        return self._read_into(obj, key, parts, api, exact=False)

    def _read_check(self, key: str, parts: Parts, api: str) -> tuple[int, StoredObject | None]:
        """The per-entry part of a read: (code, None) when it fails, (0, object) when the
        copy may go ahead."""
        args = (key, *(parts[0] if parts else ()))
        c = self.client
        if c is None:
            return self.no_client(api), None
        injected = self._fault("get", api, args)
        if injected is not None:
            return self._done(api, args, injected, True), None
        if c.dummy and self.fake.profile.dummy_refuses_process_memory:
            return self._done(api, args, INVALID), None   # §7 [inferred: before the lookup]
        obj = self.lookup(key)
        if obj is None:
            return self._done(api, args, NOT_FOUND), None
        if not parts or sum(n for _, n in parts) < obj.size:
            return self._done(api, args, INVALID), None   # §1.3: "Buffer too small"
        return OK, obj

    def _read_into(self, obj: StoredObject, key: str, parts: Parts, api: str, *,
                   exact: bool) -> int:
        """The copy. ``exact``: the multi-buffer read, whose buffers must add up to the
        object's size: more is TRANSFER_FAIL (§7.4)."""
        c = self.client
        assert c is not None
        args = (key, *(parts[0] if parts else ()))
        if exact and sum(n for _, n in parts) > obj.size:
            return self._done(api, args, TRANSFER_FAIL)
        ranges: list[tuple[int, int]] = []
        left = obj.size
        for ptr, n in parts:
            take = min(n, left)
            ranges.append((ptr, take))
            left -= take
        if not self._transfer_ok(c, ranges):
            return self._done(api, args, TRANSFER_FAIL)
        off = 0
        for ptr, n in ranges:
            if n:
                memory.write(self.node.space, ptr,
                             None if obj.data is None else obj.data[off:off + n])
            off += n
        self._record(api, args, obj.size)
        return obj.size

    def _batch_get(self, api: str, keys: list[str], parts: list[list[tuple[int, int]]],
                   multi: bool) -> list[int]:
        """§7.4: every entry is checked on its own (miss -704, small -600); the entries of
        one key that pass alias: the copy goes into the last one's buffers only, and its
        result (bytes, or -800 for a multi-buffer read that is too big) is every one's."""
        out = [OK] * len(keys)
        passed: dict[str, list[int]] = {}
        objs: dict[str, StoredObject] = {}
        for i, k in enumerate(keys):
            code, obj = self._read_check(k, parts[i], api)
            if obj is None:
                out[i] = code
                continue
            passed.setdefault(k, []).append(i)
            objs[k] = obj
        for k, idx in passed.items():
            code = self._read_into(objs[k], k, parts[idx[-1]], api, exact=multi)
            for i in idx:
                out[i] = code
        return out

    def batch(self, kind: str, keys: list[str], parts: list[list[tuple[int, int]]],
              config: ReplicateConfig | None, *, multi: bool = False) -> list[int]:
        """Per-key results; duplicate keys alias to one operation (§1.3).

        ``multi`` records the call under the ``_multi_buffers`` API that was really called.
        """
        api = "batch_put_from" if kind == "put" else "batch_get_into"
        if multi:
            api += "_multi_buffers"
        if self.client is None:
            self.no_client(api)
            return [INVALID] * len(keys)
        if kind == "get":
            return self._batch_get(api, keys, parts, multi)
        if multi:
            # §7: entries run in order: a duplicate finds the first one's object (0)
            return [self.put_one(k, parts[i], sum(n for _, n in parts[i]), config, api=api,
                                 batch=True) for i, k in enumerate(keys)]
        winner: dict[str, int] = {}
        for i, k in enumerate(keys):
            if self.fake.profile.duplicate_key_winner == "last" or k not in winner:
                winner[k] = i
        results: dict[str, int] = {}
        for k, i in sorted(winner.items(), key=lambda kv: kv[1]):
            results[k] = self.put_one(k, parts[i], sum(n for _, n in parts[i]), config,
                                      api=api, batch=True)
        return [results[k] for k in keys]

    def get_bytes(self, key: str) -> bytes:
        c = self.client
        if c is None or self._fault("get", "get", (key,)) is not None:
            return b""
        obj = self.lookup(key)
        if obj is None:
            return b""
        if obj.data is None:
            raise TypeError(f"object {key!r} was put from virtual memory: it has no bytes")
        return obj.data

    def exists(self, key: str, api: str = "is_exist") -> int:
        if self.client is None:
            return self.no_client(api)
        injected = self._fault("is_exist", "is_exist", (key,))
        if injected is not None:
            return self._done("is_exist", (key,), injected, True)
        return 1 if self.lookup(key) is not None else 0

    def remove(self, key: str, force: bool = False, api: str = "remove") -> int:
        c = self.client
        if c is None:
            return self.no_client(api)
        injected = self._fault("remove", "remove", (key,))
        if injected is not None:
            return self._done("remove", (key,), injected, True)
        obj = c.cluster.objects.get(key)
        if obj is None:
            return self._done("remove", (key,), NOT_FOUND)
        if not force and c.cluster.leased(obj):
            return self._done("remove", (key,), HAS_LEASE)   # §7: the object stays
        del c.cluster.objects[key]
        return self._done("remove", (key,), OK)


NO_SPACE = object()


def _read_parts(node: Node, parts: Parts) -> bytes | None:
    """The concatenated bytes of the parts, None if any part is virtual memory."""
    chunks = []
    for ptr, n in parts:
        data = memory.read(node.space, ptr, n)
        if data is None:
            return None
        chunks.append(data)
    return b"".join(chunks)

