"""The plugin refuses a scenario file whose pool no machine can hold: a collection error that
names the file, the field and the reason, no traceback (size_limits.py: 2^57-byte user address
space, RAM for memory = "real")."""

from __future__ import annotations

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

HUGE = '''
format = 1
[pool]
type = "mla"
params = { layout = "page_first", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
memory = "MEMORY"
[[scenario]]
name = "too-big"
guards = "a pool beyond any address space is refused before anything runs (vllm #51080 scale)"
pages = PAGES
'''


@pytest.mark.parametrize("memory,pages,needle", [
    ("virtual", 10**15, "*2^57-byte (128 PiB) user address space*"),
    ("real", 1000, '*memory = "real" needs 4497408000 bytes*'),
])
def test_impossible_sizes_are_collection_errors(pytester: pytest.Pytester, memory: str,
                                                pages: int, needle: str) -> None:
    pytester.mkdir("kv_scenarios")
    (pytester.path / "kv_scenarios" / "big.toml").write_text(
        HUGE.replace("MEMORY", memory).replace("PAGES", str(pages)))
    pytester.makeini("[pytest]\nkvreg_scenarios = kv_scenarios\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*invalid kvreg scenario file:*",
                                 "*big.toml: scenario[[]0] (too-big): pool: expected a pool "
                                 "this machine can hold (" + needle])
    assert result.ret != 0
    assert "Traceback" not in result.stdout.str()
