"""Calls without a client, on the real store: each crashing one in its own child process.

docs/mooncake-verbs.md §7.1: before ``setup()`` and after ``close()`` most methods of the
real 0.3.13.post1 binding dereference a null client and the process dies of SIGSEGV; five
check first. The child's exit status is the evidence; the fake's ``CRASHING`` list (the
calls it turns into ``StoreCrash``) must be exactly the calls that crash here.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from kvreg.fakes.mooncake import FakeMooncake, StoreCrash
from kvreg.fakes.mooncake.session import CRASHING

pytestmark = pytest.mark.kvreg_mooncake_real

CALLS = {
    "register_buffer": "(0x1000, 4096)", "unregister_buffer": "(0x1000,)",
    "get_into": "('k', 0x1000, 10)", "put": "('k', b'x')",
    "batch_put_from": "(['k'], [0x1000], [1])", "batch_get_into": "(['k'], [0x1000], [1])",
    "batch_get_into_multi_buffers": "(['k'], [[0x1000]], [[1]])", "is_exist": "('k',)",
    "batch_is_exist": "(['k'],)", "get_size": "('k',)", "remove": "('k',)",
    "batch_remove": "(['k'],)", "remove_all": "()", "remove_by_regex": "('k',)",
}
CHECKING = {"put_from": ("('k', 0x1000, 1)", -600), "get": ("('k',)", b""),
            "batch_put_from_multi_buffers": ("(['k'], [[0x1000]], [[1]])", []),
            "health_check": ("()", 1), "close": ("()", 0)}
TIMEOUT = 120


def _child(body: str) -> subprocess.CompletedProcess[str]:
    code = "from mooncake.store import MooncakeDistributedStore as M\n" + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def test_the_fake_crashes_exactly_where_the_real_store_does() -> None:
    assert set(CALLS) == set(CRASHING)


@pytest.mark.parametrize("api", sorted(CALLS))
def test_before_setup_the_call_segfaults(api: str) -> None:
    done = _child(f"s = M()\nprint('calling', flush=True)\ns.{api}{CALLS[api]}\n"
                  "print('survived', flush=True)\n")
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "calling" in done.stdout and "survived" not in done.stdout
    with pytest.raises(StoreCrash, match=api):
        getattr(FakeMooncake().store(), api)(*eval(CALLS[api]))


def test_before_setup_the_checking_calls_return_codes() -> None:
    lines = "\n".join(f"print({name!r}, repr(s.{name}{args}), flush=True)"
                      for name, (args, _) in CHECKING.items())
    done = _child(f"s = M()\n{lines}\n")
    assert done.returncode == 0, done.stderr[-2000:]
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    fake = FakeMooncake().store()
    for name, (args, want) in CHECKING.items():
        assert seen[name] == repr(want), name
        assert getattr(fake, name)(*eval(args)) == want, name


@pytest.mark.parametrize("api", ["register_buffer", "is_exist", "remove_all"])
def test_after_close_the_call_segfaults(master: Any, api: str) -> None:
    from kvreg.realhw.mooncake_real import setup_args

    args = setup_args(master, 16 << 20, 16 << 20)
    done = _child(f"s = M()\nassert s.setup(*{args!r}) == 0\nassert s.close() == 0\n"
                  f"print('calling', flush=True)\ns.{api}{CALLS[api]}\n"
                  "print('survived', flush=True)\n")
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "calling" in done.stdout and "survived" not in done.stdout
    fake = FakeMooncake().store()
    assert fake.setup(*args) == 0 and fake.close() == 0
    with pytest.raises(StoreCrash):
        getattr(fake, api)(*eval(CALLS[api]))
