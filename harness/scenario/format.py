"""Scenario files: the format, its validation, and loading (format version 1, TOML).

A file describes one pool (type, parameters, memory kind) and a list of scenarios against
it; each scenario says its size, limits, device profile, fault plan, what is exercised and
what is expected, and which real failure it guards against. Every field is checked when
the file is loaded; an error names the file, the field and what was expected, and nothing
runs. The format is documented in scenarios/FORMAT.md.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.profile import PROFILES, profile_with_options
from kvreg.fakes.faults import FaultPlan, FaultPlanError
from kvreg.harness.pools import (
    POOL_TYPES,
    GeometryError,
    PoolGeometry,
    accepted_params,
    make_geometry,
)
from kvreg.harness.run.contract import REPEATABLE_TEARDOWN
from kvreg.harness.run.endstate import PINNING
from kvreg.harness.run.targets import DEFAULT_TARGET, TARGETS, get_target, option_tables
from kvreg.harness.scenario.ids import catalog_folder, file_id
from kvreg.harness.scenario.size_limits import REAL_LIMIT, real_memory_problem, size_problem

if TYPE_CHECKING:
    from kvreg.harness.run.target import Target

__all__ = ["EXERCISES", "EXPECTATIONS", "FORMAT_VERSION", "Scenario", "ScenarioError",
           "bundled_root", "discover", "load_file", "load_paths"]

FORMAT_VERSION = 1
GiB = 1 << 30
EXERCISES = ("register", "transfers", "teardown", "teardown-after-failure")
EXPECTATIONS = ("success", "rejected", "register-error")
CONTRACTS = (REPEATABLE_TEARDOWN,)
MEMORY = ("virtual", "real")
_SCENARIO_KEYS = {"name", "guards", "pages", "total_gib", "chunk_gb", "chunk_bytes",
                  "profile", "faults", "exercise", "expect", "memory", "empty", "params",
                  "call_budget", "tags", "backends", "target", "pinning",
                  "profile_options", "contract"}
_TOP_KEYS = {"format", "pool", "defaults", "scenario"}
_POOL_KEYS = {"type", "params", "memory", "base_offset"}
# ``base_offset = "torch"``: where torch's CPU allocator puts a large tensor, 64 bytes into a
# page (posix_memalign(64) over glibc's mmapped chunk), here one page past a 2 MiB boundary
TORCH_BASE_OFFSET = 4096 + 64
BASE_OFFSET_LIMIT = 2 << 20     # the alignment of the virtual buffers the offset shifts
MALLOC_ALIGNMENT = 16           # glibc's on 64-bit Linux: no allocator hands out less


class ScenarioError(ValueError):
    """An invalid scenario file: the message names the file, the field and the expectation."""


@dataclass(frozen=True)
class Scenario:
    """One runnable scenario, fully resolved."""

    id: str
    file: Path
    name: str
    guards: str
    pool_type: str
    params: Mapping[str, Any]
    memory: str
    chunk_limit: int
    profile: str
    faults: tuple[Mapping[str, Any], ...]
    exercise: tuple[str, ...]
    expect: str
    empty: bool = False
    call_budget: int = 100_000
    tags: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("fake", "cuda")
    # a name of the target registry (harness/run/targets.py)
    target: str = DEFAULT_TARGET
    # the target's own table (Target.options_table), as the target validated it
    options: Mapping[str, Any] = field(default_factory=dict)
    # "required": register must pin every byte; "optional": pinning nothing also passes
    pinning: str = "required"
    # [UNC] behaviours of the device profile switched for this scenario (profile.UNC_OPTIONS)
    profile_options: Mapping[str, Any] = field(default_factory=dict)
    # bytes each virtual buffer's base lies past a 2 MiB boundary ([pool] base_offset)
    base_offset: int = 0
    # SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB as the scenario sets it: () follows chunk_limit
    # (whole GiB, else unset); (value,) is that value, None for unset (chunk_gb = 0, "" or
    # "unset": docs/pools.md §1)
    chunk_var: tuple[str | None, ...] = ()
    # the contract the scenario judges and nothing else: "repeatable-teardown" (skipped for
    # code that does not declare it, harness/run/contract.py), or None
    contract: str | None = None

    def geometry(self) -> PoolGeometry:
        return make_geometry(self.pool_type, **dict(self.params))

    @property
    def pool(self) -> str:
        layout = self.params.get("layout")
        return f"{self.pool_type}/{layout}" if layout else self.pool_type


@dataclass
class _Ctx:
    file: Path
    where: str = ""
    errors: list[str] = field(default_factory=list)

    def fail(self, fieldname: str, expected: str, got: Any = None) -> None:
        shown = "" if got is None else f"; got {got!r}"
        self.errors.append(f"{self.file}: {self.where}{fieldname}: expected {expected}{shown}")


def _int(ctx: _Ctx, data: Mapping[str, Any], key: str, *, minimum: int = 0) -> int | None:
    if key not in data:
        return None
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        ctx.fail(key, f"an integer >= {minimum}", value)
        return None
    return value


def _number(ctx: _Ctx, data: Mapping[str, Any], key: str) -> float | None:
    if key not in data:
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        ctx.fail(key, "a positive number", value)
        return None
    return float(value)


def _unknown(ctx: _Ctx, data: Mapping[str, Any], allowed: Iterable[str], what: str) -> None:
    for key in data:
        if key not in allowed:
            ctx.fail(key, f"one of the {what} fields {sorted(allowed)} (unknown field)", None)


# chunk_gb values that say how a deployment leaves the variable: SGLang 0.5.23 reads it with
# EnvInt(256) (srt/environ.py: unset -> 256; a value int() cannot parse, such as "", -> a
# warning and 256) and floors it at 1 GiB (pool_host/common.py _cuda_host_register:
# max(value, 1) GiB), so 0 -> 1 GiB
_CHUNK_GB_WORDS = {"unset": None, "": ""}
_SGLANG_DEFAULT_GB = 256


def _chunk_limit(ctx: _Ctx, raw: Mapping[str, Any], defaults: Mapping[str, Any]
                 ) -> tuple[int, tuple[str | None, ...]]:
    """(the limit, the variable's value) from chunk_gb (whole GiB, like
    SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB; 0, "" or "unset" as deployments leave it) or
    chunk_bytes; the scenario's own setting wins over [defaults]; 256 GiB (SGLang's default)
    otherwise. The variable's value is () where it follows the limit."""
    for level in (raw, defaults):
        if "chunk_gb" in level and "chunk_bytes" in level:
            ctx.fail("chunk_bytes", "either chunk_gb or chunk_bytes, not both", None)
            return 256 * GiB, ()
        if "chunk_bytes" in level:
            return (_int(ctx, level, "chunk_bytes", minimum=1) or 1), ()
        if "chunk_gb" in level:
            value = level["chunk_gb"]
            if isinstance(value, str) and value in _CHUNK_GB_WORDS:
                return _SGLANG_DEFAULT_GB * GiB, (_CHUNK_GB_WORDS[value],)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                ctx.fail("chunk_gb", 'an integer >= 0 (GiB; 0 as the variable set to "0"), '
                         '"" (set but empty) or "unset"', value)
                return 256 * GiB, ()
            return (max(value, 1) * GiB, ("0",)) if value == 0 else (value * GiB, ())
    return 256 * GiB, ()


def _pages_for(pool_type: str, params: dict[str, Any], total: int) -> int:
    """The page count whose pool is closest to ``total`` bytes without exceeding it."""
    one = make_geometry(pool_type, **{**params, "page_num": 1}).total_nbytes
    two = make_geometry(pool_type, **{**params, "page_num": 2}).total_nbytes
    per_page = max(two - one, 1)
    return max(1, (total - (one - per_page)) // per_page)


def _resolve(ctx: _Ctx, raw: Mapping[str, Any], pool: Mapping[str, Any],
             defaults: Mapping[str, Any], index: int, rel: str) -> Scenario | None:
    ctx.where = f"scenario[{index}]."
    if not isinstance(raw, Mapping):
        ctx.fail("", "a table", raw)
        return None
    merged = {**defaults, **raw}
    before = len(ctx.errors)
    # the tables of target options: known (each target imported) only where one is there
    tables = option_tables() if any(key not in _SCENARIO_KEYS for key in merged) else {}
    _unknown(ctx, raw, _SCENARIO_KEYS | set(tables), "scenario")
    name = merged.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        ctx.fail("name", "a non-empty string without '/'", name)
        name = f"#{index}"
    ctx.where = f"scenario[{index}] ({name}): "
    guards = merged.get("guards")
    if not isinstance(guards, str) or len(guards.strip()) < 10:
        ctx.fail("guards", "one line of at least 10 characters saying which real failure this "
                 "guards against, with its upstream reference", guards)
    pool_type = pool.get("type")
    params = dict(pool.get("params", {}))
    extra = merged.get("params", {})
    if not isinstance(extra, Mapping):
        ctx.fail("params", "a table of pool parameters", extra)
        extra = {}
    params.update(extra)
    # the size: the scenario's own pages/total_gib wins over the [defaults] one
    size_level = raw if ("pages" in raw or "total_gib" in raw) else defaults
    pages = _int(ctx, size_level, "pages", minimum=1)
    total_gib = _number(ctx, size_level, "total_gib")
    if pages is not None and total_gib is not None:
        ctx.fail("pages", "either pages or total_gib, not both", None)
    memory = merged.get("memory", pool.get("memory", "virtual"))
    if memory not in MEMORY:
        ctx.fail("memory", f"one of {list(MEMORY)}", memory)
    limit, chunk_var = _chunk_limit(ctx, raw, defaults)
    profile = merged.get("profile", "h200-r580")
    if profile not in PROFILES:
        ctx.fail("profile", f"one of {sorted(PROFILES)}", profile)
    profile_options = merged.get("profile_options", {})
    try:
        if not isinstance(profile_options, Mapping):
            raise ValueError("a table of [UNC] profile options")
        profile_with_options(PROFILES.get(str(profile)), dict(profile_options))
    except ValueError as exc:
        ctx.fail("profile_options", f"[UNC] options of the device profile ({exc})",
                 profile_options)
        profile_options = {}
    target = merged.get("target", DEFAULT_TARGET)
    # the target validates its own table and steps; importing it also declares its fakes'
    # fault points (mooncake.*, verbs.*) before the faults are checked
    target_obj = get_target(target) if isinstance(target, str) and target in TARGETS else None
    faults = merged.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(f, Mapping) for f in faults):
        ctx.fail("faults", "an array of tables", faults)
        faults = []
    else:
        probe = FaultPlan()
        for i, spec in enumerate(faults):
            try:
                probe.arm_from_dict(spec)
            except FaultPlanError as exc:
                ctx.fail(f"faults[{i}]", f"a valid fault ({exc})", None)
    exercise = merged.get("exercise", ["register", "transfers", "teardown", "teardown"])
    if not isinstance(exercise, list) or not exercise or \
            any(step not in EXERCISES for step in exercise):
        ctx.fail("exercise", f"a non-empty array of {list(EXERCISES)}", exercise)
        exercise = []
    elif exercise[0] != "register":
        ctx.fail("exercise", "an array starting with 'register'", exercise)
    elif target_obj is not None and any(step not in target_obj.steps for step in exercise):
        ctx.fail("exercise", f"steps the {target} target offers: {list(target_obj.steps)}",
                 exercise)
    judges = merged.get("contract")
    if judges is not None and judges not in CONTRACTS:
        ctx.fail("contract", " or ".join(repr(c) for c in CONTRACTS), judges)
        judges = None
    elif judges is not None and exercise and \
            sum(str(step).startswith("teardown") for step in exercise) < 2:
        ctx.fail("contract", "an exercise with two teardown rounds or more (the contract is "
                 "about the second)", exercise)
    expect = merged.get("expect", "success")
    if expect not in EXPECTATIONS:
        ctx.fail("expect", f"one of {list(EXPECTATIONS)}", expect)
    empty = merged.get("empty", False)
    if not isinstance(empty, bool):
        ctx.fail("empty", "true or false", empty)
    budget = _int(ctx, merged, "call_budget", minimum=1) or 100_000
    tags = merged.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        ctx.fail("tags", "an array of strings", tags)
        tags = []
    backends = merged.get("backends", ["fake", "cuda"])
    if not isinstance(backends, list) or not set(backends) <= {"fake", "cuda"} or not backends:
        ctx.fail("backends", "a non-empty array of 'fake' and 'cuda'", backends)
        backends = ["fake"]
    own_options = _target_options(ctx, merged, target_obj, tables)
    pinning = merged.get("pinning", "required")
    if pinning not in PINNING:
        ctx.fail("pinning", f"one of {list(PINNING)}", pinning)
    base_offset = _base_offset(ctx, pool, str(memory), target_obj)
    if len(ctx.errors) > before or not isinstance(pool_type, str):
        return None
    try:
        if pages is not None and pool_type == "group":
            # a group has no page_num of its own: every member gets the page count
            params["members"] = [{**m, "page_num": pages} if isinstance(m, Mapping) else m
                                 for m in params.get("members", [])]
        elif pages is not None:
            params["page_num"] = pages
        elif total_gib is not None:
            params["page_num"] = _pages_for(pool_type, params, int(total_gib * GiB))
        elif "page_num" not in params and pool_type != "group":
            ctx.fail("pages", "pages or total_gib (the pool's size)", None)
            return None
        geometry = make_geometry(pool_type, **params)
    except GeometryError as exc:
        ctx.fail("pool", f"a possible geometry ({exc})", None)
        return None
    too_big = size_problem(geometry)
    if too_big is None and memory == "real":
        too_big = real_memory_problem(geometry, REAL_LIMIT)
    if too_big is not None:
        ctx.fail("pool", f"a pool this machine can hold ({too_big})", None)
        return None
    return Scenario(id=f"{rel}/{name}", file=ctx.file, name=name, guards=str(guards).strip(),
                    pool_type=pool_type, params=params, memory=str(memory), chunk_limit=limit,
                    profile=str(profile), faults=tuple(dict(f) for f in faults),
                    exercise=tuple(exercise), expect=str(expect), empty=bool(empty),
                    call_budget=budget, tags=tuple(tags), backends=tuple(backends),
                    target=str(target), options=own_options, pinning=str(pinning),
                    profile_options=dict(profile_options), base_offset=base_offset,
                    chunk_var=chunk_var, contract=judges)


def _target_options(ctx: _Ctx, merged: Mapping[str, Any], target: Target | None,
                    tables: Mapping[str, str]) -> dict[str, Any]:
    """The scenario's table of its target's own options, validated by the target; a table
    of another target's options is an error unless empty."""
    if target is None:
        ctx.fail("target", " or ".join(repr(name) for name in TARGETS), merged.get("target"))
        return {}
    own: dict[str, Any] = {}
    keys = dict(tables)
    if target.options_table is not None:
        keys[target.options_table] = target.name
    for key, owner in keys.items():
        value = merged.get(key, {})
        if not isinstance(value, Mapping):
            ctx.fail(key, f"a table of {get_target(owner).title} options", value)
        elif owner == target.name:
            own = dict(value)
            for problem in target.validate_options(own):
                ctx.fail(key, problem, None)
        elif value:
            ctx.fail(key, f"no {key} table unless target = '{owner}'", None)
    return own


def _base_offset(ctx: _Ctx, pool: Mapping[str, Any], memory: str, target: Target | None
                 ) -> int:
    """[pool] base_offset: an int (a multiple of 16 below 2 MiB) or "torch"; virtual
    buffers of a target that takes an offset only (Target.takes_base_offset: the one that
    places its buffers itself does not; real ones are torch's own allocations already)."""
    if "base_offset" not in pool:
        return 0
    raw = pool["base_offset"]
    value = TORCH_BASE_OFFSET if raw == "torch" else raw
    if not isinstance(value, int) or isinstance(value, bool) or not \
            0 <= value < BASE_OFFSET_LIMIT or value % MALLOC_ALIGNMENT:
        ctx.fail("pool.base_offset", f'"torch" or an integer in [0, {BASE_OFFSET_LIMIT}) '
                 f"that is a multiple of {MALLOC_ALIGNMENT}", raw)
        return 0
    if value and memory != "virtual":
        ctx.fail("pool.base_offset", 'memory = "virtual" (a real buffer is torch\'s own '
                 "allocation, at the base torch gives it)", None)
    if value and target is not None and not target.takes_base_offset:
        takers = " or ".join(f'"{name}"' for name in TARGETS
                             if get_target(name).takes_base_offset)
        ctx.fail("pool.base_offset", f"target = {takers} (the {target.title} target places "
                 "its buffers itself)", None)
    return value


def load_file(path: Path, given: Path | None = None) -> list[Scenario]:
    """Load and validate one file; ScenarioError lists every problem found. Ids follow
    :mod:`.ids`; ``given`` is the folder the file was found under (only used where no
    project lies around the file)."""
    path = Path(path)
    ctx = _Ctx(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text, so not a scenario file (TOML)") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    _unknown(ctx, data, _TOP_KEYS, "top-level")
    if data.get("format") != FORMAT_VERSION:
        ctx.fail("format", f"{FORMAT_VERSION} (the scenario format version)", data.get("format"))
    pool = data.get("pool")
    if not isinstance(pool, Mapping):
        ctx.fail("pool", "a [pool] table", pool)
        pool = {}
    ctx.where = "pool."
    _unknown(ctx, pool, _POOL_KEYS, "pool")
    if pool.get("type") not in POOL_TYPES:
        ctx.fail("type", f"one of {sorted(POOL_TYPES)}", pool.get("type"))
    elif not isinstance(pool.get("params", {}), Mapping):
        ctx.fail("params", "a table of pool parameters", pool.get("params"))
    else:
        accepted = accepted_params(str(pool["type"]))
        for key in pool.get("params", {}):
            if key not in accepted:
                ctx.fail(f"params.{key}", f"a parameter of {pool['type']} ({sorted(accepted)})",
                         None)
    ctx.where = ""
    defaults = data.get("defaults", {})
    if not isinstance(defaults, Mapping):
        ctx.fail("defaults", "a table", defaults)
        defaults = {}
    scenarios = data.get("scenario")
    if not isinstance(scenarios, list) or not scenarios:
        ctx.fail("scenario", "at least one [[scenario]] table", None)
        scenarios = []
    if ctx.errors:
        raise ScenarioError("\n".join(ctx.errors))
    rel = file_id(path, given)
    out = []
    for i, raw in enumerate(scenarios):
        sc = _resolve(ctx, raw, pool, defaults, i, rel)
        if sc is not None:
            out.append(sc)
    names = [s.name for s in out]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        ctx.where = ""
        ctx.fail("scenario.name", "names unique within a file", dup)
    if ctx.errors:
        raise ScenarioError("\n".join(ctx.errors))
    return out


def bundled_root() -> Path:
    """The folder of the scenario files shipped with kvreg."""
    return catalog_folder()


def discover(paths: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(file, folder given) for every .toml under the given files or folders, sorted; a
    file reached twice (``kvreg run kv kv/mla``, or through a symlink) is loaded once, as
    pytest collects a file given twice once."""
    found: list[tuple[Path, Path]] = []
    seen: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(p.rglob("*.toml"))
            if not files:
                raise ScenarioError(f"{p}: no scenario files (*.toml) under this folder")
            pairs = [(f, p) for f in files]
        elif p.exists():
            pairs = [(p, p.parent)]
        else:
            raise ScenarioError(f"{p}: no such file or folder")
        for f, given in pairs:
            if f.resolve() not in seen:
                seen.add(f.resolve())
                found.append((f, given))
    return found


def load_paths(paths: Iterable[Path] | None = None) -> list[Scenario]:
    """Every scenario under ``paths`` (the bundled catalog when None); all files validated."""
    targets = list(paths) if paths else [bundled_root()]
    problems: list[str] = []
    out: list[Scenario] = []
    for file, given in discover(targets):
        try:
            out += load_file(file, given)
        except ScenarioError as exc:
            problems.append(str(exc))
    if problems:
        raise ScenarioError("\n".join(problems))
    return out
