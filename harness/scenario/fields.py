"""The fields of a ``[[scenario]]`` table, one validator each: adding a field is adding one.

A validator is registered with the keys of the table it reads (``@validator``); the
validators run in the order they are written, which is the order their errors are reported
in, and each reads the scenario's table (its own keys over ``[defaults]``), the values the
validators before it resolved, reports what is wrong and returns the field's resolved value.
The keys a scenario may hold are those the validators read and the target option tables
(``Target.options_table``), each validated by the target it belongs to. ``format.py`` loads
the file, runs the validators and builds the ``Scenario`` from their values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kvreg.fakes.cuda.profile import PROFILES, profile_with_options
from kvreg.fakes.faults import FaultPlan, FaultPlanError
from kvreg.harness.run.contract import REPEATABLE_TEARDOWN
from kvreg.harness.run.endstate import PINNING
from kvreg.harness.run.targets import DEFAULT_TARGET, TARGETS, get_target, option_tables

from .host_table import parse_host

if TYPE_CHECKING:
    from kvreg.harness.run.target import Target

__all__ = [
    "BASE_OFFSET_LIMIT",
    "CONTRACTS",
    "EXERCISES",
    "EXPECTATIONS",
    "MALLOC_ALIGNMENT",
    "MAX_RANKS",
    "MEMORY",
    "TORCH_BASE_OFFSET",
    "VALIDATORS",
    "Fields",
    "GiB",
    "Problems",
    "Validator",
    "check_unknown",
    "resolve_fields",
    "scenario_keys",
    "validator",
]

GiB = 1 << 30
EXERCISES = ("register", "fill", "transfers", "teardown", "teardown-after-failure")
EXPECTATIONS = ("success", "rejected", "register-error")
CONTRACTS = (REPEATABLE_TEARDOWN,)
MEMORY = ("virtual", "real")
# ``base_offset = "torch"``: where torch's CPU allocator puts a large tensor, 64 bytes into a
# page (posix_memalign(64) over glibc's mmapped chunk), here one page past a 2 MiB boundary
TORCH_BASE_OFFSET = 4096 + 64
BASE_OFFSET_LIMIT = 2 << 20     # the alignment of the virtual buffers the offset shifts
MALLOC_ALIGNMENT = 16           # glibc's on 64-bit Linux: no allocator hands out less
# chunk_gb values that say how a deployment leaves the variable: SGLang 0.5.23 reads it with
# EnvInt(256) (srt/environ.py: unset -> 256; a value int() cannot parse, such as "", -> a
# warning and 256) and floors it at 1 GiB (pool_host/common.py _cuda_host_register:
# max(value, 1) GiB), so 0 -> 1 GiB
_CHUNK_GB_WORDS = {"unset": None, "": ""}
_SGLANG_DEFAULT_GB = 256


@dataclass
class Problems:
    """Every problem of one file, each naming the file, where in it, the field and what was
    expected, so that one load reports them all."""

    file: Path
    where: str = ""
    errors: list[str] = field(default_factory=list)

    def fail(self, fieldname: str, expected: str, got: Any = None) -> None:
        shown = "" if got is None else f"; got {got!r}"
        self.errors.append(f"{self.file}: {self.where}{fieldname}: expected {expected}{shown}")


@dataclass
class Fields:
    """One scenario being validated: its tables, and what the validators resolved so far."""

    problems: Problems
    raw: Mapping[str, Any]          # the scenario's own table
    defaults: Mapping[str, Any]     # the file's [defaults]
    pool: Mapping[str, Any]         # the file's [pool], already validated
    index: int
    # a scenario's table of target options -> its target (Target.options_table)
    tables: Mapping[str, str] = field(default_factory=dict)
    # validator name -> its resolved value
    values: dict[str, Any] = field(default_factory=dict)
    # the scenario's own keys over [defaults]'s
    merged: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.merged = {**self.defaults, **self.raw}

    def fail(self, fieldname: str, expected: str, got: Any = None) -> None:
        self.problems.fail(fieldname, expected, got)

    def target(self) -> Target | None:
        """The target the scenario names, where it is a known one."""
        name = self.values.get("target")
        return None if name is None else get_target(name)


@dataclass(frozen=True)
class Validator:
    name: str                   # the key of its value in Fields.values
    reads: tuple[str, ...]      # the keys of a scenario table it validates
    check: Callable[[Fields], Any]


VALIDATORS: list[Validator] = []
_T = TypeVar("_T")


def validator(name: str, reads: tuple[str, ...] | None = None
              ) -> Callable[[Callable[[Fields], _T]], Callable[[Fields], _T]]:
    """Register a field's validator: its value is kept under ``name``; ``reads`` are the
    keys of a scenario table it validates (``(name,)`` when not given; ``()`` for one that
    validates something outside the scenario's own keys)."""
    keys = (name,) if reads is None else reads

    def register(check: Callable[[Fields], _T]) -> Callable[[Fields], _T]:
        if any(v.name == name for v in VALIDATORS):
            raise ValueError(f"a validator named {name!r} is registered already")
        VALIDATORS.append(Validator(name, keys, check))
        return check
    return register


def scenario_keys() -> frozenset[str]:
    """The keys of a scenario table the validators read (target option tables aside)."""
    return frozenset(key for v in VALIDATORS for key in v.reads)


def check_unknown(problems: Problems, data: Mapping[str, Any], allowed: Iterable[str],
                  what: str) -> None:
    for key in data:
        if key not in allowed:
            problems.fail(key, f"one of the {what} fields {sorted(allowed)} (unknown field)", None)


def resolve_fields(fields: Fields) -> dict[str, Any]:
    """Run every validator in order on one scenario; the values by validator name."""
    known = scenario_keys()
    # the tables of target options: known (each target imported) only where one is there
    fields.tables = option_tables() if any(key not in known for key in fields.merged) else {}
    check_unknown(fields.problems, fields.raw, known | set(fields.tables), "scenario")
    for v in VALIDATORS:
        fields.values[v.name] = v.check(fields)
    return fields.values


def _int(fields: Fields, data: Mapping[str, Any], key: str, *, minimum: int = 0) -> int | None:
    if key not in data:
        return None
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        fields.fail(key, f"an integer >= {minimum}", value)
        return None
    return value


def _number(fields: Fields, data: Mapping[str, Any], key: str) -> float | None:
    if key not in data:
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        fields.fail(key, "a positive number", value)
        return None
    return float(value)


# The validators, in the order their errors are reported.

@validator("name")
def _name(f: Fields) -> str:
    """A name without '/' (the last part of the scenario's id); once known it prefixes
    every later problem of the scenario."""
    name = f.merged.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        f.fail("name", "a non-empty string without '/'", name)
        name = f"#{f.index}"
    f.problems.where = f"scenario[{f.index}] ({name}): "
    return name


@validator("guards")
def _guards(f: Fields) -> str:
    guards = f.merged.get("guards")
    if not isinstance(guards, str) or len(guards.strip()) < 10:
        f.fail("guards", "one line of at least 10 characters saying which real failure this "
               "guards against, with its upstream reference", guards)
    return str(guards).strip()


@validator("params")
def _params(f: Fields) -> dict[str, Any]:
    """The pool's parameters with the scenario's own over them."""
    params = dict(f.pool.get("params", {}))
    extra = f.merged.get("params", {})
    if not isinstance(extra, Mapping):
        f.fail("params", "a table of pool parameters", extra)
        extra = {}
    params.update(extra)
    return params


@validator("size", reads=("pages", "total_gib"))
def _size(f: Fields) -> tuple[int | None, float | None]:
    """(pages, total_gib): the scenario's own pages/total_gib wins over the [defaults] one."""
    level = f.raw if ("pages" in f.raw or "total_gib" in f.raw) else f.defaults
    pages = _int(f, level, "pages", minimum=1)
    total_gib = _number(f, level, "total_gib")
    if pages is not None and total_gib is not None:
        f.fail("pages", "either pages or total_gib, not both", None)
    return pages, total_gib


@validator("memory")
def _memory(f: Fields) -> str:
    memory = f.merged.get("memory", f.pool.get("memory", "virtual"))
    if memory not in MEMORY:
        f.fail("memory", f"one of {list(MEMORY)}", memory)
    return str(memory)


@validator("chunk", reads=("chunk_gb", "chunk_bytes"))
def _chunk(f: Fields) -> tuple[int, tuple[str | None, ...]]:
    """(the limit, the variable's value) from chunk_gb (whole GiB, like
    SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB; 0, "" or "unset" as deployments leave it) or
    chunk_bytes; the scenario's own setting wins over [defaults]; 256 GiB (SGLang's default)
    otherwise. The variable's value is () where it follows the limit."""
    for level in (f.raw, f.defaults):
        if "chunk_gb" in level and "chunk_bytes" in level:
            f.fail("chunk_bytes", "either chunk_gb or chunk_bytes, not both", None)
            return 256 * GiB, ()
        if "chunk_bytes" in level:
            return (_int(f, level, "chunk_bytes", minimum=1) or 1), ()
        if "chunk_gb" in level:
            return _chunk_gb(f, level["chunk_gb"])
    return 256 * GiB, ()


def _chunk_gb(f: Fields, value: Any) -> tuple[int, tuple[str | None, ...]]:
    if isinstance(value, str) and value in _CHUNK_GB_WORDS:
        return _SGLANG_DEFAULT_GB * GiB, (_CHUNK_GB_WORDS[value],)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        f.fail("chunk_gb", 'an integer >= 0 (GiB; 0 as the variable set to "0"), '
               '"" (set but empty) or "unset"', value)
        return 256 * GiB, ()
    return (max(value, 1) * GiB, ("0",)) if value == 0 else (value * GiB, ())


@validator("profile")
def _profile(f: Fields) -> str:
    profile = f.merged.get("profile", "h200-r580")
    if not isinstance(profile, str) or profile not in PROFILES:
        f.fail("profile", f"one of {sorted(PROFILES)}", profile)
    return str(profile)


@validator("profile_options")
def _profile_options(f: Fields) -> dict[str, Any]:
    """[UNC] behaviours of the device profile switched for this scenario."""
    options = f.merged.get("profile_options", {})
    try:
        if not isinstance(options, Mapping):
            raise ValueError("a table of [UNC] profile options")
        profile_with_options(PROFILES.get(f.values["profile"]), dict(options))
    except ValueError as exc:
        f.fail("profile_options", f"[UNC] options of the device profile ({exc})", options)
        return {}
    return dict(options)


@validator("target")
def _target(f: Fields) -> str | None:
    """The target's name where it is a known one, else None; an unknown one is reported
    with the target's options (``_options``). Importing the target here declares its
    fakes' fault points (mooncake.*, verbs.*) before the faults are checked."""
    name = f.merged.get("target", DEFAULT_TARGET)
    if not isinstance(name, str) or name not in TARGETS:
        return None
    get_target(name)
    return name


MAX_RANKS = 64


@validator("ranks")
def _ranks(f: Fields) -> int:
    """How many rank processes share the scenario's host (harness/ranks); more than one only
    on a target that builds a rank's world (``build_rank``: the cuda target)."""
    ranks = f.merged.get("ranks", 1)
    if not isinstance(ranks, int) or isinstance(ranks, bool) or not 1 <= ranks <= MAX_RANKS:
        f.fail("ranks", f"an integer from 1 to {MAX_RANKS}", ranks)
        return 1
    target = f.target()
    if ranks > 1 and target is not None and not callable(getattr(target, "build_rank", None)):
        f.fail("ranks", f"1 with target = '{f.values['target']}' (many-rank scenarios run on "
               "the cuda target)", ranks)
        return 1
    return ranks


@validator("host")
def _host(f: Fields) -> dict[str, Any]:
    """The machine the ranks share (``[host]`` over ``[defaults]``, the scenario's own
    ``host`` over both), as the fake host's keyword arguments (host_table.py); {} for a
    scenario of one rank, which runs without a host."""
    table = f.merged.get("host")
    if table is None:
        return parse_host({}) if f.values["ranks"] > 1 else {}
    if not isinstance(table, Mapping):
        f.fail("host", "a table of host sizes and options", table)
        return {}
    if f.values["ranks"] == 1:
        f.fail("host", "ranks >= 2 (a host is what several rank processes share)", None)
        return {}
    try:
        return parse_host(table)
    except ValueError as exc:
        f.fail("host", f"a valid host ({exc})", None)
        return {}


@validator("shared", reads=())
def _shared(f: Fields) -> bool:
    """[pool] shared = true: one region, a /dev/shm file on the host, mapped by every rank."""
    shared = f.pool.get("shared", False)
    if not isinstance(shared, bool):
        f.fail("pool.shared", "true or false", shared)
        return False
    if shared and f.values["ranks"] == 1:
        f.fail("pool.shared", "ranks >= 2 (one region mapped by every rank)", None)
        return False
    if shared and f.values["memory"] != "virtual":
        f.fail("pool.shared", 'memory = "virtual" (the region lives on the fake host)', None)
        return False
    return shared


@validator("faults")
def _faults(f: Fields) -> tuple[dict[str, Any], ...]:
    faults = f.merged.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(spec, Mapping) for spec in faults):
        f.fail("faults", "an array of tables", faults)
        return ()
    probe = FaultPlan()
    out = []
    ranks = f.values["ranks"]
    for i, spec in enumerate(faults):
        rule = dict(spec)
        rank = rule.pop("rank", None)
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)
                                 or not 0 <= rank < ranks):
            f.fail(f"faults[{i}].rank", f"a rank from 0 to {ranks - 1} (the rank whose calls "
                   "it fails; absent: any rank)", rank)
        try:
            probe.arm_from_dict(rule)
        except FaultPlanError as exc:
            f.fail(f"faults[{i}]", f"a valid fault ({exc})", None)
        # one rank: the rule is that rank's, the key says nothing more
        out.append(rule if ranks == 1 or rank is None else {**rule, "rank": rank})
    return tuple(out)


@validator("exercise")
def _exercise(f: Fields) -> tuple[Any, ...]:
    """The steps, starting with register, each one the target offers."""
    exercise = f.merged.get("exercise", ["register", "transfers", "teardown", "teardown"])
    target = f.target()
    if not isinstance(exercise, list) or not exercise or \
            any(step not in EXERCISES for step in exercise):
        f.fail("exercise", f"a non-empty array of {list(EXERCISES)}", exercise)
        return ()
    if exercise[0] != "register":
        f.fail("exercise", "an array starting with 'register'", exercise)
    elif target is not None and any(step not in target.steps for step in exercise):
        f.fail("exercise", f"steps the {f.values['target']} target offers: {list(target.steps)}",
               exercise)
    elif "fill" in exercise and f.values.get("ranks", 1) < 2:
        f.fail("exercise", "'fill' with ranks >= 2 (it writes the pool on the ranks' host)",
               exercise)
    return tuple(exercise)


@validator("contract")
def _contract(f: Fields) -> str | None:
    """The one contract the scenario judges: it needs a second teardown round."""
    judges = f.merged.get("contract")
    exercise = f.values["exercise"]
    if judges is not None and judges not in CONTRACTS:
        f.fail("contract", " or ".join(repr(c) for c in CONTRACTS), judges)
        return None
    if judges is not None and exercise and \
            sum(str(step).startswith("teardown") for step in exercise) < 2:
        f.fail("contract", "an exercise with two teardown rounds or more (the contract is "
               "about the second)", list(exercise))
    return judges if judges is None else str(judges)


@validator("expect")
def _expect(f: Fields) -> str:
    expect = f.merged.get("expect", "success")
    if expect not in EXPECTATIONS:
        f.fail("expect", f"one of {list(EXPECTATIONS)}", expect)
    return str(expect)


@validator("empty")
def _empty(f: Fields) -> bool:
    empty = f.merged.get("empty", False)
    if not isinstance(empty, bool):
        f.fail("empty", "true or false", empty)
    return bool(empty)


@validator("call_budget")
def _call_budget(f: Fields) -> int:
    return _int(f, f.merged, "call_budget", minimum=1) or 100_000


@validator("tags")
def _tags(f: Fields) -> tuple[str, ...]:
    tags = f.merged.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        f.fail("tags", "an array of strings", tags)
        return ()
    return tuple(tags)


@validator("backends")
def _backends(f: Fields) -> tuple[str, ...]:
    backends = f.merged.get("backends", ["fake", "cuda"])
    if not isinstance(backends, list) or not backends or \
            not all(isinstance(b, str) for b in backends) or not set(backends) <= {"fake", "cuda"}:
        f.fail("backends", "a non-empty array of 'fake' and 'cuda'", backends)
        return ("fake",)
    return tuple(backends)


@validator("options", reads=())
def _options(f: Fields) -> dict[str, Any]:
    """The scenario's table of its target's own options, validated by the target; a table
    of another target's options is an error unless empty."""
    target = f.target()
    if target is None:
        f.fail("target", " or ".join(repr(name) for name in TARGETS), f.merged.get("target"))
        return {}
    own: dict[str, Any] = {}
    keys = dict(f.tables)
    if target.options_table is not None:
        keys[target.options_table] = target.name
    for key, owner in keys.items():
        value = f.merged.get(key, {})
        if not isinstance(value, Mapping):
            f.fail(key, f"a table of {get_target(owner).title} options", value)
        elif owner == target.name:
            own = dict(value)
            for problem in target.validate_options(own):
                f.fail(key, problem, None)
        elif value:
            f.fail(key, f"no {key} table unless target = '{owner}'", None)
    return own


@validator("pinning")
def _pinning(f: Fields) -> str:
    """"required": register must pin every byte; "optional": pinning nothing also passes."""
    pinning = f.merged.get("pinning", "required")
    if pinning not in PINNING:
        f.fail("pinning", f"one of {list(PINNING)}", pinning)
    return str(pinning)


@validator("base_offset", reads=())
def _base_offset(f: Fields) -> int:
    """[pool] base_offset: an int (a multiple of 16 below 2 MiB) or "torch"; virtual
    buffers of a target that takes an offset only (Target.takes_base_offset: the one that
    places its buffers itself does not; real ones are torch's own allocations already)."""
    if "base_offset" not in f.pool:
        return 0
    raw = f.pool["base_offset"]
    value = TORCH_BASE_OFFSET if raw == "torch" else raw
    if not isinstance(value, int) or isinstance(value, bool) or not \
            0 <= value < BASE_OFFSET_LIMIT or value % MALLOC_ALIGNMENT:
        f.fail("pool.base_offset", f'"torch" or an integer in [0, {BASE_OFFSET_LIMIT}) '
               f"that is a multiple of {MALLOC_ALIGNMENT}", raw)
        return 0
    target = f.target()
    if value and f.values["memory"] != "virtual":
        f.fail("pool.base_offset", 'memory = "virtual" (a real buffer is torch\'s own '
               "allocation, at the base torch gives it)", None)
    if value and target is not None and not target.takes_base_offset:
        takers = " or ".join(f'"{name}"' for name in TARGETS
                             if get_target(name).takes_base_offset)
        f.fail("pool.base_offset", f"target = {takers} (the {target.title} target places "
               "its buffers itself)", None)
    return value
