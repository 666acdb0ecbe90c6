"""Fault plans: named points, counted or seeded triggers, and actions that stay realistic.

Points are ``family.api`` names (``cudart.cudaHostRegister``) with ``*`` groups
(``cudart.*``, ``*``), after libfiu and fail-rs. A rule fires on
the nth matching call, after N calls, K times, when a predicate on the arguments holds, or
with a probability that **requires** a seed, so every run can be repeated. An injected error
code must be one the API can really return (``errors.API_ERRORS``): a plan that makes
``cudaHostUnregister`` return "out of memory" is rejected when it is armed.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .cuda import errors as E

__all__ = ["FAULT_POINTS", "CallInfo", "FaultPlan", "FaultPlanError", "FaultRule",
           "error_name_for", "register_points"]


class FaultPlanError(ValueError):
    """A fault plan that cannot be honoured: unknown point, impossible code, bad trigger."""


# point name -> the error codes that API can really return (None: it raises, not returns)
FAULT_POINTS: dict[str, frozenset[int] | None] = {
    f"cudart.{api}": codes for api, codes in E.API_ERRORS.items()
}


# point -> (name or code -> code, code -> name); points not listed use the CUDA error table
_RESOLVERS: dict[str, tuple[Callable[[Any], int], Callable[[int], str]]] = {}


def register_points(points: Mapping[str, frozenset[int] | None], *,
                    code_for: Callable[[Any], int] | None = None,
                    error_name: Callable[[int], str] | None = None) -> None:
    """Let another fake family (verbs, mooncake) declare its points and valid codes.

    ``code_for``/``error_name`` say how that family names its codes (errno names such as
    "EINVAL" for verbs, ErrorCode names such as "TRANSFER_FAIL" for Mooncake); without them
    the CUDA error table is used.
    """
    FAULT_POINTS.update(points)
    if code_for is not None:
        for point in points:
            _RESOLVERS[point] = (code_for, error_name or str)


def _resolver(point: str) -> tuple[Callable[[Any], int], Callable[[int], str]]:
    return _RESOLVERS.get(point, (E.code_for, E.error_name))


def error_name_for(point: str, code: int) -> str:
    """The name of ``code`` in the family of ``point`` (a point or a ``*`` pattern)."""
    for known in FAULT_POINTS:
        if known == point or fnmatch.fnmatchcase(known, point):
            return _resolver(known)[1](code)
    return E.error_name(code)


@dataclass(frozen=True)
class CallInfo:
    """What a predicate sees of one call."""

    point: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    ptr: int | None = None
    size: int | None = None
    offset: int | None = None   # ptr relative to the buffer that owns it, when known
    buffer: str | None = None


def _int_args(args: tuple[Any, ...]) -> list[int]:
    return [a for a in args if isinstance(a, int) and not isinstance(a, bool)]


@dataclass
class FaultRule:
    """One armed fault. ``calls`` counts matching calls; ``fired`` counts injections."""

    point: str
    error: int | None = None
    raise_: BaseException | type[BaseException] | None = None
    delay: float = 0.0
    nth: int | None = None
    after: int | None = None
    times: int | None = None
    predicate: Callable[[CallInfo], bool] | None = None
    probability: float | None = None
    seed: int | None = None
    calls: int = 0
    fired: int = 0
    _rng: random.Random | None = field(default=None, repr=False)
    # an error given by name applies only to the points whose family knows that name
    only: frozenset[str] | None = None

    def matches_point(self, point: str) -> bool:
        return point == self.point or fnmatch.fnmatchcase(point, self.point)

    def applies_to(self, point: str) -> bool:
        """A group rule skips APIs that cannot return its code."""
        if not self.matches_point(point):
            return False
        if self.only is not None and point not in self.only:
            return False
        if self.error is None:
            return True
        codes = FAULT_POINTS.get(point)
        return codes is None or self.error in codes

    def should_fire(self, info: CallInfo) -> bool:
        if self.predicate is not None and not self.predicate(info):
            return False
        self.calls += 1
        if self.times is not None and self.fired >= self.times:
            return False
        if self.nth is not None and self.calls < self.nth:
            return False
        if self.after is not None and self.calls <= self.after:
            return False
        if self.probability is not None:
            assert self._rng is not None
            if self._rng.random() >= self.probability:
                return False
        self.fired += 1
        return True

    def describe(self) -> str:
        if self.raise_ is not None:
            action = f"raise {self.raise_!r}"
        elif self.error is not None:
            action = f"return {error_name_for(self.point, self.error)} ({self.error})"
        else:
            action = "pass through"
        if self.delay:
            action = f"delay {self.delay}s, then {action}"
        trig = []
        if self.nth is not None:
            trig.append(f"call #{self.nth}")
        if self.after is not None:
            trig.append(f"after {self.after} calls")
        if self.times is not None:
            trig.append(f"{self.times} time(s)")
        if self.probability is not None:
            trig.append(f"p={self.probability} seed={self.seed}")
        if self.predicate is not None:
            trig.append("when predicate holds")
        return f"{self.point}: {action} on {', '.join(trig) or 'every call'} (fired {self.fired})"


class FaultPlan:
    """The faults armed for one test or scenario; thread-safe, never global."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()
        # per point: the rules that apply to it and whether a predicate of theirs reads the
        # call's buffer (both fixed once armed; rebuilt when a rule or a point is added)
        self._by_point: dict[str, tuple[tuple[FaultRule, ...], bool]] = {}
        self._points_known = len(FAULT_POINTS)
        self.seed = 0   # default seed a test or scenario hands to its random rules

    def __bool__(self) -> bool:
        return bool(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    @property
    def rules(self) -> list[FaultRule]:
        return list(self._rules)

    def arm(self, point: str, *, error: int | str | Any = None,
            raise_: BaseException | type[BaseException] | None = None, delay: float = 0.0,
            nth: int | None = None, after: int | None = None, times: int | None = None,
            predicate: Callable[[CallInfo], bool] | None = None,
            probability: float | None = None, seed: int | None = None) -> FaultRule:
        """Arm a fault; every argument is checked before the plan changes."""
        matched = self._matching_points(point)
        code: int | None = None
        only: frozenset[str] | None = None
        if error is not None:
            code, only = self._resolve_error(point, matched, error)
            candidates = sorted(only) if only is not None else matched
            valid = [p for p in candidates
                     if (codes := FAULT_POINTS[p]) is None or code in codes]
            if not valid:
                allowed = sorted(set().union(*(FAULT_POINTS[p] or () for p in candidates)))
                name = error_name_for(candidates[0], code)
                names = ", ".join(f"{c} {error_name_for(candidates[0], c)}" for c in allowed)
                raise FaultPlanError(
                    f"{point} cannot return {code} ({name}); "
                    f"codes it can really return: {names}")
            if code == 0:
                raise FaultPlanError(f"fault on {point!r}: error 0 is success, not a fault")
        if error is None and raise_ is None and not delay:
            raise FaultPlanError(f"fault on {point!r} needs an action: error, raise_ or delay")
        for label, value in (("nth", nth), ("after", after), ("times", times)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < (1 if label == "nth" else 0)):
                raise FaultPlanError(f"fault on {point!r}: {label} must be a "
                                     f"{'positive' if label == 'nth' else 'non-negative'} "
                                     f"int, got {value!r}")
        if nth is not None and times is None:
            times = 1
        if probability is not None:
            if not 0.0 <= probability <= 1.0:
                raise FaultPlanError(f"fault on {point!r}: probability must be in [0, 1]")
            if seed is None:
                raise FaultPlanError(f"fault on {point!r}: a probability needs a seed, so the "
                                     "run can be repeated")
        if delay < 0:
            raise FaultPlanError(f"fault on {point!r}: delay must be >= 0")
        rule = FaultRule(point, code, raise_, float(delay), nth, after, times, predicate,
                         probability, seed, only=only)
        if probability is not None:
            rule._rng = random.Random(seed)
        with self._lock:
            self._rules.append(rule)
            self._by_point.clear()
        return rule

    def arm_from_dict(self, spec: Mapping[str, Any]) -> FaultRule:
        """Arm from a scenario-file table: ``{point, error, nth, after, times, ...}``."""
        known = {"point", "error", "nth", "after", "times", "probability", "seed", "delay",
                 "raise", "when"}
        unknown = set(spec) - known
        if unknown:
            raise FaultPlanError(f"unknown fault field(s) {sorted(unknown)}; "
                                 f"known: {sorted(known)}")
        if "point" not in spec:
            raise FaultPlanError("a fault needs a 'point'")
        raise_: BaseException | None = None
        if "raise" in spec:
            raise_ = RuntimeError(str(spec["raise"]))
        where = f"fault on {spec['point']!r}"
        for key in ("delay", "probability"):     # a file's string or table: one line, no crash
            if key in spec and (isinstance(spec[key], bool)
                                or not isinstance(spec[key], int | float)):
                raise FaultPlanError(f"{where}: {key} must be a number, got {spec[key]!r}")
        if "when" in spec and not isinstance(spec["when"], Mapping):
            raise FaultPlanError(f"{where}: when must be a table, got {spec['when']!r}")
        predicate = _predicate_from(spec["when"]) if "when" in spec else None
        return self.arm(str(spec["point"]), error=spec.get("error"), raise_=raise_,
                        delay=float(spec.get("delay", 0.0)), nth=spec.get("nth"),
                        after=spec.get("after"), times=spec.get("times"),
                        predicate=predicate, probability=spec.get("probability"),
                        seed=spec.get("seed"))

    def check(self, info: CallInfo) -> FaultRule | None:
        """The rule that fires for this call, if any (the first armed one wins)."""
        with self._lock:
            return self._fire(self._for_point(info.point)[0], info)

    def check_call(self, point: str, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   resolve: Callable[[int], tuple[str, int] | None] | None = None
                   ) -> FaultRule | None:
        """:meth:`check` of :func:`call_info`'s view of a call, built only where a rule
        applies to ``point``, its pointer, size and buffer read only where a predicate reads
        the call (a fake's every call passes here; the call budget's predicate reads none)."""
        with self._lock:
            rules, reads = self._for_point(point)
            if not rules:
                return None
            info = call_info(point, args, kwargs, resolve) if reads else \
                CallInfo(point, args, kwargs)
            return self._fire(rules, info)

    def _for_point(self, point: str) -> tuple[tuple[FaultRule, ...], bool]:
        if self._points_known != len(FAULT_POINTS):
            self._by_point.clear()
            self._points_known = len(FAULT_POINTS)
        hit = self._by_point.get(point)
        if hit is None:
            rules = tuple(r for r in self._rules if r.applies_to(point))
            reads = any(r.predicate is not None and getattr(r.predicate, "reads_call", True)
                        for r in rules)
            hit = self._by_point[point] = (rules, reads)
        return hit

    @staticmethod
    def _fire(rules: tuple[FaultRule, ...], info: CallInfo) -> FaultRule | None:
        fired = None
        for rule in rules:
            if fired is None:
                if rule.should_fire(info):
                    fired = rule
            elif rule.predicate is None or rule.predicate(info):
                rule.calls += 1  # counted, though an earlier rule took this call
        return fired

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._by_point.clear()

    def describe(self) -> list[str]:
        return [r.describe() for r in self._rules]

    @staticmethod
    def _resolve_error(point: str, matched: list[str],
                       error: Any) -> tuple[int, frozenset[str] | None]:
        """A code from an int, an enum or a name in the family of the matched points."""
        if not isinstance(error, str):
            try:
                return E.code_for(error), None
            except (TypeError, ValueError) as exc:
                raise FaultPlanError(f"fault on {point!r}: {exc}") from None
        by_point: dict[str, int] = {}
        problems: list[str] = []
        for p in matched:
            try:
                by_point[p] = _resolver(p)[0](error)
            except (TypeError, ValueError) as exc:
                problems.append(str(exc))
        if not by_point:
            raise FaultPlanError(f"fault on {point!r}: {problems[0]}")
        codes = set(by_point.values())
        if len(codes) > 1:
            raise FaultPlanError(f"fault on {point!r}: error name {error!r} means different "
                                 f"codes in the matched families ({sorted(codes)}); "
                                 "narrow the point")
        return codes.pop(), frozenset(by_point)

    @staticmethod
    def _matching_points(point: str) -> list[str]:
        if not isinstance(point, str) or not point:
            raise FaultPlanError(f"a fault point must be a non-empty str, got {point!r}")
        matched = [p for p in FAULT_POINTS if p == point or fnmatch.fnmatchcase(p, point)]
        if not matched:
            close = difflib.get_close_matches(point, FAULT_POINTS, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise FaultPlanError(f"unknown fault point {point!r}{hint} "
                                 f"(known: {', '.join(sorted(FAULT_POINTS))})")
        return matched


def _predicate_from(when: Mapping[str, Any]) -> Callable[[CallInfo], bool]:
    """Predicates a scenario file can state: bounds on size and buffer offset."""
    tests: list[Callable[[CallInfo], bool]] = []
    ops: dict[str, Callable[[CallInfo, int], bool]] = {
        "size_ge": lambda c, v: c.size is not None and c.size >= v,
        "size_lt": lambda c, v: c.size is not None and c.size < v,
        "size": lambda c, v: c.size == v,
        "offset": lambda c, v: c.offset == v,
        "offset_ge": lambda c, v: c.offset is not None and c.offset >= v,
        "offset_lt": lambda c, v: c.offset is not None and c.offset < v,
    }
    for key, value in when.items():
        if key == "buffer":
            tests.append(functools.partial(_buffer_is, value))
            continue
        if key not in ops:
            raise FaultPlanError(f"unknown 'when' condition {key!r}; known: "
                                 f"{sorted([*ops, 'buffer'])}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise FaultPlanError(f"'when.{key}' must be an int, got {value!r}")
        op = ops[key]
        tests.append(functools.partial(_op_holds, op, value))
    return lambda c: all(t(c) for t in tests)


def _buffer_is(name: Any, c: CallInfo) -> bool:
    return bool(c.buffer == name)


def _op_holds(op: Callable[[CallInfo, int], bool], value: int, c: CallInfo) -> bool:
    return op(c, value)


def call_info(point: str, args: tuple[Any, ...], kwargs: Mapping[str, Any],
              resolve: Callable[[int], tuple[str, int] | None] | None = None) -> CallInfo:
    """Build a CallInfo: first int arg is the pointer, second the size (register-like APIs)."""
    ints = _int_args(args)
    ptr = ints[0] if ints else None
    size = ints[1] if len(ints) > 1 else None
    buffer = offset = None
    if ptr is not None and resolve is not None:
        hit = resolve(ptr)
        if hit is not None:
            buffer, offset = hit
    return CallInfo(point, args, kwargs, ptr, size, offset, buffer)


def iter_points(prefix: str) -> Iterable[str]:
    return (p for p in FAULT_POINTS if p.startswith(prefix))
