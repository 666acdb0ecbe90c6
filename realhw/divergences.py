"""Known, accepted differences between the fake and real hardware, each with its reason.

A fidelity disagreement has two honest endings: the fake is
fixed — for an [UNC] behaviour that means the real run settles a ``DeviceProfile`` field,
see ``profile_from_report`` — or the difference is kept on purpose and written down here.
An entry names the probe it covers (None for a gap no probe can observe), the spec row, why
the fake stays as it is, and when it applies; the report marks a disagreement that an
entry explains as such, and counts every other one as unexplained.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DIVERGENCES", "Divergence", "explain"]

# what ``when`` sees: "fake" and "real" (Outcome), "capabilities" (Capabilities or None),
# "settled" (probe name -> the profile values the real outcome implies)
Context = Mapping[str, Any]


@dataclass(frozen=True)
class Divergence:
    name: str
    probe: str | None            # None: a gap no probe observes (listed for the record)
    spec: str
    reason: str
    keys: tuple[str, ...] = ()   # the observation keys it may differ in (empty: any)
    when: Callable[[Context], bool] | None = None

    def explains(self, probe: str, diff_keys: set[str], context: Context) -> bool:
        if self.probe != probe:
            return False
        if self.keys and not diff_keys <= set(self.keys):
            return False
        return self.when is None or bool(self.when(context))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "probe": self.probe, "spec": self.spec,
                "reason": self.reason, "keys": list(self.keys)}


def _privileged(context: Context) -> bool:
    details = getattr(context.get("real"), "details", {}) or {}
    return bool(details.get("cap_ipc_lock")) or details.get("euid") == 0


def _real_failed(key: str) -> Callable[[Context], bool]:
    def when(context: Context) -> bool:
        real = context.get("real")
        return bool(getattr(real, "observation", {}).get(key))
    return when


def _aarch64(context: Context) -> bool:
    caps = context.get("capabilities")
    return getattr(caps, "arch", "") in ("aarch64", "arm64")


def _copy_apis_differ(context: Context) -> bool:
    settled = context.get("settled", {})
    a = settled.get("copy_across_async", {}).get("copy_across_registrations")
    b = settled.get("copy_across_batch", {}).get("copy_across_registrations")
    return a is not None and b is not None and a != b


DIVERGENCES: tuple[Divergence, ...] = (
    Divergence(
        "verbs-memlock-privileged", "mr_memlock",
        "docs/mooncake-verbs.md §5.2 (RLIMIT_MEMLOCK row)",
        "The fake node models an unprivileged process. A process with CAP_IPC_LOCK (root in "
        "most containers) is not limited by RLIMIT_MEMLOCK, so the real MR succeeds where the "
        "fake says ENOMEM. Deployments run unprivileged, where the fake's answer holds.",
        keys=("errno",), when=_privileged),
    Divergence(
        "cuda-memlock-not-modelled", "memlock", "docs/cuda-runtime.md §12.9 [INF]",
        "The fake CUDA driver does not read RLIMIT_MEMLOCK (the spec expects the driver to "
        "ignore it). If the real driver enforces it, a registration above the limit fails on "
        "the machine and succeeds on the fake: size pools to `ulimit -l` on such machines.",
        keys=("register", "unregister"), when=_real_failed("register")),
    Divergence(
        "grace-unregistered-device-pointer", "pointer_attributes_malloc",
        "docs/cuda-runtime.md §4 (Grace-Hopper devicePointer)",
        "On Grace-class systems (ATS) the devicePointer of plain host memory is usable; the "
        "fake models x86, where it is NULL. No registration rule depends on it.",
        keys=("dev",), when=_aarch64),
    Divergence(
        "copy-across-one-switch", "copy_across_async", "docs/cuda-runtime.md §5.4 [UNC]",
        "DeviceProfile.copy_across_registrations is one switch for both copy APIs; when the "
        "hardware answers differently per API, the profile follows cudaMemcpyBatchAsync (the "
        "path KV-cache transfers use) and cudaMemcpyAsync disagrees.",
        keys=("copy", "sync"), when=_copy_apis_differ),
    Divergence(
        "injected-fault-last-error", None, "docs/cuda-runtime.md §6",
        "An injected fault is answered by the recorder before the real runtime is called, so "
        "on real hardware it does not land in the runtime's last-error slot (the fake puts it "
        "there). cudaGetLastError after an injected failure returns 0 on RealCuda."),
    Divergence(
        "torch-last-error-unreadable", None, "docs/cuda-runtime.md §6, §7",
        "torch exposes no cudaGetLastError, so no probe can read torch's pending error "
        "directly; per_runtime_pending_error records, as a detail, whether the next torch "
        "op raises it."),
    Divergence(
        "fake-copies-move-no-bytes", None, "docs/cuda-runtime.md §5",
        "The fake validates copies (codes and failIdx) but its device memory is simulated, "
        "so no bytes move; probes compare codes only, never copied data."),
)


def explain(probe: str, diff_keys: set[str], context: Context) -> Divergence | None:
    """The documented divergence that accounts for this disagreement, if any."""
    for entry in DIVERGENCES:
        if entry.explains(probe, diff_keys, context):
            return entry
    return None
