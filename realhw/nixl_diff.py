"""The NIXL agent's differential suite: one generated call sequence, run on two real
``nixl._api.nixl_agent`` objects (UCX over DRAM, in this process) and on two fake ones,
compared call by call.

Each side has an initiator ``a`` and a peer ``b``, fresh per sequence (names unique to the
sequence), and two fresh 64 KiB numpy buffers (``a``'s filled from the seed, ``b``'s
zeroed), kept alive to the end of the run so a registration left behind never meets a later
buffer. Ops are symbolic (which agent, offsets, lengths, device ids, memory types, which
earlier handle), so both sides make the same calls whatever their addresses: registrations
with zero-length, overlapping and duplicate descriptors, as tuples, numpy rows or tensors,
and lists with a descriptor UCX refuses (DRAM at address 0), which leave an empty section
behind when the agent held no DRAM registration (docs/nixl.md §3.3);
deregistration of returned lists, of lists never registered and twice; metadata loaded,
reloaded, removed, of garbage or of the agent itself; transfers (``initialize_xfer`` and
prepared lists with ``make_prepped_xfer``) inside, across and outside registrations, to the
peer, to the agent itself and to an agent never loaded; handles kept and posted after the
peer was removed or deregistered. Per call the observation is the result (a returned handle
as its index, a transfer as its end state after polling, since the real ``transfer()``
answers "PROC" or "DONE" by timing) or the exception's type and first line, and after a
transfer a digest of both buffers. :func:`generate` is seeded; a difference must be one of
:data:`DIVERGENCES`. Calls that crash the real process (a released transfer handle) are
never generated; tests/nixl_real holds them in a child process.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .mooncake_diff import Comparison, Divergence, Op

__all__ = ["BUF", "DIVERGENCES", "SECTIONS", "SECTIONS_SEED", "NixlComparison",
           "NixlDifferential", "NixlSide", "Op", "generate", "make_side", "plain", "run_side"]

BUF = 64 * 1024
OFFSETS = (0, 8, 64, 4096, 8192, 32768)
REG_SIZES = (0, 1, 64, 4096, 8192, 32768)
XFER_SIZES = (0, 1, 8, 100, 4096)
DEVS = (0, 0, 0, 0, 1)
UNSETTLED = "unsettled"   # the digest once an overlapping loopback copy ran (docs/nixl.md §7)
NULL_DESC = (0, 4096, 0)   # a descriptor UCX refuses (ucp_mem_map), wherever in the list
POLL_S = 0.002
POLLS = 5000


@dataclass
class NixlSide:
    """Two agents, this sequence's buffers, and the handles the sequence made."""

    a: Any
    b: Any
    abuf: np.ndarray
    bbuf: np.ndarray
    torch_ok: bool = True
    regs: list[Any] = field(default_factory=list)          # returned nixlRegDLists
    prepped: list[Any] = field(default_factory=list)       # prep_xfer_dlist handles
    kept: list[Any] = field(default_factory=list)          # unposted transfer handles
    spans: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # id() -> ranges
    unsettled: bool = False     # an overlapping copy ran: bytes are no longer compared
    results: list[Any] = field(default_factory=list)

    def agent(self, who: str) -> Any:
        return self.a if who == "a" else self.b

    def drop_agents(self) -> None:
        """Let the agents and their handles go; the buffers stay."""
        self.a = self.b = None
        self.regs.clear()
        self.prepped.clear()
        self.kept.clear()
        self.spans.clear()

    def ptr(self, who: str, off: int) -> int:
        return int((self.abuf if who == "a" else self.bbuf).ctypes.data) + off

    def name(self, target: str) -> str:
        return str({"a": self.a.name, "b": self.b.name}.get(target, "nobody"))


# ------------------------------------------------------------------------ generation

def _reg_entries(rng: random.Random) -> tuple[tuple[int, int, int], ...]:
    entries = [(rng.choice(OFFSETS), rng.choice(REG_SIZES), rng.choice(DEVS))
               for _ in range(rng.randint(0, 3))]
    if entries and rng.random() < 0.25:
        entries.append(rng.choice(entries))                      # a duplicate
    return tuple((o, min(n, BUF - o), d) for o, n, d in entries)


def _xfer_entries(rng: random.Random, n: int) -> tuple[tuple[int, int, int, int], ...]:
    """(local offset, remote offset, length, devID) per descriptor pair."""
    out = []
    for _ in range(n):
        size = rng.choice(XFER_SIZES)
        lo = rng.choice(OFFSETS) if rng.random() < 0.6 else rng.randrange(0, BUF - size + 1, 4)
        ro = rng.choice(OFFSETS) if rng.random() < 0.6 else rng.randrange(0, BUF - size + 1, 4)
        out.append((min(lo, BUF - size), min(ro, BUF - size), size, rng.choice(DEVS)))
    return tuple(out)


def _register_op(rng: random.Random, alt: random.Random, who: str) -> Op:
    form = rng.choices(["tuples", "numpy", "tensor", "vram", "no_memtype"],
                       weights=[10, 3, 2, 1, 1])[0]
    entries = _reg_entries(rng)
    # half the lists without a memory type become DRAM lists with a descriptor UCX refuses,
    # drawn from a stream of their own so the rest of each sequence is as it was
    if form == "no_memtype" and alt.random() < 0.5:
        form = "null"
    return Op("register", (who, form, entries))


def _xfer_op(rng: random.Random, name: str) -> Op:
    entries = _xfer_entries(rng, rng.choice((0, 1, 1, 1, 2, 3)))
    kind = rng.choice(("WRITE", "READ", "WRITE", "READ", "PUT")) if name == "xfer" else "WRITE"
    return Op(name, (kind, rng.choice(("b", "b", "b", "a", "nobody")), entries,
                     rng.random() < 0.08))           # a remote length one byte longer


def _prep_op(rng: random.Random) -> Op:
    entries = _xfer_entries(rng, rng.randint(0, 3))
    return Op("prep", (rng.choice(("local", "local", "b", "b", "a", "nobody")),
                       tuple((o, s, d) for o, _, s, d in entries)))


def _op(rng: random.Random, alt: random.Random) -> Op:
    name = rng.choices(
        ["register", "deregister", "dereg_fresh", "load", "reload", "remove", "load_bad",
         "xfer", "keep", "post", "prep", "make", "release_dlist", "unposted_state"],
        weights=[14, 6, 3, 6, 2, 2, 1, 14, 3, 4, 5, 6, 1, 1])[0]
    who = "a" if rng.random() < 0.55 else "b"
    simple: dict[str, Callable[[], Op]] = {
        "register": lambda: _register_op(rng, alt, who),
        "deregister": lambda: Op(name, (who, rng.randrange(8))),
        "dereg_fresh": lambda: Op(name, (who, _reg_entries(rng))),
        "load": lambda: Op(name, (rng.choice(("b", "b", "b", "a")),)),
        "reload": lambda: Op(name, (rng.choice(("b", "b", "b", "a")),)),
        "remove": lambda: Op(name, (rng.choice(("b", "b", "nobody")),)),
        "xfer": lambda: _xfer_op(rng, name),
        "keep": lambda: _xfer_op(rng, name),
        "post": lambda: Op(name, (rng.randrange(4),)),
        "prep": lambda: _prep_op(rng),
        "make": lambda: Op(name, (rng.choice(("WRITE", "READ")), rng.randrange(6),
                                  rng.randrange(6), tuple(rng.randrange(-1, 4) for _ in
                                                          range(rng.randint(0, 2))),
                                  rng.random() < 0.8)),
        "release_dlist": lambda: Op(name, (rng.randrange(6),)),
    }
    return simple[name]() if name in simple else Op(name, ("b",))


# What a refused list leaves (docs/nixl.md §3.3), one fixed sequence: a refusal into no DRAM
# section (an empty one the next registration fills), one beside a registration (rolled
# back, the metadata whole), and one after the only DRAM list was deregistered (the section
# erased, so the refusal leaves an empty one and the peer's loads fail for good).
SECTIONS_SEED = 999_999
SECTIONS = (
    Op("register", ("b", "null", ())),
    Op("register", ("b", "tuples", ((0, 32768, 0),))),
    Op("register", ("a", "tuples", ((0, 32768, 0),))),
    Op("load", ("b",)),
    Op("xfer", ("WRITE", "b", ((0, 64, 100, 0),), False)),
    Op("register", ("b", "null", ((32768, 64, 0),))),
    Op("reload", ("b",)),
    Op("xfer", ("WRITE", "b", ((0, 32768, 64, 0),), False)),
    Op("xfer", ("WRITE", "b", ((8, 4096, 8, 0),), False)),
    Op("register", ("a", "null", ((40000, 8, 0),))),
    Op("deregister", ("b", 0)),
    Op("register", ("b", "null", ())),
    Op("reload", ("b",)),
    Op("reload", ("b",)),
    Op("dereg_fresh", ("b", ((0, 64, 0),))),
)


def generate(seed: int, length: int = 40) -> list[Op]:
    """The sequence of ``seed``: both agents register half their buffer and the initiator
    loads the peer's metadata, then the generated calls; :data:`SECTIONS` for
    :data:`SECTIONS_SEED`, whatever ``length``."""
    if seed == SECTIONS_SEED:
        return list(SECTIONS)
    rng, alt = random.Random(seed), random.Random(-1 - seed)
    ops = [Op("register", ("b", "tuples", ((0, 32768, 0),))),
           Op("register", ("a", "tuples", ((0, 32768, 0),))), Op("load", ("b",))]
    ops += [_op(rng, alt) for _ in range(length - len(ops))]
    return ops


# ------------------------------------------------------------------------ execution

def _error(exc: BaseException) -> tuple[str, str, str]:
    """An exception as compared: its type and first line (pybind11's signatures name the
    wheel's module, so a TypeError is cut before them)."""
    text = str(exc).split("\n")[0].split(" The following argument types")[0]
    return ("raise", type(exc).__name__, text)


def _overlap(local: Sequence[tuple[int, int]], remote: Sequence[tuple[int, int]]) -> bool:
    """Whether a copy between these (address, length) pairs overlaps itself: a destination
    meets a source or another destination (possible only in loopback)."""
    spans = [(a, a + n) for a, n in (*local, *remote) if n]
    return any(x[0] < y[1] and y[0] < x[1] for i, x in enumerate(spans)
               for y in spans[i + 1:])


def _digest(side: NixlSide) -> str:
    if side.unsettled:
        return UNSETTLED
    h = hashlib.sha256(side.abuf.tobytes())
    h.update(side.bbuf.tobytes())
    return h.hexdigest()[:12]


def _finish(side: NixlSide, handle: Any) -> str:
    """Post, then poll to an end state (the real ``transfer()`` may answer "PROC"); a copy
    that overlaps itself leaves the buffers unsettled for the rest of the sequence."""
    spans = side.spans.get(id(handle), [])
    half = len(spans) // 2
    state = str(side.a.transfer(handle))
    if _overlap(spans[:half], spans[half:]):
        side.unsettled = True
    for _ in range(POLLS):
        if state != "PROC":
            break
        time.sleep(POLL_S)
        state = str(side.a.check_xfer_state(handle))
    return state


def _register(side: NixlSide, op: Op) -> Any:
    who, form, entries = op.args
    ag = side.agent(who)
    rows = [(side.ptr(who, o), n, d) for o, n, d in entries]
    if form == "null":         # a DRAM descriptor at address 0 in the list: UCX refuses it
        rows.insert(len(rows) // 2, NULL_DESC)
    if form == "numpy":
        arg: Any = np.array(rows, dtype=np.uint64).reshape(-1, 3)
        regs = ag.register_memory(arg, "DRAM")
    elif form == "tensor":
        import torch

        buf = torch.from_numpy(side.abuf if who == "a" else side.bbuf)
        regs = ag.register_memory([buf[o:o + n] for o, n, _ in entries] if entries else buf)
    else:
        regs = ag.register_memory([(*r, "") for r in rows],
                                  None if form == "no_memtype" else
                                  "VRAM" if form == "vram" else "DRAM")
    side.regs.append((who, regs))
    return ("ok", len(side.regs) - 1)


def _empty(agent: Any) -> Any:
    """An empty transfer descriptor list of the agent's own module (``nixlXferDList``)."""
    probe = agent.get_xfer_descs([(0, 0, 0)], "DRAM")
    return type(probe)(probe.getType())


def _xfer_lists(side: NixlSide, target: str,
                entries: Sequence[tuple[int, int, int, int]]) -> tuple[Any, Any]:
    if not entries:
        return _empty(side.a), _empty(side.a)
    peer = "a" if target == "a" else "b"
    local = [(side.ptr("a", lo), n, d) for lo, _, n, d in entries]
    remote = [(side.ptr(peer, ro), n, 0) for _, ro, n, _ in entries]
    return side.a.get_xfer_descs(local, "DRAM"), side.a.get_xfer_descs(remote, "DRAM")


def _pairs(dlist: Any) -> list[tuple[int, int]]:
    """A transfer list's (address, length) pairs."""
    return [(int(dlist[i][0]), int(dlist[i][1])) for i in range(dlist.descCount())]


def _rows(dlist: Any) -> list[tuple[int, int, int]]:
    """A real descriptor list's (addr, len, devID) rows."""
    return [tuple(dlist[i][:3]) for i in range(dlist.descCount())]


def _deregister(side: NixlSide, op: Op) -> Any:
    if not side.regs:
        return ("none",)
    who, regs = side.regs[op.args[1] % len(side.regs)]
    if len(set(_rows(regs))) < regs.descCount():
        return ("crashes",)      # a descriptor twice in one list: SIGSEGV (docs/nixl.md §3.2)
    side.agent(op.args[0]).deregister_memory(regs)
    return ("ok", who)


def _dereg_fresh(side: NixlSide, op: Op) -> Any:
    who, entries = op.args
    if not entries:
        return ("none",)
    if len(set(entries)) < len(entries):
        return ("crashes",)
    ag = side.agent(who)
    ag.deregister_memory(ag.get_reg_descs([(side.ptr(who, o), n, d, "")
                                           for o, n, d in entries], "DRAM"))
    return ("ok",)


def _xfer(side: NixlSide, op: Op) -> Any:
    a = side.a
    kind, target, entries, bad_len = op.args
    ld, rd = _xfer_lists(side, target, entries)
    if bad_len and entries:
        first = entries[0]
        rd = a.get_xfer_descs([(side.ptr("b", first[1]), first[2] + 1, 0)] +
                              [rd[i] for i in range(1, rd.descCount())], "DRAM")
    handle = a.initialize_xfer(kind, ld, rd, side.name(target))
    side.spans[id(handle)] = _pairs(ld) + _pairs(rd)
    if op.name == "keep":
        side.kept.append(handle)
        return ("kept", len(side.kept) - 1)
    state = _finish(side, handle)
    handle.release()
    return ("done", state, _digest(side))


def _post(side: NixlSide, op: Op) -> Any:
    if not side.kept:
        return ("none",)
    handle = side.kept[op.args[0] % len(side.kept)]
    return ("done", _finish(side, handle), _digest(side))


def _prep(side: NixlSide, op: Op) -> Any:
    a = side.a
    target, entries = op.args
    peer = "a" if target in ("local", "a") else "b"
    descs = [(side.ptr(peer, o), n, d) for o, n, d in entries]
    name = "" if target == "local" else side.name(target)
    handle = a.prep_xfer_dlist(name, descs if descs else _empty(a), "DRAM")
    side.spans[id(handle)] = [(p, n) for p, n, _ in descs]
    side.prepped.append(handle)
    return ("ok", len(side.prepped) - 1)


def _make(side: NixlSide, op: Op) -> Any:
    kind, li, ri, idx, post = op.args
    if not side.prepped:
        return ("none",)
    lh, rh = side.prepped[li % len(side.prepped)], side.prepped[ri % len(side.prepped)]
    handle = side.a.make_prepped_xfer(kind, lh, list(idx), rh, list(idx))
    side.spans[id(handle)] = [side.spans[id(lh)][i] for i in idx] + \
        [side.spans[id(rh)][i] for i in idx]
    if not post:
        handle.release()
        return ("made",)
    state = _finish(side, handle)
    handle.release()
    return ("done", state, _digest(side))


def _release_dlist(side: NixlSide, op: Op) -> Any:
    if not side.prepped:
        return ("none",)
    side.a.release_dlist_handle(side.prepped[op.args[0] % len(side.prepped)])
    return ("ok",)


def _unposted_state(side: NixlSide, op: Op) -> Any:
    a = side.a
    ld, rd = _xfer_lists(side, "a", ((0, 128, 8, 0),))
    handle = a.initialize_xfer("WRITE", ld, rd, a.name)
    try:
        return ("state", a.check_xfer_state(handle))
    finally:
        handle.release()


def _load(side: NixlSide, op: Op) -> Any:
    name = side.a.add_remote_agent(side.agent(op.args[0]).get_agent_metadata())
    return ("ok", name == side.name(op.args[0]).encode())


def _load_bad(side: NixlSide, op: Op) -> Any:
    return ("ok", bytes(side.a.add_remote_agent(b"garbage")).decode())


def _remove(side: NixlSide, op: Op) -> Any:
    side.a.remove_remote_agent(side.name(op.args[0]))
    return ("ok",)


_CALLS: dict[str, Callable[[NixlSide, Op], Any]] = {
    "register": _register, "deregister": _deregister, "dereg_fresh": _dereg_fresh,
    "load": _load, "reload": _load, "load_bad": _load_bad, "remove": _remove,
    "xfer": _xfer, "keep": _xfer, "post": _post, "prep": _prep, "make": _make,
    "release_dlist": _release_dlist, "unposted_state": _unposted_state}


def _call(side: NixlSide, op: Op) -> Any:
    return _CALLS[op.name](side, op)


def run_side(side: NixlSide, ops: Sequence[Op]) -> list[Any]:
    out = []
    for op in ops:
        try:
            out.append(_call(side, op))
        except Exception as exc:   # every raise is a result to compare
            out.append(_error(exc))
    side.results = out
    return out


# Every difference the suite may meet and accept; a difference none of these matches fails
# the suite with the sequence and the call (docs/nixl.md §7).
DIVERGENCES: tuple[Divergence, ...] = ()


@dataclass
class NixlComparison(Comparison):
    """The store suite's counts, and how many calls of each name were compared."""

    by_call: dict[str, int] = field(default_factory=dict)

    def add(self, seed: int, ops: Sequence[Op], real: Sequence[Any], fake: Sequence[Any],
            divergences: Sequence[Divergence] = DIVERGENCES) -> None:
        before = self.calls
        super().add(seed, ops, real, fake, divergences)
        for op in ops[:self.calls - before]:
            self.by_call[op.name] = self.by_call.get(op.name, 0) + 1


def make_side(agent_cls: Any, config_cls: Any, seed: int) -> NixlSide:
    """Agents ``a<seed>`` and ``b<seed>`` and the sequence's buffers."""
    data = np.random.default_rng(seed).integers(0, 256, BUF, dtype=np.uint8)
    a = agent_cls(f"a{seed}", config_cls(backends=["UCX"]))
    b = agent_cls(f"b{seed}", config_cls(backends=["UCX"]))
    return NixlSide(a, b, data, np.zeros(BUF, np.uint8))


def plain(value: Any) -> Any:
    """A result as JSON carries it back from the real agents' process, and as compared:
    lists as tuples, all the way down."""
    if isinstance(value, list | tuple):
        return tuple(plain(v) for v in value)
    return value


class NixlDifferential:
    """Compares the real agents' results of each seed (run in a child process by
    realhw/nixl_real.py) with a fake ``FakeNixl`` under ``profile`` (``"ucx-host"``: the
    wheel's UCX on a machine without a GPU) running the same sequence here."""

    def __init__(self, profile: Any = "ucx-host") -> None:
        from kvreg.fakes.nixl import FakeNixl

        self.fake = FakeNixl(profile)
        self.kept: list[NixlSide] = []      # every sequence's buffers, alive to the end
        self.result = NixlComparison()

    def fake_results(self, seed: int, length: int) -> list[Any]:
        from kvreg.fakes.nixl.api import nixl_agent_config

        side = make_side(self.fake.agent_class(), nixl_agent_config, seed)
        self.kept.append(side)
        return [plain(r) for r in run_side(side, generate(seed, length))]

    def add(self, seed: int, length: int, real: Sequence[Any]) -> NixlComparison:
        ops = generate(seed, length)
        self.result.add(seed, ops, [plain(r) for r in real], self.fake_results(seed, length))
        return self.result
