"""Element types that KV pools use, by name and itemsize.

Virtual buffers and pool geometries must agree on sizes without importing torch, so the
table lives here and accepts torch dtypes (``torch.float16``) and plain names alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DTYPES", "DType", "as_dtype"]


@dataclass(frozen=True)
class DType:
    """An element type: its canonical torch-style name and its size in bytes."""

    name: str
    itemsize: int

    def __str__(self) -> str:
        return f"torch.{self.name}"


_TABLE: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
_ALIASES = {
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "float": "float32",
    "fp32": "float32",
    "double": "float64",
    "fp8": "float8_e4m3fn",
    "byte": "uint8",
    "long": "int64",
    "int": "int32",
}

DTYPES: dict[str, DType] = {name: DType(name, size) for name, size in _TABLE.items()}


def as_dtype(value: Any) -> DType:
    """Return the DType for a name, a DType, or a torch / numpy dtype object.

    Raises TypeError for objects that are no dtype and ValueError for unknown names, so a
    scenario or a geometry with a typo fails before anything is allocated.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        name = value.removeprefix("torch.")
    elif type(value).__module__ == "torch":
        name = str(value).removeprefix("torch.")
    elif hasattr(value, "itemsize") and hasattr(value, "name") and hasattr(value, "kind"):
        name = str(value.name)  # numpy dtype
    else:
        raise TypeError(f"expected a dtype name or dtype object, got {type(value).__name__}")
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        known = ", ".join(sorted(DTYPES))
        raise ValueError(f"unknown dtype {value!r}; known dtypes: {known}")
    return DTYPES[name]
