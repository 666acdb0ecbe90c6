"""A function the style cannot call is a usage error before anything runs (issue 18 §5).

Without the check every scenario failed with the same ``TypeError`` from the adapter's call;
now ``make_implementation`` binds the style's call to the function's signature
(``inspect.signature(...).bind``) and ``kvreg run`` exits 2 with one line naming the option,
the function and the signature the style expects. The plugin raises a pytest usage error.
"""

from __future__ import annotations

import functools
import inspect
import textwrap
from pathlib import Path

import pytest

from kvreg.harness.run.implementation import (
    ImplementationError,
    check_signature,
    make_implementation,
    style_calls,
)

MLA = "mla/page_first_direct/below-limit"

# per style: a correct pair written the way the docs show it, and a correct pair written
# differently (defaults, *args, **kwargs, keyword-or-positional): both must load
GOOD = {
    "sglang": ("def register(buffer, registration_granularity_bytes):\n    pass\n"
               "def teardown(buffer):\n    pass\n",
               "def register(buffer, g=None, *rest):\n    pass\n"
               "def teardown(*args):\n    pass\n"),
    "generic": ("def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n    pass\n"
                "def teardown(cudart, ranges):\n    pass\n",
                "def register(cudart, ptr, nbytes, granularity=None, **kw):\n    pass\n"
                "def teardown(cudart, ranges, verbose=False):\n    pass\n"),
    "ctypes": ("def register(ptr, nbytes, *, granularity, chunk_limit):\n    pass\n"
               "def teardown(ranges):\n    pass\n",
               "def register(*args, **kwargs):\n    pass\n"
               "def teardown(ranges, /):\n    pass\n"),
    "driver": ("def register(ptr, nbytes, *, granularity, chunk_limit):\n    pass\n"
               "def teardown(ranges):\n    pass\n",
               "class _R:\n    def __call__(self, ptr, nbytes, **kw):\n        pass\n"
               "register = _R()\n"
               "def teardown(ranges, *more):\n    pass\n"),
    "mooncake": ("def register(store, ptr, nbytes, *, max_mr_size, granularity):\n    pass\n"
                 "def teardown(store, ranges):\n    pass\n",
                 "def register(store, ptr, nbytes, max_mr_size=None, granularity=None):\n"
                 "    pass\n"
                 "def teardown(store, ranges):\n    pass\n"),
}

# per style: (register source, teardown source, which function is wrong, words of the error)
BAD = {
    "sglang-register-one-arg": ("sglang", "def register(buffer):\n    pass\n"
                                "def teardown(buffer):\n    pass\n", "--impl",
                                ["register(buffer)", "register(buffer, granularity)",
                                 "too many positional arguments"]),
    "sglang-teardown-two-args": ("sglang", "def register(buffer, g):\n    pass\n"
                                 "def teardown(cudart, ranges):\n    pass\n", "--teardown",
                                 ["teardown(cudart, ranges)", "teardown(buffer)",
                                  "missing a required argument: 'ranges'"]),
    # a contract keyword it takes positionally only cannot be passed by name (one it does
    # not take at all is fine: it declares no such contract, tests/cuda_target/test_contracts.py)
    "generic-positional-only-limit": ("generic", "def register(cudart, ptr, nbytes, "
                                      "chunk_limit, /):\n    pass\n"
                                      "def teardown(cudart, ranges):\n    pass\n",
                                      "--impl", ["chunk_limit", "generic style"]),
    "generic-sglang-shaped": ("generic", "def register(buffer, g):\n    pass\n"
                              "def teardown(buffer):\n    pass\n", "--impl",
                              ["register(cudart, ptr, nbytes, *, granularity, chunk_limit)"]),
    "ctypes-takes-cudart": ("ctypes", "def register(cudart, ptr, nbytes, *, granularity, "
                            "chunk_limit):\n    pass\ndef teardown(ranges):\n    pass\n",
                            "--impl", ["register(ptr, nbytes, *, granularity, chunk_limit)",
                                       "missing a required argument: 'nbytes'"]),
    "driver-teardown-takes-cudart": ("driver", "def register(ptr, nbytes, **kw):\n    pass\n"
                                     "def teardown(cudart, ranges):\n    pass\n",
                                     "--teardown", ["teardown(ranges)", "driver style"]),
    "mooncake-positional-only-limit": ("mooncake", "def register(store, ptr, nbytes, "
                                       "max_mr_size, granularity, /):\n    pass\n"
                                       "def teardown(store, ranges):\n    pass\n", "--impl",
                                       ["max_mr_size", "mooncake style"]),
    "mooncake-teardown-no-store": ("mooncake", "def register(store, ptr, nbytes, **kw):\n"
                                   "    pass\ndef teardown(ranges):\n    pass\n", "--teardown",
                                   ["teardown(store, ranges)", "too many positional"]),
}


def _module(tmp_path: Path, source: str, name: str = "impl") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize("style", sorted(GOOD))
@pytest.mark.parametrize("variant", [0, 1], ids=["as-documented", "written-differently"])
def test_correct_signatures_load(tmp_path: Path, style: str, variant: int) -> None:
    path = _module(tmp_path, GOOD[style][variant], f"good_{style}_{variant}")
    impl = make_implementation(f"{path}:register", None, style)
    assert impl.style == style and impl.register_fn is not None and impl.teardown_fn is not None


@pytest.mark.parametrize("case", sorted(BAD))
def test_wrong_signature_is_refused_naming_option_function_and_style(tmp_path: Path,
                                                                     case: str) -> None:
    style, source, option, words = BAD[case]
    path = _module(tmp_path, source, f"bad_{case.replace('-', '_')}")
    with pytest.raises(ImplementationError) as info:
        make_implementation(f"{path}:register", f"{path}:teardown", style)
    message = str(info.value)
    assert message.startswith(f"{option} "), message
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_the_styles_own_calls_bind_to_their_documented_signatures() -> None:
    # the table the check uses is the adapter's real call: a function with exactly the
    # documented signature accepts it, one with an extra required parameter does not
    for style, calls in style_calls().items():
        for role, (expected, _args, _kw) in enumerate(calls):
            params = expected[expected.index("(") + 1:-1]
            exact = eval(f"lambda {params}: None")
            check_signature(exact, style, role, "--x", "spec")
            extra = eval(f"lambda {params}, more_required: None")
            with pytest.raises(ImplementationError, match=style):
                check_signature(extra, style, role, "--x", "spec")


def test_unreadable_signatures_are_taken_as_is() -> None:
    # a builtin with no signature Python can read is not refused (it may well be right)
    try:
        inspect.signature(dict.fromkeys)
    except ValueError:
        check_signature(dict.fromkeys, "ctypes", 1, "--impl", "spec")
    check_signature(functools.partial(lambda cudart, ranges: None, None), "ctypes", 1,
                    "--teardown", "spec")


def test_missing_teardown_function_is_reported_against_teardown(tmp_path: Path) -> None:
    path = _module(tmp_path, "def register(buffer, g):\n    pass\n", "no_teardown")
    with pytest.raises(ImplementationError) as info:
        make_implementation(f"{path}:register", f"{path}:gone", "sglang")
    assert str(info.value).startswith("--teardown "), info.value
    assert "has no function 'gone'" in str(info.value)
    with pytest.raises(ImplementationError) as implicit:
        make_implementation(f"{path}:register", None, "sglang")
    assert str(implicit.value).startswith("--teardown (not given: 'teardown' next to --impl)")
    assert "has no function 'teardown'" in str(implicit.value)


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("a scenario ran although the implementation cannot be called")


def test_kvreg_run_exits_2_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import kvreg.harness.cli.run as run_cli
    from kvreg.harness.cli.main import main

    path = _module(tmp_path, BAD["sglang-register-one-arg"][1], "cli_bad")
    monkeypatch.setattr(run_cli, "_run_all", _must_not_run)
    assert main(["run", "--impl", f"{path}:register", "-k", MLA]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvreg run: error: --impl '{path}:register':")
    assert "sglang style's call register(buffer, granularity)" in lines[0]


def test_kvreg_run_subprocess_shows_one_line_no_traceback(kvreg_cli, tmp_path: Path) -> None:
    path = _module(tmp_path, BAD["generic-positional-only-limit"][1], "proc_bad")
    proc = kvreg_cli("run", "--impl", f"{path}:register", "--style", "generic", "-k", MLA)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--impl" in lines[0] and "chunk_limit" in lines[0], lines


def test_plugin_refuses_a_wrong_signature_as_a_usage_error(pytester: pytest.Pytester) -> None:
    import torch  # noqa: F401  (pytester's in-process runs restore sys.modules)

    pytester.makepyfile(mybad="def register(buffer):\n    pass\n"
                              "def teardown(buffer):\n    pass\n",
                        mypool="def register(buffer, g):\n    pass\n"
                               "def teardown(buffer):\n    pass\n")
    pytester.makeini("[pytest]\nkvreg_scenarios = bundled\nkvreg_impl = mybad.py:register\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "below-limit")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kvreg: kvreg_impl 'mybad.py:register': register(buffer) "
                                 "cannot take the sglang style's call*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "below-limit", "--kvreg-impl",
                                "mypool.py:register", "--kvreg-teardown", "mypool.py:gone")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kvreg: --kvreg-teardown 'mypool.py:gone'*has no function*"])
