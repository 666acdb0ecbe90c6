"""``MooncakeDistributedStore``: the store's Python API on the fake fabric (§1.1-§1.3, §1.5).

Every method returns what the pybind binding returns: 0 or a byte count on success, the
negative ``ErrorCode`` on failure, lists of those for batch calls; nothing raises for a
store error (§1.1). Before ``setup`` (and after ``close``) most real methods dereference
a null client and segfault the process (§7, checked on 0.3.13.post1): the fake raises
:class:`~.errors.StoreCrash` there, so code that does this fails loudly. The methods that
really check return what they return: ``put_from`` -600, ``get`` ``b""``,
``batch_put_from_multi_buffers`` ``[]``, ``close`` 0, ``health_check`` 1.

Data really moves for process memory (tracked or not: ``register_buffer`` checks the range
is mapped, as pinning does), so put-then-get round trips can be compared byte for byte;
objects put from virtual memory have a size but no bytes (see
:mod:`kvreg.fakes.verbs.memory`).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from ..verbs.errors import NotModelledError
from .config import ReplicateConfig
from .deployment import Deployment
from .errors import ErrorCode
from .session import Client, Session

__all__ = ["MooncakeDistributedStore", "bind_store"]

INVALID = int(ErrorCode.INVALID_PARAMS)
NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)

# real methods the fake does not model (§1.2 "others")
_NOT_MODELLED = frozenset({
    "get_buffer", "batch_get_buffer", "put_batch", "put_parts", "get_batch", "upsert",
    "upsert_parts", "upsert_from", "batch_upsert_from", "get_into_ranges", "put_tensor",
    "get_tensor", "batch_put_tensor", "batch_get_tensor", "alloc_from_mem_pool",
    "mount_segment", "batch_get_session_start", "batch_get_session_end",
    "batch_put_session_start", "batch_put_session_end", "batch_put_session_revoke",
    "batch_get_into_multi_buffer_ranges", "batch_put_from_multi_buffer_ranges",
})


def _ints(values: Any, what: str) -> list[int]:
    if not isinstance(values, list | tuple):
        raise TypeError(f"{what}: expected a list of int, got {type(values).__name__}")
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{what}: expected a list of int, got an item of type "
                            f"{type(v).__name__}")
    return [int(v) for v in values]


def _keys(keys: Any) -> list[str]:
    if not isinstance(keys, list | tuple) or not all(isinstance(k, str) for k in keys):
        raise TypeError("keys: expected a list of str")
    return list(keys)


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{what}: expected a non-negative int, got {value!r}")
    return int(value)


class MooncakeDistributedStore:
    """The fake store client; build it through ``FakeMooncake`` (``fake.store()``)."""

    _fake: ClassVar[Deployment | None] = None
    _node_name: ClassVar[str | None] = None

    def __init__(self) -> None:
        fake = type(self)._fake
        if fake is None:
            raise RuntimeError("this MooncakeDistributedStore class belongs to no "
                               "FakeMooncake; use fake.store() or fake.patch()")
        self._owner: Deployment = fake
        self._s = Session(fake, fake.fabric.node(type(self)._node_name))
        fake.stores.append(self)

    def __getattr__(self, name: str) -> Any:
        # a real method the fake does not model exists (hasattr is True, as on the real
        # class) but raises NotModelledError naming the coverage when called
        if name in _NOT_MODELLED:
            def not_modelled(*args: object, **kwargs: object) -> Any:
                raise NotModelledError(f"kvreg's fake MooncakeDistributedStore does not model "
                                       f"{name}() (COVERAGE: the fake's modelled methods are "
                                       "those of kvreg.fakes.mooncake.store)")
            return not_modelled
        raise AttributeError(f"'MooncakeDistributedStore' object has no attribute {name!r}")

    @property
    def client(self) -> Client | None:
        """The fake client state after setup (None before setup and after close)."""
        return self._s.client

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self, *args: Any, **kwargs: Any) -> int:
        """Positional overload (7 required args) or ``setup(config_dict)`` (§1.2)."""
        if len(args) == 1 and not kwargs and isinstance(args[0], dict):
            return self._s.setup_from_dict(args[0])
        return self._s.setup(*args, **kwargs)

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int,
                    server_address: str) -> int:
        """A client of a standalone ``mooncake_client``: tcp, no devices; it refuses ordinary
        process memory (register_buffer -1, put_from/get_into -600, §7)."""
        return self._s.setup_dummy(server_address)

    def close(self) -> int:
        """0 if never set up; else tear everything down (MRs included) and drop the client."""
        return self._s.close()

    def health_check(self) -> int:
        """0 healthy, 1 not initialized or closed (§1.2)."""
        return 0 if self._s.client is not None else 1

    # -- registration ---------------------------------------------------------------------
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Register a local buffer: MRs on every device; 0 or -600 (§1.5)."""
        return self._s.register_buffer(_int(buffer_ptr, "buffer_ptr"), _int(size, "size"))

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Unregister by exact base address; 0 or -600 (§1.5 step 5)."""
        return self._s.unregister_buffer(_int(buffer_ptr, "buffer_ptr"))

    # -- put ------------------------------------------------------------------------------
    def put(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Copy ``value`` (buffer protocol) into the store; needs no registration."""
        if self._s.client is None:
            return self._s.no_client("put")
        data = bytes(memoryview(value).cast("B"))
        return self._s.put_one(key, None, len(data), config, data=data)

    def put_from(self, key: str, buffer_ptr: int, size: int,
                 config: ReplicateConfig | None = None) -> int:
        """Put ``size`` bytes from a registered buffer (size 0: warning, returns 0)."""
        return self._s.put_one(key, [(_int(buffer_ptr, "buffer_ptr"), _int(size, "size"))],
                               size, config)

    def batch_put_from(self, keys: list[str], buffer_ptrs: list[int], sizes: list[int],
                       config: ReplicateConfig | None = None) -> list[int]:
        keys = _keys(keys)
        ptrs, lens = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if self._s.client is None:
            self._s.no_client("batch_put_from")
        if not len(keys) == len(ptrs) == len(lens):
            return [INVALID] * len(keys)       # §1.3: length mismatch -> every entry -600
        parts = [[(p, n)] for p, n in zip(ptrs, lens, strict=True)]
        return self._s.batch("put", keys, parts, config)

    def batch_put_from_multi_buffers(self, keys: list[str], all_buffer_ptrs: list[list[int]],
                                     all_sizes: list[list[int]],
                                     config: ReplicateConfig | None = None) -> list[int]:
        """One object per key from several buffers; ``[]`` before setup (§1.2)."""
        if self._s.client is None:
            return []
        keys = _keys(keys)
        parts = self._multi(keys, all_buffer_ptrs, all_sizes)
        if parts is None:
            return [INVALID] * len(keys)
        return self._s.batch("put", keys, parts, config, multi=True)

    # -- get ------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The object's bytes; ``b""`` on a miss or error (§1.2)."""
        return self._s.get_bytes(key)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Bytes read (> 0) or a negative ErrorCode; ``size`` is the buffer capacity."""
        return self._s.get_one(key, [(_int(buffer_ptr, "buffer_ptr"), _int(size, "size"))])

    def batch_get_into(self, keys: list[str], buffer_ptrs: list[int],
                       sizes: list[int]) -> list[int]:
        keys = _keys(keys)
        ptrs, lens = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if self._s.client is None:
            self._s.no_client("batch_get_into")
        if not len(keys) == len(ptrs) == len(lens):
            return [INVALID] * len(keys)
        parts = [[(p, n)] for p, n in zip(ptrs, lens, strict=True)]
        return self._s.batch("get", keys, parts, None)

    def batch_get_into_multi_buffers(self, keys: list[str], all_buffer_ptrs: list[list[int]],
                                     all_sizes: list[list[int]],
                                     prefer_alloc_in_same_node: bool = False) -> list[int]:
        keys = _keys(keys)
        if self._s.client is None:
            self._s.no_client("batch_get_into_multi_buffers")
        parts = self._multi(keys, all_buffer_ptrs, all_sizes)
        if parts is None:
            return [INVALID] * len(keys)
        return self._s.batch("get", keys, parts, None, multi=True)

    @staticmethod
    def _multi(keys: list[str], all_ptrs: Any,
               all_sizes: Any) -> list[list[tuple[int, int]]] | None:
        if not isinstance(all_ptrs, list | tuple) or not isinstance(all_sizes, list | tuple):
            raise TypeError("all_buffer_ptrs/all_sizes: expected lists of lists of int")
        if not len(keys) == len(all_ptrs) == len(all_sizes):
            return None
        out = []
        for ptrs, sizes in zip(all_ptrs, all_sizes, strict=True):
            p, s = _ints(ptrs, "all_buffer_ptrs[i]"), _ints(sizes, "all_sizes[i]")
            # [inferred] a key whose pointer and size lists differ in length is invalid
            out.append(list(zip(p, s, strict=True)) if len(p) == len(s) else [])
        return out

    # -- queries and removal --------------------------------------------------------------
    def is_exist(self, key: str) -> int:
        """1 exists, 0 not, negative ErrorCode on error (§1.2)."""
        return self._s.exists(key)

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        keys = _keys(keys)
        if self._s.client is None:
            self._s.no_client("batch_is_exist")
        return [self._s.exists(k, "batch_is_exist") for k in keys]

    def get_size(self, key: str) -> int:
        """The object's size (a read: it takes a lease, §7), or -704."""
        if self._s.client is None:
            return self._s.no_client("get_size")
        obj = self._s.lookup(key)
        return obj.size if obj is not None else NOT_FOUND

    def remove(self, key: str, force: bool = False) -> int:
        """0; -704 for a missing key; -706 OBJECT_HAS_LEASE while a read's lease lasts,
        unless ``force`` (§7)."""
        return self._s.remove(key, bool(force))

    def batch_remove(self, keys: list[str], force: bool = False) -> list[int]:
        keys = _keys(keys)
        if self._s.client is None:
            self._s.no_client("batch_remove")
        return [self._s.remove(k, bool(force), "batch_remove") for k in keys]

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """The number removed (leased objects stay unless ``force``), or -600 for a bad
        pattern (§7)."""
        c = self._s.client
        if c is None:
            return self._s.no_client("remove_by_regex")
        try:
            pattern = re.compile(regex_pattern)
        except re.error:
            return INVALID
        victims = [k for k in c.cluster.objects if pattern.search(k)]
        return sum(1 for k in victims if self._s.remove(k, bool(force), "remove_by_regex") == 0)

    def remove_all(self, force: bool = False) -> int:
        """The number of objects removed: every object of the master, leased ones skipped
        unless ``force`` (§7)."""
        c = self._s.client
        if c is None:
            return self._s.no_client("remove_all")
        return sum(1 for k in list(c.cluster.objects)
                   if self._s.remove(k, bool(force), "remove_all") == 0)

    # -- helpers for tests (not part of the real API) -------------------------------------
    def registered_buffers(self) -> list[tuple[int, int]]:
        """(base, size) of every ``register_buffer`` still live (``registered_buffer_sizes_``)."""
        c = self._s.client
        return sorted(c.buffers.items()) if c is not None else []


def bind_store(fake: Deployment, node: str | None) -> type[MooncakeDistributedStore]:
    """The store class whose instances run on ``node`` of ``fake``'s fabric."""
    return type("MooncakeDistributedStore", (MooncakeDistributedStore,),
                {"_fake": fake, "_node_name": node, "__module__": "mooncake.store",
                 "__doc__": MooncakeDistributedStore.__doc__})

