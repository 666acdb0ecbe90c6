"""A user's own host KV pool class, shaped like SGLang's MHATokenToKVPoolHost (page_first):
it allocates its buffer, registers it in chunks of whole pages, and unregisters in destroy()."""

from __future__ import annotations

import os

import torch


class HostKVPool:
    def __init__(self, layer_num: int, head_num: int, head_dim: int, page_size: int,
                 page_num: int, dtype: torch.dtype = torch.bfloat16) -> None:
        size = page_num * page_size
        self.kv_buffer = torch.empty((2, size, layer_num, head_num, head_dim), dtype=dtype)
        self.page_bytes = page_size * layer_num * head_num * head_dim * dtype.itemsize
        self.chunks = self._register(self.kv_buffer, self.page_bytes)

    @staticmethod
    def _register(buffer: torch.Tensor, granularity: int) -> list[int]:
        cudart = torch.cuda.cudart()
        limit = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
        step = limit // granularity * granularity          # seams on whole pages
        total = buffer.numel() * buffer.element_size()
        chunks: list[int] = []
        for off in range(0, total, step):
            rc = int(cudart.cudaHostRegister(buffer.data_ptr() + off, min(step, total - off), 0))
            if rc:
                for ptr in reversed(chunks):
                    cudart.cudaHostUnregister(ptr)
                raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset {off}")
            chunks.append(buffer.data_ptr() + off)
        return chunks

    def destroy(self) -> None:
        cudart = torch.cuda.cudart()
        while self.chunks:
            cudart.cudaHostUnregister(self.chunks.pop())
