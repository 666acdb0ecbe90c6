"""A ``mooncake`` scenario's own options: their schema, validation and defaults, and the
process environment they fix (``MC_MAX_MR_SIZE`` as the store sees it at setup).

Options (the scenario's ``mooncake`` table), all optional:

- ``profile``: ``released`` (≤ v0.3.12.post1, default) or ``head`` (docs/mooncake-verbs.md §6.1)
- ``protocol``: ``rdma`` (default) or ``tcp``
- ``devices``: NIC name -> NIC profile (default ``{ mlx5_0 = "mlx5" }``)
- ``device_max_mr_size``: overrides every device's advertised max_mr_size
- ``mc_max_mr_size``: the ``MC_MAX_MR_SIZE`` environment value in bytes (unset by default)
- ``fastdeploy_clamp``: FastDeploy's 1–6 GiB clamp of it, written back to the env (§2.1)
- ``io``: ``auto`` (multi-buffer where a page has more pointers than keys), ``flat``, ``multi``
- ``merged``: one batch call for every member of a hybrid pool (newer SGLang, §3.4)
- ``pd``: also write every page from a prefill node into a decode node by RDMA WRITE
- ``limit``: ``given`` (default: register gets the effective MR limit as ``max_mr_size``) or
  ``own`` (it gets None and computes the limit itself: ``MC_MAX_MR_SIZE`` as the store saw it
  at setup is in the environment, and ``pyverbs`` reaches the node's NICs); an
  implementation that needs the limit given is skipped there, saying why
- ``teardown``: ``unregister`` (default: the implementation's teardown) or ``close`` (each
  teardown round closes the store, whose tearDownAll releases every MR, §1.1)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvreg.fakes.mooncake import STORE_PROFILES
from kvreg.fakes.verbs.profiles import get_nic_profile
from kvreg.harness.run.target import ProcessConfig

from .reference import effective_mr_limit

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["ENV_MR", "LIMITS", "TEARDOWNS", "MooncakeOptions", "process_config", "process_env",
           "validate_options"]

_IO = ("auto", "flat", "multi")
_BOOLS = ("fastdeploy_clamp", "merged", "pd")
_INTS = ("device_max_mr_size", "mc_max_mr_size")
_KNOWN = ("profile", "protocol", "devices", *_INTS, *_BOOLS, "io", "limit", "teardown")
LIMITS = ("given", "own")
TEARDOWNS = ("unregister", "close")
ENV_MR = "MC_MAX_MR_SIZE"


@dataclass(frozen=True)
class MooncakeOptions:
    """A scenario's ``mooncake`` table, with defaults."""

    profile: str = "released"
    protocol: str = "rdma"
    devices: tuple[tuple[str, str], ...] = (("mlx5_0", "mlx5"),)
    device_max_mr_size: int | None = None
    mc_max_mr_size: int | None = None
    fastdeploy_clamp: bool = False
    io: str = "auto"
    merged: bool = False
    pd: bool = False
    limit: str = "given"
    teardown: str = "unregister"

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> MooncakeOptions:
        """Options already checked by :func:`validate_options`."""
        kw = dict(options)
        if "devices" in kw:
            kw["devices"] = tuple((str(k), str(v)) for k, v in kw["devices"].items())
        return cls(**kw)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The pool under test is on the first node (the decode node for PD)."""
        return ("decode", "prefill") if self.pd else ("node0",)


def validate_options(options: Mapping[str, Any]) -> list[str]:
    """Problems with a scenario's ``mooncake`` table (empty list when valid)."""
    problems = [f"one of the fields {list(_KNOWN)}, not {k!r}" for k in options
                if k not in _KNOWN]
    profile = options.get("profile", "released")
    if profile not in STORE_PROFILES:
        problems.append(f"profile = one of {sorted(STORE_PROFILES)} (got {profile!r})")
    protocol = options.get("protocol", "rdma")
    if protocol not in ("rdma", "tcp"):
        problems.append(f"protocol = 'rdma' or 'tcp' (got {protocol!r})")
    problems += _device_problems(options.get("devices", {"mlx5_0": "mlx5"}))
    problems += _value_problems(options)
    if options.get("pd") is True:
        if profile == "head":
            problems.append("pd with profile 'released': at HEAD register_buffer registers "
                            "LOCAL_WRITE only and publishes no rkey (§1.5, #3151), so no "
                            "remote node can write into it")
        if protocol != "rdma":
            problems.append("pd with protocol 'rdma' (RDMA WRITE needs MRs)")
    return problems


def _device_problems(devices: Any) -> list[str]:
    if not isinstance(devices, Mapping) or not devices:
        return [f"devices = a table of NIC name -> NIC profile (got {devices!r})"]
    problems = []
    for name, prof in devices.items():
        try:
            get_nic_profile(prof)
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"devices.{name} = a NIC profile ({exc})")
    return problems


def _value_problems(options: Mapping[str, Any]) -> list[str]:
    """The byte counts, the switches and the one-of fields."""
    problems = []
    for key in _INTS:
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < (0 if key == "mc_max_mr_size" else 1)):
            problems.append(f"{key} = a byte count (got {value!r})")
    for key in _BOOLS:
        if not isinstance(options.get(key, False), bool):
            problems.append(f"{key} = true or false (got {options[key]!r})")
    for key, default, allowed in (("limit", "given", LIMITS), ("teardown", "unregister",
                                                               TEARDOWNS), ("io", "auto", _IO)):
        if options.get(key, default) not in allowed:
            problems.append(f"{key} = one of {list(allowed)} (got {options[key]!r})")
    return problems


def process_env(opts: MooncakeOptions) -> dict[str, str]:
    """``MC_MAX_MR_SIZE`` as the store sees it at setup (unset unless the scenario says)."""
    env: dict[str, str] = {}
    if opts.fastdeploy_clamp:
        # FastDeploy's v1 connector writes the clamped value back before setup (§2.1)
        env[ENV_MR] = str(effective_mr_limit(opts.mc_max_mr_size, (),
                                             protocol="tcp", fastdeploy_clamp=True))
    elif opts.mc_max_mr_size:
        env[ENV_MR] = str(opts.mc_max_mr_size)
    return env


def process_config(sc: Scenario) -> ProcessConfig:
    """``MC_MAX_MR_SIZE`` and the deployment's store profile and NICs (code may read them
    once: the variable at import, a NIC's max_mr_size into a module cache)."""
    opts = MooncakeOptions.parse(sc.options)
    env = process_env(opts)
    machine = (opts.profile, opts.devices, opts.device_max_mr_size, opts.pd)
    return ProcessConfig("mooncake", ((ENV_MR, env.get(ENV_MR)),), machine)
