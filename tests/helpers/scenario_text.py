"""The small MLA scenario files the tests write: DeepSeek-V3's MLA geometry (61 layers, a
latent of 512 + 64, bfloat16, 64-token pages) in 1 GiB chunks, so that a few hundred pages
make a pool of a few chunks and a run takes well under a second."""

from __future__ import annotations

from pathlib import Path

_MLA_PARAMS = '''\
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
'''

# the pool as a user's project writes it: no memory or profile chosen
MLA_POOL = f"format = 1\n[pool]\n{_MLA_PARAMS}[defaults]\nchunk_gb = 1\n"

# the pool of the supervised-execution tests: virtual memory, an H200 machine named
VIRTUAL_MLA_POOL = (f'format = 1\n\n[pool]\n{_MLA_PARAMS}memory = "virtual"\n\n'
                    '[defaults]\nchunk_gb = 1\nprofile = "h200-r580"\n')

# 600 pages: three chunks whose byte-offset seams cut pages (sglang PR #36798)
ABOVE_LIMIT = '''[[scenario]]
name = "above-limit"
guards = "page-aligned seams keep every page in one registration (sglang PR #36798)"
pages = 600
'''

BELOW_LIMIT = '''[[scenario]]
name = "below-limit"
guards = "a pool below the chunk limit is one registration (sglang PR #36798)"
pages = 200
'''

FAIL_MIDDLE_CHUNK = '''[[scenario]]
name = "fail-middle-chunk"
guards = "a failed middle chunk rolls back the earlier ones (sglang PR #36798)"
pages = 600
expect = "register-error"
faults = [{ point = "cudart.cudaHostRegister", nth = 2, error = "cudaErrorMemoryAllocation" }]
'''

# 595 pages: a kv_buffer of exactly three 1 GiB chunks, the last one partial
THREE_CHUNKS = '''
[[scenario]]
name = "three-chunks"
guards = "a kv_buffer of three 1 GiB chunks"
pages = 595
'''

ONE_CHUNK = '''
[[scenario]]
name = "one-chunk"
guards = "a kv_buffer below the chunk limit"
pages = 79
'''

# SGLang's registration before PR #36798, for a project's own mypool.py: seams every
# `limit` bytes, which cut pages; rolls back and raises on a failed chunk
BYTE_OFFSET_IMPL = '''
import os
import torch

def register(buffer, registration_granularity_bytes=None):
    cudart = torch.cuda.cudart()
    limit = int(os.environ["SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"]) << 30
    total = buffer.numel() * buffer.element_size()
    ranges = []
    for off in range(0, total, limit):          # the bug: seams every `limit` bytes
        size = min(limit, total - off)
        rc = int(cudart.cudaHostRegister(buffer.data_ptr() + off, size, 0))
        if rc:
            for p, _ in reversed(ranges):
                cudart.cudaHostUnregister(p)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}")
        ranges.append((buffer.data_ptr() + off, size))
    buffer.kv_ranges = ranges

def teardown(buffer):
    cudart = torch.cuda.cudart()
    for p, _ in reversed(getattr(buffer, "kv_ranges", [])):
        cudart.cudaHostUnregister(p)
    buffer.kv_ranges = []
'''


def write_scenarios(path: Path, *scenarios: str, pool: str = MLA_POOL) -> Path:
    """A scenario file at ``path`` (its folders made): ``pool`` and then ``scenarios``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(pool + "".join(scenarios))
    return path


def scenario_file(folder: Path, *scenarios: str, name: str = "pool") -> Path:
    """``folder/NAME.toml``: the supervised-execution pool with the given scenarios."""
    return write_scenarios(folder / f"{name}.toml", *scenarios, pool=VIRTUAL_MLA_POOL)
