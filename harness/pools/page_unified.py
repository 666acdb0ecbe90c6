"""SGLang 0.5.23's ``page_unified`` host layout: one page block per page, K and V inside it.

Facts: docs/pools.md §2.11 (``pool_host/page_unified.py`` ``PageUnifiedLayout`` and the
``init_kv_buffer`` branches of ``pool_host/mha.py`` / ``pool_host/mla.py`` in the 0.5.23 wheel).
A page block is ``(head_group, layer, component, page_size, head_in_group, head_dim)`` for MHA
and ``(layer, page_size, head_dim)`` for MLA; the pool passes one block as its granularity.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import GeometryError, check_positive_int

__all__ = ["PAGE_UNIFIED", "PageBlock"]

PAGE_UNIFIED = "page_unified"
# the page_unified transfer kernels move one head group's token row as 16-byte vectors
_VECTOR_BYTES = 16


@dataclass(frozen=True)
class PageBlock:
    """The byte arithmetic of one page block (``PageUnifiedLayout`` in SGLang 0.5.23)."""

    page_size: int
    layer_num: int
    head_num: int
    head_group_num: int
    head_dim: int
    itemsize: int
    is_mla: bool = False

    def __post_init__(self) -> None:
        for name in ("page_size", "layer_num", "head_num", "head_group_num", "head_dim",
                     "itemsize"):
            check_positive_int(name, getattr(self, name))
        if self.head_num % self.head_group_num:
            raise GeometryError(f"head_group_num={self.head_group_num} must divide the pool's "
                                f"{self.head_num} kv heads (page_unified, docs/pools.md §2.11)")
        if self.is_mla and (self.head_num, self.head_group_num) != (1, 1):
            raise GeometryError("MLA page_unified blocks have no head axis (docs/pools.md §2.11)")
        if self.group_bytes % _VECTOR_BYTES:
            raise GeometryError(
                f"one head group's token row is {self.group_bytes} bytes, which the "
                f"page_unified transfer kernels cannot move: they require a multiple of "
                f"{_VECTOR_BYTES} (docs/pools.md §2.11)")

    @property
    def components(self) -> int:
        """2 (K and V) for MHA, 1 (the latent cache) for MLA."""
        return 1 if self.is_mla else 2

    @property
    def group_bytes(self) -> int:
        """One head group's row of one token."""
        return self.head_num // self.head_group_num * self.head_dim * self.itemsize

    @property
    def bytes_per_page(self) -> int:
        """One whole page block: the granularity the pool passes and the copy unit."""
        return (self.head_group_num * self.layer_num * self.components * self.page_size
                * self.group_bytes)

    def dims(self, page_num: int) -> tuple[int, ...]:
        """The buffer's shape; its C order is the byte order."""
        if self.is_mla:
            return (page_num, self.layer_num, self.page_size, self.head_dim)
        return (page_num, self.head_group_num, self.layer_num, self.components, self.page_size,
                self.head_num // self.head_group_num, self.head_dim)
