"""``/dev/shm`` of a fake host, as code reaches it: ``os.open``, ``ftruncate``,
``posix_fallocate``, ``mmap``, ``madvise``, ``unlink``, run unmodified.

Serving engines share a KV region between ranks as a file under ``/dev/shm``: one rank creates
it (``os.open(O_CREAT | O_EXCL)``), sizes it (``os.ftruncate``, maybe ``os.posix_fallocate``),
every rank maps it (``mmap.mmap(fd, size, MAP_SHARED)``), populates its pages
(``madvise(MADV_POPULATE_WRITE)``), takes its address and ``cudaHostRegister``s it, and the
creator unlinks it. Under :func:`patch_shm` those calls on ``/dev/shm`` paths answer from
the fake host (:class:`~.fake_host.RankMemory`): names, sizes, EEXIST on ``O_EXCL`` (a stale
file from a crashed run included), ENOSPC from ``posix_fallocate``, EFAULT from
``MADV_POPULATE_WRITE`` past what tmpfs holds (docs/host.md §2, §6). Every other path is
left to the real system.

How TiB cost no RAM: each host file is backed by a sparse real file in ``backing`` (a folder
every rank of the host shares, so ranks see each other's bytes), sized by the real
``ftruncate`` but never allocated: ``posix_fallocate`` and ``MADV_POPULATE_WRITE`` charge the
host and leave the real file alone. The map is a real ``mmap`` of that file (a subclass of
``mmap.mmap``, so ``memoryview``, ``numpy``, ``torch.frombuffer`` and ``ctypes`` all take its
real address), and the mapping is announced to the host, so a ``cudaHostRegister`` of it pins
that file's pages on the host (:mod:`kvreg.fakes.cuda.host_pins`).

What is not modelled fails loudly (:class:`ShmNotModelled`): sub-folders of ``/dev/shm``,
renames and links there, ``os.scandir`` of it, read-only mappings, and reading more than
``READ_LIMIT`` bytes of a mapping into a ``bytes`` object (a real object of that size).
Stores the code makes through the mapping itself reach the sparse backing file, not the host:
no fault hook sees them (docs/host.md §6).
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import io
import mmap
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..not_modelled import NotModelled
from ..patching import patch_attr
from .fake_host import OomKilled, RankMemory

__all__ = ["MADV_POPULATE_WRITE", "READ_LIMIT", "SHM_ROOT", "ShmFiles", "ShmMap",
           "ShmNotModelled", "patch_shm"]

SHM_ROOT = "/dev/shm"
# madvise(2): MADV_POPULATE_WRITE is 23 (Linux 5.14); Python 3.11's mmap module lacks the name
MADV_POPULATE_WRITE = int(getattr(mmap, "MADV_POPULATE_WRITE", 23))
READ_LIMIT = 64 << 20     # bytes of a mapping copied into one real bytes object, at most


class ShmNotModelled(NotModelled):
    """A use of ``/dev/shm`` the fake host does not model: kvreg's gap, never the code's."""

    docs = "docs/host.md §6 (what the fake host does not model)"


@dataclass
class ShmFiles:
    """What one rank process holds of ``/dev/shm`` while :func:`patch_shm` is on."""

    memory: RankMemory
    backing: Path
    root: str = SHM_ROOT
    on_oom: str = "raise"                 # "raise" OomKilled, or "kill" the process (SIGKILL)
    opened: dict[int, tuple[str, tuple[int, int]]] = field(default_factory=dict)
    # live mappings the host knows: address -> (file name, length); ``maps`` made through
    # ``mmap.mmap``, ``found`` made otherwise (libc's mmap through ctypes) and read from
    # /proc/self/maps
    maps: dict[int, tuple[str, int]] = field(default_factory=dict)
    found: dict[int, tuple[str, int]] = field(default_factory=dict)

    # -- paths and descriptors ---------------------------------------------------------------
    def name_of(self, path: Any) -> str | None:
        """The host file's name for a ``/dev/shm`` path, None for any other path."""
        if isinstance(path, int) or not isinstance(path, str | bytes | os.PathLike):
            return None
        full = os.path.abspath(os.fsdecode(path))
        if full == self.root or not full.startswith(self.root + "/"):
            return None
        name = full[len(self.root) + 1:]
        if "/" in name:
            raise ShmNotModelled(f"{full}: folders under {self.root} are not modelled by the "
                                 "fake host", api="/dev/shm sub-folder")
        return name

    def backing_path(self, name: str) -> str:
        return str(self.backing / name)

    def file_of(self, fd: int) -> str | None:
        """The host file behind descriptor ``fd``, checked against the descriptor's inode
        (a descriptor closed by ``io`` and reused for another file is not ours)."""
        entry = self.opened.get(fd)
        if entry is None:
            return None
        try:
            st = _REAL["fstat"](fd)
        except OSError:
            self.opened.pop(fd, None)
            return None
        if (st.st_dev, st.st_ino) != entry[1]:
            self.opened.pop(fd, None)
            return None
        return entry[0]

    def host_size(self, name: str) -> int | None:
        info = self.memory.host.shm_files().get(name)
        return None if info is None else int(info["size"])

    # -- the calls -----------------------------------------------------------------------------
    def open(self, name: str, flags: int, mode: int) -> int:
        """``os.open`` of ``/dev/shm/<name>``: the host decides existence and EEXIST."""
        if flags & getattr(os, "O_DIRECTORY", 0) or flags & getattr(os, "O_PATH", 0):
            raise ShmNotModelled(f"os.open of {self.root}/{name} with O_DIRECTORY or O_PATH "
                                 "is not modelled by the fake host", api="os.open")
        if flags & os.O_CREAT:
            self.memory.shm_create(name, exclusive=bool(flags & os.O_EXCL))
        elif self.host_size(name) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT),
                                    f"{self.root}/{name}")
        if flags & os.O_TRUNC:
            self.memory.shm_ftruncate(name, 0)
        real_flags = (flags & ~(os.O_EXCL | os.O_TRUNC)) | os.O_CREAT
        self.backing.mkdir(parents=True, exist_ok=True)
        fd: int = _REAL["open"](self.backing_path(name), real_flags, mode)
        size = self.host_size(name) or 0
        st = _REAL["fstat"](fd)
        if st.st_size != size:
            _REAL["ftruncate"](fd, size)       # sparse: the host's size, no allocation
        self.opened[fd] = (name, (st.st_dev, st.st_ino))
        return fd

    def ftruncate(self, name: str, fd: int, size: int) -> None:
        with _as_errno():
            self.memory.shm_ftruncate(name, size)
        _REAL["ftruncate"](fd, size)

    def fallocate(self, name: str, fd: int, offset: int, length: int) -> None:
        """Charged on the host (ENOSPC / ENOMEM as it says); the real file only grows."""
        with _as_errno():
            self.memory.shm_fallocate(name, offset, length)
        if _REAL["fstat"](fd).st_size < offset + length:
            _REAL["ftruncate"](fd, offset + length)

    def unlink(self, name: str) -> None:
        self.sync_maps()
        self.memory.shm_unlink(name)
        with suppress(FileNotFoundError):
            _REAL["unlink"](self.backing_path(name))

    def stat(self, name: str) -> os.stat_result:
        size = self.host_size(name)
        if size is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT),
                                    f"{self.root}/{name}")
        path = self.backing_path(name)
        if not os.path.lexists(path):
            fd = self.open(name, os.O_RDWR, 0o600)    # a file from an earlier run: backed now
            self.close(fd)
        st: os.stat_result = _REAL["stat"](path)
        return st

    def close(self, fd: int) -> None:
        self.sync_maps()
        self.opened.pop(fd, None)
        _REAL["close"](fd)

    def statvfs(self) -> os.statvfs_result:
        """statvfs of /dev/shm: its tmpfs size and what the host's files leave free (what
        ``shutil.disk_usage`` reports)."""
        real = _REAL["statvfs"](self.root) if os.path.isdir(self.root) else None
        size = self.memory.host.limits.shm_size
        free = max(size - self.memory.host.totals().shm, 0) // PAGE
        files = real.f_files if real is not None else 0
        ffree = real.f_ffree if real is not None else 0
        return os.statvfs_result((PAGE, PAGE, size // PAGE, free, free, files, ffree, ffree,
                                  0, 255))

    # -- mappings the code made without mmap.mmap ----------------------------------------------
    def sync_maps(self) -> None:
        """Tell the host of the mappings of /dev/shm files that ``/proc/self/maps`` shows and
        it does not know (libc's ``mmap`` called through ctypes, ``MAP_FIXED`` over a
        reservation), and of those gone; called at every intercepted call, pin and populate,
        so a mapping is seen before its name is unlinked by any later call."""
        seen = _backing_maps(self.backing)
        for addr, (name, length, offset) in seen.items():
            if addr in self.found or self._covered(addr, length):
                continue
            try:
                self.memory.map_shm(name, addr, length, offset, unlinked=True)
            except FileNotFoundError:
                raise ShmNotModelled(f"a mapping of {self.root}/{name} made without "
                                     "mmap.mmap was seen only after its file was gone",
                                     api="mmap (libc)") from None
            self.found[addr] = (name, length)
        for addr in [a for a in self.found if a not in seen]:
            del self.found[addr]
            with suppress(ValueError):
                self.memory.unmap_shm(addr)

    @staticmethod
    def _covered(addr: int, length: int) -> bool:
        """Inside a mapping made through ``mmap.mmap`` (by any rank of this process)."""
        return any(base <= addr and addr + length <= base + size
                   for base, size in _PY_MAPS.items())

    def backs(self, addr: int, length: int) -> bool:
        """Whether ``[addr, addr + length)`` overlaps a mapping of a /dev/shm file. A hit in
        what is known is taken as it is; a miss reads /proc/self/maps first (4 ms in a torch
        process), since a miss means real pages would be touched."""
        def hit() -> bool:
            return any(base < addr + length and addr < base + size
                       for base, (_, size) in (*self.maps.items(), *self.found.items()))
        if hit():
            return True
        self.sync_maps()
        return hit()

    def populate(self, addr: int, length: int) -> None:
        """``madvise(MADV_POPULATE_WRITE)``: the host faults the pages in (EFAULT past what
        tmpfs holds); an OOM kill of this rank ends the process when ``on_oom`` is "kill"."""
        try:
            with _as_errno():
                self.memory.populate(addr, length)
        except OomKilled:
            if self.on_oom == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise


@contextmanager
def _as_errno() -> Iterator[None]:
    """An ``OSError`` as the real call raises it: errno and text, no file name (CPython's
    ``posix_error`` for ``ftruncate`` / ``posix_fallocate``, ``mmap.madvise``)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None or exc.errno is None:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno)) from None


_REAL: dict[str, Callable[..., Any]] = {
    "open": os.open, "close": os.close, "ftruncate": os.ftruncate, "fstat": os.fstat,
    "stat": os.stat, "lstat": os.lstat, "unlink": os.unlink, "remove": os.remove,
    "listdir": os.listdir, "posix_fallocate": os.posix_fallocate, "truncate": os.truncate,
    "builtins_open": builtins.open, "statvfs": os.statvfs,
}
PAGE = 4096


def _backing_maps(backing: Path) -> dict[int, tuple[str, int, int]]:
    """The process's mappings of files in ``backing``: address -> (name, length, offset)."""
    prefix = f"{backing}/"
    found: dict[int, tuple[str, int, int]] = {}
    with _REAL["builtins_open"]("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) < 6:
                continue
            path = parts[5].rstrip("\n").removesuffix(" (deleted)")
            if not path.startswith(prefix):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            found[lo] = (path[len(prefix):], hi - lo, int(parts[2], 16))
    return found
_ACTIVE: list[ShmFiles] = []       # innermost last
_PY_MAPS: dict[int, int] = {}      # every live ShmMap of a /dev/shm file: address -> length


def _files() -> ShmFiles | None:
    return _ACTIVE[-1] if _ACTIVE else None


def _shm_name(path: Any) -> tuple[ShmFiles, str] | None:
    files = _files()
    if files is None:
        return None
    name = files.name_of(path)
    return None if name is None else (files, name)


def _shm_fd(fd: Any) -> tuple[ShmFiles, str] | None:
    files = _files()
    if files is None or not isinstance(fd, int):
        return None
    name = files.file_of(fd)
    return None if name is None else (files, name)


# -- the mapping ---------------------------------------------------------------------------------
def _map_args(fileno: int, length: int, flags: int = mmap.MAP_SHARED,
              prot: int = mmap.PROT_READ | mmap.PROT_WRITE, access: int = mmap.ACCESS_DEFAULT,
              offset: int = 0) -> tuple[int, int, int, int]:
    """mmap.mmap's Unix signature, read once: (length, flags, prot, access, offset)."""
    del fileno
    return flags, prot, access, offset


def _address(obj: mmap.mmap) -> int | None:
    """A writable map's address (None for a read-only one, whose buffer ctypes refuses)."""
    try:
        anchor = ctypes.c_char.from_buffer(obj)
    except TypeError:
        return None
    addr = ctypes.addressof(anchor)
    del anchor                         # releases the buffer export, so close() works
    return addr


class ShmMap(mmap.mmap):
    """``mmap.mmap`` while :func:`patch_shm` is on: a map of a ``/dev/shm`` file is a real map
    of its sparse backing, announced to the host; any other map is a plain ``mmap``."""

    _kvreg_addr: int | None = None
    _kvreg_files: ShmFiles | None = None

    def __new__(cls, fileno: int, length: int, *args: Any, **kwargs: Any) -> ShmMap:
        hit = _shm_fd(fileno) if fileno != -1 else None
        if hit is None:
            return super().__new__(cls, fileno, length, *args, **kwargs)
        files, name = hit
        flags, prot, access, offset = _map_args(fileno, length, *args, **kwargs)
        read_only = access == mmap.ACCESS_READ or (access == mmap.ACCESS_DEFAULT
                                                   and not prot & mmap.PROT_WRITE)
        if read_only or access == mmap.ACCESS_COPY or flags & mmap.MAP_PRIVATE:
            raise ShmNotModelled(f"a read-only or private mmap of {files.root}/{name} is not "
                                 "modelled by the fake host", api="mmap.mmap")
        obj = super().__new__(cls, fileno, length, *args, **kwargs)
        addr = _address(obj)
        assert addr is not None            # a shared writable map: ctypes takes its buffer
        files.memory.map_shm(name, addr, len(obj), offset)
        files.maps[addr] = (name, len(obj))
        _PY_MAPS[addr] = len(obj)
        obj._kvreg_addr, obj._kvreg_files = addr, files
        return obj

    def _forget(self) -> None:
        addr, files = self._kvreg_addr, self._kvreg_files
        if addr is None or files is None:
            return
        self._kvreg_addr = None
        files.maps.pop(addr, None)
        _PY_MAPS.pop(addr, None)
        with suppress(ValueError, OomKilled):
            files.memory.unmap_shm(addr)

    def close(self) -> None:
        super().close()            # BufferError while views exist: nothing is unmapped then
        self._forget()

    def __del__(self) -> None:
        with suppress(Exception):
            self._forget()

    def madvise(self, option: int, start: int = 0, length: int | None = None) -> None:
        size = len(self)
        if length is None:
            length = size - start
        files = self._kvreg_files or _files()
        if option != MADV_POPULATE_WRITE or files is None or start < 0 or start >= size:
            return super().madvise(option, start, length)
        addr = self._kvreg_addr if self._kvreg_addr is not None else _address(self)
        if self._kvreg_addr is None and (addr is None or not files.backs(addr + start,
                                                                         length)):
            return super().madvise(option, start, length)   # no /dev/shm page: real
        if length < 0:
            raise ValueError("madvise length invalid")
        if start % mmap.PAGESIZE:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))   # madvise(2): unaligned
        assert addr is not None
        files.populate(addr + start, min(length, size - start))
        return None

    def read(self, n: int | None = -1) -> bytes:
        want = len(self) - self.tell() if n is None or n < 0 else n
        if self._kvreg_addr is not None and want > READ_LIMIT:
            raise ShmNotModelled(f"reading {want} bytes of a /dev/shm mapping into one bytes "
                                 f"object (over {READ_LIMIT}) would take that much real RAM: "
                                 "not modelled by the fake host", api="mmap.read")
        return super().read(n)


# -- the os functions ----------------------------------------------------------------------------
def _open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    hit = _shm_name(path) if dir_fd is None else None
    if hit is None:
        return int(_REAL["open"](path, flags, mode, dir_fd=dir_fd))
    return hit[0].open(hit[1], flags, mode)


def _close(fd: int) -> None:
    files = _files()
    if files is not None and fd in files.opened:
        files.close(fd)
        return
    _REAL["close"](fd)


def _ftruncate(fd: int, length: int) -> None:
    hit = _shm_fd(fd)
    if hit is None:
        _REAL["ftruncate"](fd, length)
        return
    hit[0].ftruncate(hit[1], fd, length)


def _posix_fallocate(fd: int, offset: int, length: int) -> None:
    hit = _shm_fd(fd)
    if hit is None:
        _REAL["posix_fallocate"](fd, offset, length)
        return
    hit[0].fallocate(hit[1], fd, offset, length)


def _truncate(path: Any, length: int) -> None:
    hit = _shm_name(path)
    if hit is None:
        _REAL["truncate"](path, length)
        return
    files, name = hit
    fd = files.open(name, os.O_RDWR, 0o600)
    try:
        files.ftruncate(name, fd, length)
    finally:
        files.close(fd)


def _unlinker(real: str) -> Callable[..., None]:
    def unlink(path: Any, *, dir_fd: int | None = None) -> None:
        hit = _shm_name(path) if dir_fd is None else None
        if hit is None:
            _REAL[real](path, dir_fd=dir_fd)
            return
        hit[0].unlink(hit[1])
    return unlink


def _stater(real: str) -> Callable[..., os.stat_result]:
    def stat_(path: Any, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> os.stat_result:
        hit = _shm_name(path) if dir_fd is None else None
        if hit is None:
            if real == "lstat":
                return _REAL[real](path, dir_fd=dir_fd)   # type: ignore[no-any-return]
            return _REAL[real](path, dir_fd=dir_fd,       # type: ignore[no-any-return]
                               follow_symlinks=follow_symlinks)
        return hit[0].stat(hit[1])
    return stat_


def _listdir(path: Any = ".") -> list[Any]:
    files = _files()
    if files is None or isinstance(path, int) or os.path.abspath(os.fsdecode(path)) != files.root:
        return list(_REAL["listdir"](path))
    names = sorted(files.memory.host.shm_files())
    return [os.fsencode(n) for n in names] if isinstance(path, bytes) else names


def _refuser(real: Callable[..., Any], api: str) -> Callable[..., Any]:
    """A call that names a /dev/shm path and that the fake host does not model: loud."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        files = _files()
        for arg in args[:2]:
            if files is not None and (files.name_of(arg) is not None
                                      or _is_root(files, arg)):
                raise ShmNotModelled(f"{api} of {os.fsdecode(arg)} is not modelled by the "
                                     "fake host", api=api)
        return real(*args, **kwargs)
    return refuse


def _is_root(files: ShmFiles, arg: Any) -> bool:
    return (isinstance(arg, str | bytes | os.PathLike)
            and os.path.abspath(os.fsdecode(arg)) == files.root)


_MODE_FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
               "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL, "a": os.O_WRONLY | os.O_CREAT |
               os.O_APPEND}


def _open_flags(mode: str) -> int:
    flags = next((f for c, f in _MODE_FLAGS.items() if c in mode), os.O_RDONLY)
    if "+" in mode:
        flags = (flags & ~(os.O_WRONLY | os.O_RDONLY)) | os.O_RDWR
    return flags


def _builtin_opener(inner: Callable[..., Any]) -> Callable[..., Any]:
    """``open`` / ``io.open``: a /dev/shm path through the host, anything else to ``inner``
    (the real ``open``, or the host-files patch of :mod:`.meminfo`)."""
    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        hit = _shm_name(file)
        if hit is None:
            return inner(file, mode, *args, **kwargs)
        files, name = hit
        fd = files.open(name, _open_flags(mode), 0o666)
        return inner(fd, mode, *args, **kwargs)
    return open_


def _shm_open(path: str, flags: int, mode: int = 0o777) -> int:
    """``_posixshmem.shm_open`` (multiprocessing.shared_memory): a name under /dev/shm."""
    files = _files()
    if files is None:
        raise RuntimeError("no fake /dev/shm is patched in")
    return _open(files.root + "/" + path.lstrip("/"), flags, mode)


def _shm_unlink(path: str) -> None:
    files = _files()
    if files is None:
        raise RuntimeError("no fake /dev/shm is patched in")
    _unlinker("unlink")(files.root + "/" + path.lstrip("/"))


def _os_patches() -> dict[str, Callable[..., Any]]:
    return {
        "open": _open, "close": _close, "ftruncate": _ftruncate,
        "posix_fallocate": _posix_fallocate, "truncate": _truncate,
        "unlink": _unlinker("unlink"), "remove": _unlinker("remove"),
        "stat": _stater("stat"), "lstat": _stater("lstat"), "listdir": _listdir,
        "rename": _refuser(os.rename, "os.rename"), "replace": _refuser(os.replace, "os.replace"),
        "link": _refuser(os.link, "os.link"), "symlink": _refuser(os.symlink, "os.symlink"),
        "mkdir": _refuser(os.mkdir, "os.mkdir"), "scandir": _refuser(os.scandir, "os.scandir"),
        "rmdir": _refuser(os.rmdir, "os.rmdir"), "statvfs": _statvfs,
    }


def _statvfs(path: Any) -> os.statvfs_result:
    files = _files()
    if files is not None and _is_root(files, path):
        return files.statvfs()
    return _REAL["statvfs"](path)  # type: ignore[no-any-return]


@contextmanager
def patch_shm(memory: RankMemory, backing: str | os.PathLike[str] | None = None, *,
              root: str = SHM_ROOT, on_oom: str = "raise") -> Iterator[ShmFiles]:
    """For the block, ``/dev/shm`` (``root``) is rank ``memory``'s view of its fake host:
    ``os`` calls, ``open``, ``mmap.mmap`` and ``_posixshmem`` on its paths answer from the
    host; ``backing`` (default: beside the host's state file) holds the sparse files every
    rank of the host maps. ``on_oom="kill"``: an OOM kill of this rank SIGKILLs the process,
    as the kernel would (for rank processes; the default raises ``OomKilled``). Nests."""
    if on_oom not in ("raise", "kill"):
        raise ValueError(f"on_oom must be 'raise' or 'kill'; got {on_oom!r}")
    where = Path(backing) if backing is not None else Path(f"{memory.host.state.path}.shm")
    files = ShmFiles(memory, where, root.rstrip("/") or "/", on_oom)
    with ExitStack() as stack:
        for name, fn in _os_patches().items():
            stack.enter_context(patch_attr(os, name, fn))
        stack.enter_context(patch_attr(mmap, "mmap", ShmMap))
        opener = _builtin_opener(builtins.open)
        stack.enter_context(patch_attr(builtins, "open", opener))
        stack.enter_context(patch_attr(io, "open", opener))
        with suppress(ImportError):
            import _posixshmem  # type: ignore[import-not-found]

            stack.enter_context(patch_attr(_posixshmem, "shm_open", _shm_open))
            stack.enter_context(patch_attr(_posixshmem, "shm_unlink", _shm_unlink))
        begin_pin = memory.begin_pin

        def pin_seen(addr: int, nbytes: int) -> Any:
            files.sync_maps()          # a libc-level mapping is pinned as the file's pages
            return begin_pin(addr, nbytes)

        stack.enter_context(patch_attr(memory, "begin_pin", pin_seen))
        _ACTIVE.append(files)
        try:
            yield files
        finally:
            _ACTIVE.remove(files)
