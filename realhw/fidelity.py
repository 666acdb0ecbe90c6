"""Run every fidelity probe on the fake and, where it exists, on the hardware; judge each row.

This is differential checking: the same probe on both backends, the
observations compared exactly. The fake runs with the machine's *measured* facts fed in
(``profile_for``: versions, attributes 91/99/113) and the [UNC] switches at their defaults,
so a disagreement points at a guess of the fake, not at a version mismatch. A
disagreement on a probe that settles a profile field is then re-run on a fake built with
every settled value; when that fake agrees, the row is resolved by the profile (what
``profile_from_report`` builds). Otherwise a documented divergence may explain it; what
remains is unexplained and makes ``kvreg fidelity`` exit 1.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import DeviceProfile

from .backend import HardwareUnavailable, RealCuda
from .capabilities import Capabilities, detect, profile_for
from .divergences import DIVERGENCES, explain
from .probes import Outcome, Probe, all_probes, compare, run_probe
from .probes_cuda import CudaProbeContext
from .probes_rdma import VerbsProbeContext
from .verbs import FakeVerbs, RealVerbs

__all__ = ["AUTO", "SCHEMA", "merge_settled", "run_fidelity"]

SCHEMA = 1
AUTO: Any = "auto"
# when two probes settle one field differently, the behavioural probe wins
PREFERRED = {"copy_across_registrations": "copy_across_batch",
             "read_only_supported": "register_read_only"}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def merge_settled(settled: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """One value per profile field from every probe's settled values, and the conflicts."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    conflicts: list[str] = []
    for probe, fields in settled.items():
        for name, value in fields.items():
            if name in values and values[name] != value:
                keep = PREFERRED.get(name)
                conflicts.append(f"{name}: {source[name]} says {values[name]!r}, {probe} says "
                                 f"{value!r}; kept {keep or source[name]}'s")
                if keep != probe:
                    continue
            values[name], source[name] = value, probe
    return values, conflicts


def _cuda_real(real: Any, caps: Capabilities) -> tuple[Any, str | None]:
    if real is not AUTO:
        return real, None if real is not None else "not requested"
    missing = caps.missing_reason("gpu")
    return (None, missing) if missing else (RealCuda(), None)


def _verbs_real(real: Any, caps: Capabilities) -> tuple[Any, str | None]:
    if real is not AUTO:
        return real, None if real is not None else "not requested"
    missing = caps.missing_reason("rdma")
    if missing:
        return None, missing
    try:
        return RealVerbs(), None
    except HardwareUnavailable as exc:
        return None, str(exc)


def _outcomes(probes: list[Probe], fake: Callable[[], Any], real: Any, reason: str | None,
              context: Callable[[Any], Any]) -> dict[str, tuple[Outcome, Outcome]]:
    out = {}
    for probe in probes:
        fake_out = run_probe(probe, context(fake()))
        real_out = (run_probe(probe, context(real)) if real is not None
                    else Outcome("not run", reason=reason or "not run"))
        out[probe.name] = (fake_out, real_out)
    return out


def run_fidelity(*, real_cuda: Any = AUTO, real_verbs: Any = AUTO,
                 names: Iterable[str] | None = None, families: Iterable[str] = ("cuda", "rdma"),
                 capabilities: Capabilities | None = None) -> dict[str, Any]:
    """The fidelity report as a JSON-ready dict (see ``report.validate_report``).

    ``real_cuda`` / ``real_verbs``: AUTO uses the hardware when capability detection finds
    it; None runs the fake only; any backend object (a ``RealCuda`` over stand-in modules,
    even a ``FakeCuda`` with another profile) stands for the machine — how the tests check
    the whole pipeline without a GPU.
    """
    wanted = set(families)
    if capabilities is None:
        runtime = None
        if real_cuda not in (AUTO, None):
            runtime = getattr(real_cuda, "runtime_module", None) or real_cuda.runtime
        capabilities = detect(runtime, rdma="rdma" in wanted)
    caps = capabilities
    cuda_real, cuda_reason = _cuda_real(real_cuda, caps) if "cuda" in wanted else (None, "")
    verbs_real, verbs_reason = _verbs_real(real_verbs, caps) if "rdma" in wanted else (None, "")
    fake_profile = profile_for(caps) if cuda_real is not None else DeviceProfile()
    probes = all_probes(names=names)
    cuda_probes = [p for p in probes if p.family == "cuda" and "cuda" in wanted]
    rdma_probes = [p for p in probes if p.family == "rdma" and "rdma" in wanted]

    results = _outcomes(cuda_probes, lambda: FakeCuda(fake_profile), cuda_real, cuda_reason,
                        CudaProbeContext)
    if cuda_real is not None and hasattr(cuda_real, "release_all"):
        cuda_real.release_all()     # the safety net: nothing stays pinned after the run
    nic = getattr(verbs_real, "nic", None)
    results.update(_outcomes(rdma_probes, lambda: FakeVerbs.like(nic) if nic else FakeVerbs(),
                             verbs_real, verbs_reason, VerbsProbeContext))

    settled = {p.name: p.settles(results[p.name][1].observation) for p in probes
               if p.name in results and results[p.name][1].status == "ok" and p.fields}
    merged, conflicts = merge_settled(settled)
    settled_profile = fake_profile.replace(**merged) if merged else fake_profile
    rows = []
    for probe in probes:
        if probe.name not in results:
            continue
        fake_out, real_out = results[probe.name]
        verdict, why = compare(fake_out, real_out)
        row: dict[str, Any] = {
            "name": probe.name, "family": probe.family, "check": probe.check,
            "spec": probe.spec, "question": probe.question, "expect": probe.expect,
            "fields": list(probe.fields), "fake": fake_out.to_dict(),
            "real": real_out.to_dict(), "verdict": verdict, "why": why,
            "settles": settled.get(probe.name, {}), "resolution": None}
        if verdict == "disagree":
            row["resolution"] = _resolve(probe, fake_out, real_out, settled_profile, settled,
                                         caps)
        rows.append(row)
    return {
        "schema": SCHEMA,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"hostname": caps.hostname, "arch": caps.arch, "kernel": caps.kernel,
                    "python": platform.python_version(), "kvreg": _version("kvreg"),
                    "device": caps.device_name, "driver": caps.driver_text(),
                    "nic": getattr(verbs_real, "device", None), "describe": caps.describe()},
        "capabilities": caps.to_dict(),
        "real": {"cuda": {"ran": cuda_real is not None, "reason": cuda_reason,
                          "backend": type(cuda_real).__name__ if cuda_real else None},
                 "rdma": {"ran": verbs_real is not None, "reason": verbs_reason,
                          "device": getattr(verbs_real, "device", None)}},
        "fake_profile": fake_profile.to_dict(),
        "settled": merged,
        "settled_conflicts": conflicts,
        "probes": rows,
        "divergences": [d.to_dict() for d in DIVERGENCES],
        "summary": _summary(rows),
        "measurement": None,
    }


def _resolve(probe: Probe, fake_out: Outcome, real_out: Outcome, settled_profile: DeviceProfile,
             settled: dict[str, dict[str, Any]], caps: Capabilities) -> dict[str, Any] | None:
    """How a disagreement ends: fixed by the settled profile, a divergence, or None."""
    if probe.family == "cuda":
        again = run_probe(probe, CudaProbeContext(FakeCuda(settled_profile)))
        if again.status == "ok" and again.observation == real_out.observation:
            # a probe without fields of its own can still be fixed by another's (an
            # unaligned split fails to register when overlap is per page)
            return {"kind": "profile", "fields": {f: getattr(settled_profile, f)
                                                  for f in probe.fields}}
    keys = {k for k in set(fake_out.observation) | set(real_out.observation)
            if fake_out.observation.get(k) != real_out.observation.get(k)}
    found = explain(probe.name, keys, {"fake": fake_out, "real": real_out,
                                       "capabilities": caps, "settled": settled})
    return {"kind": "divergence", "name": found.name} if found else None


def _summary(rows: list[dict[str, Any]]) -> dict[str, int]:
    out = {"total": len(rows), "agree": 0, "disagree": 0, "skipped": 0, "error": 0,
           "resolved_by_profile": 0, "divergence": 0, "unexplained": 0}
    for row in rows:
        out[row["verdict"]] += 1
        if row["verdict"] == "disagree":
            kind = (row["resolution"] or {}).get("kind")
            key = {"profile": "resolved_by_profile", "divergence": "divergence"}.get(
                kind or "", "unexplained")
            out[key] += 1
    return out
