"""Which scenarios can run on this machine's real driver, and why the others cannot.

A scenario on the fake may pin 4 TiB of virtual memory; a real driver pins real pages. So
before a scenario meets real hardware it is sized: it runs when its pool fits in free
memory (with headroom), and is skipped with a reason that gives both sizes otherwise.
Shrinking a pool is not offered: a scenario's point is usually the ratio of pool to chunk
limit (a seam on a page, the last partial chunk), and SGLang's limit comes in whole GiB, so
a smaller pool would test something else. Scenarios that say they are fake-only, that
target the fake Mooncake store, or that emulate a device whose facts differ from this
machine (WSL2's device aliases, a pre-R580 driver) are skipped with that reason.

Only the generic parts of a scenario are read (backends, target, memory, profile, pool
size): the tier knows nothing of pool layouts (ARCHITECTURE.md#the-rooms-of-harness).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from kvreg.fakes.cuda.profile import DeviceProfile, get_profile

from .capabilities import Capabilities, profile_for

__all__ = ["FACTS", "RealPlan", "plan_catalog", "plan_for_real"]

GiB = 1 << 30
HEADROOM = 8 * GiB
# profile fields that are facts of a machine: a scenario emulating other values would
# expect behaviour this machine cannot show
FACTS = ("env", "can_use_host_pointer_for_registered_mem", "per_call_limit", "bindings_major",
         "read_only_supported")


@dataclass(frozen=True)
class RealPlan:
    scenario: str
    action: Literal["run", "skip"]
    reason: str
    bytes_needed: int


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def plan_for_real(scenario: Any, caps: Capabilities, *, headroom: int = HEADROOM,
                  machine: DeviceProfile | None = None) -> RealPlan:
    """Run or skip ``scenario`` (a ``kvreg.harness.scenario.Scenario``) on this machine."""
    sid = str(scenario.id)
    if "cuda" not in scenario.backends:
        return RealPlan(sid, "skip", "fake-only scenario (backends = "
                        f"{list(scenario.backends)}): it needs the fake's virtual memory or "
                        "a behaviour no real device can be made to show", 0)
    if getattr(scenario, "target", "cuda") != "cuda":
        return RealPlan(sid, "skip", f"target {scenario.target!r} runs on the fake store only",
                        0)
    missing = caps.missing_reason("gpu")
    if missing:
        return RealPlan(sid, "skip", missing, 0)
    machine = machine or profile_for(caps)
    wanted = get_profile(scenario.profile)
    differ = [f"{f}={getattr(wanted, f)!r} (machine: {getattr(machine, f)!r})" for f in FACTS
              if getattr(wanted, f) != getattr(machine, f)]
    if differ:
        return RealPlan(sid, "skip", f"emulates profile {wanted.name!r}, whose facts differ "
                        f"from this machine: {', '.join(differ)}", 0)
    need = 0 if scenario.empty else sum(s.nbytes for s in scenario.geometry().buffers())
    budget = caps.host_memory_available - headroom
    if need > budget:
        return RealPlan(sid, "skip", f"needs {_gib(need)} of host memory to pin; this machine "
                        f"has {_gib(caps.host_memory_available)} available ({_gib(headroom)} "
                        "kept free)", need)
    how = "virtual pool materialised as real memory" if scenario.memory == "virtual" else \
        "real memory"
    return RealPlan(sid, "run", f"{_gib(need)}, {how}", need)


def plan_catalog(scenarios: Iterable[Any], caps: Capabilities, *,
                 headroom: int = HEADROOM) -> list[RealPlan]:
    """``plan_for_real`` for many scenarios, with the machine's profile computed once."""
    machine = profile_for(caps)
    return [plan_for_real(s, caps, headroom=headroom, machine=machine) for s in scenarios]
