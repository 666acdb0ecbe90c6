"""What a fidelity probe is: its question, its outcome, how it runs and how two outcomes compare.

The probe bodies (:mod:`.probes_cuda`, :mod:`.probes_rdma`) and their contexts build on
these; the registry of every probe is :mod:`.probes`, which imports the bodies, so the bodies
never import the registry.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Family", "Outcome", "Probe", "ProbeError", "ProbeSkipped", "Verdict", "compare",
           "run_probe"]

Family = Literal["cuda", "rdma"]
Status = Literal["ok", "skipped", "error", "not run"]


class ProbeSkipped(Exception):
    """The probe cannot run on this backend; the message is the reason."""


class ProbeError(RuntimeError):
    """A step the probe relies on failed (for example cudaMalloc); not a fidelity finding."""


@dataclass(frozen=True)
class Probe:
    """One question: how to ask it, what the spec expects, which profile field it settles."""

    name: str
    family: Family
    check: str                 # the spec item it implements, e.g. "§12.1"
    spec: str                  # the spec row it checks, with its evidence label
    question: str
    expect: str                # the spec's expectation, in words
    body: Callable[[Any], None]
    fields: tuple[str, ...] = ()
    settle: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    def settles(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """The profile values this observation implies ({} when it implies none).

        A settle function leaves out what the observation does not decide; a value of None
        is a real answer (``per_call_limit=None``: no per-call ceiling).
        """
        if self.settle is None or not observation:
            return {}
        return dict(self.settle(observation))


@dataclass
class Outcome:
    """What one backend did: the compared observation, plus details that are only shown."""

    status: Status
    observation: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "observation": self.observation}
        if self.details:
            out["details"] = self.details
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(data["status"], dict(data.get("observation", {})),
                   dict(data.get("details", {})), str(data.get("reason", "")))


def run_probe(probe: Probe, context: Any) -> Outcome:
    """Run ``probe`` with a probe context (``CudaProbeContext`` / ``VerbsProbeContext``).

    The context is closed whatever happens, which unregisters what the probe registered:
    a failed probe must not leave a real driver with pinned memory. An exception that is
    not ProbeSkipped becomes an ``error`` outcome with the exception named.
    """
    try:
        probe.body(context)
        status: Status = "ok"
        reason = ""
    except ProbeSkipped as exc:
        status, reason = "skipped", str(exc)
    except Exception as exc:
        status = "error"
        reason = f"{type(exc).__name__}: {exc}"
        context.details["traceback"] = traceback.format_exc(limit=4)
    finally:
        cleanup = context.close()
    if cleanup:
        context.details["cleanup"] = cleanup
    if status == "skipped":
        return Outcome(status, {}, dict(context.details), reason)
    return Outcome(status, dict(context.observation), dict(context.details), reason)


Verdict = Literal["agree", "disagree", "skipped", "error"]


def compare(fake: Outcome, real: Outcome) -> tuple[Verdict, str]:
    """The verdict on one probe and, unless the backends agree, why.

    Observations are compared key by key and exactly (codes are ints; pointers were
    normalised by the probe). A backend that did not run makes the probe ``skipped``.
    """
    for label, out in (("fake", fake), ("real", real)):
        if out.status == "error":
            return "error", f"{label}: {out.reason}"
    for label, out in (("real", real), ("fake", fake)):
        if out.status in ("skipped", "not run"):
            return "skipped", f"{label} {out.status}: {out.reason}"
    if fake.observation == real.observation:
        return "agree", ""
    keys = sorted(set(fake.observation) | set(real.observation))
    diffs = [f"{k}: fake {fake.observation.get(k)!r}, real {real.observation.get(k)!r}"
             for k in keys if fake.observation.get(k) != real.observation.get(k)]
    return "disagree", "; ".join(diffs)
