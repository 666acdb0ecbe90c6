"""Real KV-transfer registration code of other projects, run against kvreg's fakes (issue 28).

vLLM's connector files are executed from the pinned wheel's bytes (``vllm_source``); the tests
skip, saying why, until ``.ci/vllm-connectors`` has extracted them and ``KVREG_VLLM_SRC``
names the folder. SGLang's Mooncake KV manager needs the installed wheel and runs in the
sglang-real tier (tests/sglang_real/test_mooncake_kv_manager.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import vllm_source  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = vllm_source.why_not()
    if why is None:
        return
    for item in items:
        if HERE in item.path.resolve().parents and "vllm" in item.path.name:
            item.add_marker(pytest.mark.skip(reason=why))
