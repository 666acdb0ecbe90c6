"""The differential suite's engine: one generated call sequence, run on the real store and on
the fake, compared call by call.

A sequence is a list of :class:`Op` over a small key space and two 256 KiB buffers (``src``
filled from the seed, ``dst`` zeroed before every read), so misses, duplicate keys, overlaps,
leases and re-setups come up often. :func:`generate` is seeded (``random.Random``): the same
seed gives the same sequence, in CI and on a laptop. :func:`run_side` executes it against
one store and records, per call, the return value and a digest of ``dst`` after reads; the
comparison is exact, or the difference is a named entry of :data:`DIVERGENCES` with its
evidence. Sequences never call a store without a client except through the calls that check
(docs/mooncake-verbs.md §7.1): the others segfault the real process.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BUF", "DIVERGENCES", "Comparison", "Differential", "Divergence", "Op", "Side",
           "compare", "generate", "run_side"]

BUF = 256 * 1024
KEYS = ("k0", "k1", "k2", "k3", "k4")
SIZES = (0, 1, 100, 4096, 65536 + 7, 100_000)
OFFSETS = (0, 4096, 8192, 65536, 4096 + 17)
PATTERNS = ("^k[01]$", "k", "^z", "(")
# §7.1: the calls that check for a client; the only ones a closed store gets
SAFE_CLOSED = ("setup", "put_from", "get", "batch_put_multi", "health_check", "close")


@dataclass(frozen=True)
class Op:
    """One call: a name of its side's call table (:func:`run_side`'s, or the engine suite's)
    and symbolic arguments."""

    name: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}{self.args!r}"


@dataclass
class Side:
    """One store and its two buffers; ``setup`` (re)sets it up, returning the code."""

    store: Any
    setup: Callable[[Any], int]
    src: np.ndarray
    dst: np.ndarray
    results: list[Any] = field(default_factory=list)

    def ptr(self, which: str, off: int) -> int:
        if which == "null":
            return 0
        return int((self.src if which == "src" else self.dst).ctypes.data) + int(off)


def _key(rng: random.Random) -> str:
    return rng.choice(KEYS)


def _ptr(rng: random.Random) -> tuple[str, int]:
    which = "null" if rng.random() < 0.04 else rng.choice(("src", "dst"))
    return which, rng.choice(OFFSETS)


def _op(rng: random.Random, open_: bool, lifecycle: bool) -> Op:
    if not open_:
        name = rng.choice(SAFE_CLOSED)
    else:
        name = rng.choices(
            ["register", "unregister", "put_from", "get_into", "put", "get", "batch_put",
             "batch_get", "batch_put_multi", "batch_get_multi", "is_exist", "batch_is_exist",
             "get_size", "remove", "batch_remove", "remove_all", "remove_by_regex", "close",
             "setup", "health_check"],
            weights=[8, 6, 12, 12, 4, 4, 6, 6, 5, 5, 4, 3, 4, 6, 2, 2, 2,
                     3 if lifecycle else 0, 2 if lifecycle else 0, 1])[0]
    if name == "register":
        return Op(name, (*_ptr(rng), rng.choice((0, 4096, 8192, 65536, 100))))
    if name == "unregister":
        return Op(name, _ptr(rng))
    if name == "put_from":
        return Op(name, (_key(rng), rng.choice(OFFSETS), rng.choice(SIZES)))
    if name == "get_into":
        return Op(name, (_key(rng), rng.choice(OFFSETS), rng.choice((*SIZES[1:], BUF // 2))))
    if name == "put":
        return Op(name, (_key(rng), rng.choice(OFFSETS), rng.choice(SIZES[1:])))
    if name in ("get", "is_exist", "get_size"):
        return Op(name, (_key(rng),))
    n = rng.randint(1, 4)
    keys = tuple(_key(rng) for _ in range(n))
    if name in ("batch_put", "batch_get"):
        offs = tuple(rng.choice(OFFSETS) for _ in keys)
        sizes = tuple(rng.choice(SIZES if name == "batch_put" else SIZES[1:]) for _ in keys)
        if rng.random() < 0.08:
            sizes = sizes[:-1]          # lists of different lengths
        return Op(name, (keys, offs, sizes))
    if name in ("batch_put_multi", "batch_get_multi"):
        parts = tuple(tuple((rng.choice(OFFSETS), rng.choice(SIZES[1:4]))
                            for _ in range(rng.randint(1, 3))) for _ in keys)
        return Op(name, (keys, parts))
    if name == "batch_is_exist":
        return Op(name, (keys,))
    if name in ("remove", "batch_remove"):
        return Op(name, (keys[0] if name == "remove" else keys, rng.random() < 0.3))
    if name == "remove_all":
        return Op(name, (rng.random() < 0.3,))
    if name == "remove_by_regex":
        return Op(name, (rng.choice(PATTERNS), rng.random() < 0.3))
    return Op(name)


def generate(seed: int, length: int = 30, *, lifecycle: bool = True) -> list[Op]:
    """A sequence of ``length`` calls on a set-up store; closed stores get safe calls.

    ``lifecycle=False`` leaves out close and setup: on the real store each costs about a
    second (close joins the client's threads), so most sequences go without.
    """
    rng = random.Random(seed)
    ops, open_ = [], True
    for _ in range(length):
        op = _op(rng, open_, lifecycle)
        if op.name == "close":
            open_ = False
        elif op.name == "setup":
            open_ = True
        ops.append(op)
    return ops


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha1(arr.tobytes()).hexdigest()[:12]


def _call(side: Side, op: Op) -> Any:
    s, a = side.store, op.args
    n = op.name
    if n == "register":
        return s.register_buffer(side.ptr(a[0], a[1]), a[2])
    if n == "unregister":
        return s.unregister_buffer(side.ptr(a[0], a[1]))
    if n == "put_from":
        return s.put_from(a[0], side.ptr("src", a[1]), a[2])
    if n == "get_into":
        return s.get_into(a[0], side.ptr("dst", a[1]), a[2])
    if n == "put":
        return s.put(a[0], side.src[a[1]:a[1] + a[2]].tobytes())
    if n == "get":
        return hashlib.sha1(bytes(s.get(a[0]))).hexdigest()[:12]
    if n == "batch_put":
        return s.batch_put_from(list(a[0]), [side.ptr("src", o) for o in a[1]], list(a[2]))
    if n == "batch_get":
        return s.batch_get_into(list(a[0]), [side.ptr("dst", o) for o in a[1]], list(a[2]))
    if n in ("batch_put_multi", "batch_get_multi"):
        buf = "src" if n == "batch_put_multi" else "dst"
        ptrs = [[side.ptr(buf, o) for o, _ in parts] for parts in a[1]]
        sizes = [[sz for _, sz in parts] for parts in a[1]]
        if n == "batch_put_multi":
            return s.batch_put_from_multi_buffers(list(a[0]), ptrs, sizes)
        return s.batch_get_into_multi_buffers(list(a[0]), ptrs, sizes)
    if n == "is_exist":
        return s.is_exist(a[0])
    if n == "batch_is_exist":
        return s.batch_is_exist(list(a[0]))
    if n == "get_size":
        return s.get_size(a[0])
    if n == "remove":
        return s.remove(a[0], a[1])
    if n == "batch_remove":
        return s.batch_remove(list(a[0]), a[1])
    if n == "remove_all":
        return s.remove_all(a[0])
    if n == "remove_by_regex":
        return s.remove_by_regex(a[0], a[1])
    if n == "close":
        return s.close()
    if n == "setup":
        return side.setup(s)
    if n == "health_check":
        return s.health_check()
    raise ValueError(f"unknown op {op}")


READS = ("get_into", "batch_get", "batch_get_multi")


def run_side(side: Side, ops: Sequence[Op]) -> list[Any]:
    """Each call's observation: the return value (a list for batches, ints as ints), and
    for reads the digest of ``dst`` after the call."""
    out: list[Any] = []
    for op in ops:
        if op.name in READS:
            side.dst[:] = 0
        value = _call(side, op)
        value = [int(v) for v in value] if isinstance(value, list) else value
        value = int(value) if isinstance(value, int | np.integer) else value
        out.append((value, _digest(side.dst)) if op.name in READS else value)
    side.results = out
    return out


@dataclass(frozen=True)
class Divergence:
    """A known difference: which op it touches, why the fake keeps it, and the evidence."""

    name: str
    evidence: str
    applies: Callable[[Op, Any, Any], bool]


def _dst_ranges(op: Op) -> list[tuple[int, int]]:
    if op.name == "batch_get":
        return [(o, o + n) for o, n in zip(op.args[1], op.args[2], strict=False)]
    if op.name == "batch_get_multi":
        return [(o, o + n) for parts in op.args[1] for o, n in parts]
    return []


def _overlapping_read(op: Op, real: Any, fake: Any) -> bool:
    """Same codes, different bytes, and two destinations of the batch overlap."""
    if op.name not in ("batch_get", "batch_get_multi") or real[0] != fake[0]:
        return False
    spans = sorted(_dst_ranges(op))
    return any(b[0] < a[1] for a, b in itertools.pairwise(spans))


# Every difference the suite may meet and accept; a difference none of these matches fails
# the suite with the sequence and the call.
DIVERGENCES: tuple[Divergence, ...] = (
    Divergence(
        "overlapping-batch-destinations",
        "docs/mooncake-verbs.md §7.4: a batch read copies its keys concurrently (one transfer "
        "task per key), so where two keys' destinations overlap the bytes left there depend "
        "on which copy finished last; the fake copies in key order. Codes agree.",
        _overlapping_read),
)


@dataclass
class Comparison:
    """Counts over every call compared, and the differences by divergence name."""

    calls: int = 0
    agreeing: int = 0
    named: dict[str, int] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)

    def add(self, seed: int, ops: Sequence[Op], real: Sequence[Any], fake: Sequence[Any],
            divergences: Sequence[Divergence] = DIVERGENCES) -> None:
        for i, (op, r, f) in enumerate(zip(ops, real, fake, strict=True)):
            self.calls += 1
            if r == f:
                self.agreeing += 1
                continue
            hit = next((d for d in divergences if d.applies(op, r, f)), None)
            if hit is not None:
                self.named[hit.name] = self.named.get(hit.name, 0) + 1
                continue
            history = "\n".join(f"  {j:2d} {o}  real={rv!r} fake={fv!r}"
                                for j, (o, rv, fv) in enumerate(zip(ops[:i + 1], real, fake,
                                                                    strict=False)))
            self.unexplained.append(f"seed {seed}, call {i} {op}: real {r!r}, fake {f!r}\n"
                                    f"{history}")
            return   # later calls depend on this one

    def summary(self) -> str:
        named = ", ".join(f"{k} {v}" for k, v in sorted(self.named.items())) or "none"
        return (f"{self.calls} calls compared, {self.agreeing} agreeing, named divergences: "
                f"{named}, unexplained: {len(self.unexplained)}")


def compare(seed: int, ops: Sequence[Op], real: Side, fake: Side,
            result: Comparison | None = None) -> Comparison:
    """Run ``ops`` on both sides and add the call-by-call verdicts to ``result``."""
    result = result if result is not None else Comparison()
    r = run_side(real, ops)
    f = run_side(fake, ops)
    result.add(seed, ops, r, f)
    return result


class Differential:
    """Runs seeded sequences on one long-lived real store and a fresh fake per sequence.

    The real store is set up once (about a second) and cleaned between sequences: every
    object removed with ``force``, every buffer the fake says is still registered
    unregistered on the real side too; a sequence that ended closed is set up again.
    """

    def __init__(self, real: Any, profile: Any, *, global_segment: int = 64 << 20,
                 local_buffer: int = 16 << 20) -> None:
        from .mooncake_real import setup_args

        self.real = real
        self.profile = profile
        self._setup_args = setup_args
        self._sizes = (global_segment, local_buffer)
        self.src = np.zeros(BUF, np.uint8)
        self.dst = np.zeros(BUF, np.uint8)
        self.store: Any = None
        self.result = Comparison()

    def _args(self) -> tuple[Any, ...]:
        return tuple(self._setup_args(self.real.master, *self._sizes))

    def _setup(self, store: Any) -> int:
        return int(store.setup(*self._args()))

    def _real_side(self) -> Side:
        if self.store is None:
            self.store = self.real.new()
        if self.store.health_check() != 0:
            rc = self._setup(self.store)
            if rc != 0:
                raise RuntimeError(f"the real store's setup returned {rc}; master log: "
                                   f"{self.real.master.log_path}")
        return Side(self.store, self._setup, self.src, self.dst)

    def run(self, seed: int, length: int = 30, *, lifecycle: bool = True) -> Comparison:
        """One sequence on both sides; the verdicts are added to ``self.result``."""
        from kvreg.fakes.mooncake import FakeMooncake

        ops = generate(seed, length, lifecycle=lifecycle)
        data = np.random.default_rng(seed).integers(0, 256, BUF, dtype=np.uint8)
        real = self._real_side()
        self.src[:] = data
        self.dst[:] = 0
        fake = FakeMooncake(self.profile, env={})
        fake_store = fake.store()
        if fake_store.setup(*self._args()) != 0:
            raise RuntimeError("the fake store's setup failed")
        fake_side = Side(fake_store, self._setup, data.copy(), np.zeros(BUF, np.uint8))
        try:
            compare(seed, ops, real, fake_side, self.result)
        finally:
            self._clean(fake_side)
            fake.close_all()
        return self.result

    def _clean(self, fake_side: Side) -> None:
        store = self.store
        if store is None or store.health_check() != 0:
            return
        store.remove_all(True)
        bases = {"src": int(fake_side.src.ctypes.data), "dst": int(fake_side.dst.ctypes.data)}
        for base, _ in fake_side.store.registered_buffers():
            for name, start in bases.items():
                if start <= base < start + BUF:
                    mine = self.src if name == "src" else self.dst
                    rc = store.unregister_buffer(int(mine.ctypes.data) + base - start)
                    if rc != 0:
                        raise RuntimeError(f"cleaning the real store: unregister_buffer "
                                           f"returned {rc} for a buffer the fake holds")

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
