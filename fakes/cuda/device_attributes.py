"""The whole ``cudaDeviceAttr`` table per device, with a source label for every value.

Feature probes read attributes the registration code never thinks about (managed memory 83,
sparse arrays 112, memory pools 115, ...); an InvalidValue for a valid attribute reads as
"unsupported" and sets the last error. So every member of ``cudaDeviceAttr`` has an answer
here (``data/device_attributes.tsv``): a value labelled [DOC] (NVIDIA's compute-capability
tables and device documentation, named in the source column) or [INF], the profile field
it follows (91, 99, 113: docs/cuda-runtime.md §2.1, §4), or "unsupported" for the reserved
members, which the driver rejects with cudaErrorInvalidValue [INF]. A profile may override
single values (``DeviceProfile.attribute_overrides``), e.g. with what the real-hardware tier
recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .profile import DeviceProfile

__all__ = ["DEVICES", "AttributeRow", "attribute_mismatches", "attribute_table",
           "attribute_value"]

DEVICES = ("H200", "H100")


@dataclass(frozen=True)
class AttributeRow:
    """One attribute on one device: ``value`` None means unsupported (-> InvalidValue)."""

    attr: int
    name: str
    value: int | None
    label: str          # "DOC" | "INF"
    profile_field: str | None
    source: str


def _cell(attr: int, name: str, text: str, source: str) -> AttributeRow:
    body, _, label = text.rpartition(" [")
    label = label.rstrip("]")
    if label not in ("DOC", "INF"):
        raise ValueError(f"attribute {attr} ({name}): label must be [DOC] or [INF], got {text!r}")
    if body.startswith("profile:"):
        return AttributeRow(attr, name, None, label, body.removeprefix("profile:"), source)
    value = None if body == "-" else int(body, 0)
    return AttributeRow(attr, name, value, label, None, source)


@cache
def attribute_table(device: str) -> dict[int, AttributeRow]:
    """attr -> row for one device model (``DEVICES``)."""
    if device not in DEVICES:
        raise ValueError(f"unknown device model {device!r}; known: {', '.join(DEVICES)}")
    text = resources.files("kvreg.fakes.cuda").joinpath("data", "device_attributes.tsv").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    header = lines[0].split("\t")
    column = header.index(device)
    out: dict[int, AttributeRow] = {}
    for line in lines[1:]:
        cells = line.split("\t")
        attr = int(cells[0])
        out[attr] = _cell(attr, cells[1], cells[column], cells[-1])
    return out


def attribute_value(profile: DeviceProfile, attr: int) -> int | None:
    """The value ``cudaDeviceGetAttribute(attr)`` reports, or None for InvalidValue."""
    overrides = profile.attribute_overrides
    if attr in overrides:
        return overrides[attr]
    row = attribute_table(profile.device_model).get(attr)
    if row is None:
        return None               # not a cudaDeviceAttr member
    if row.profile_field is not None:
        return int(getattr(profile, row.profile_field))
    return row.value


def attribute_mismatches(profile: DeviceProfile,
                         recorded: Mapping[int, int | None] | Mapping[str, int | None]
                         ) -> list[str]:
    """Where a real device's recorded attributes differ from the profile (for the report).

    ``recorded`` is the probe's ``attribute_table`` detail, as recorded or read back from
    JSON (string keys).
    """
    table = attribute_table(profile.device_model)
    out = []
    for attr, real in sorted((int(k), v) for k, v in recorded.items()):
        fake = attribute_value(profile, attr)
        if fake != real:
            row = table.get(attr)
            name = row.name if row else f"attribute {attr}"
            label = f" [{row.label}]" if row else ""
            out.append(f"{name} ({attr}): profile {fake}{label}, device {real}")
    return out
