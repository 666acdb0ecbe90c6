"""The end-state rules on the Mooncake target, an implementation's own MR limit, and teardown
by closing the store (mooncake-verbs.md §1.1, §1.6, §2.1)."""

from __future__ import annotations

import dataclasses
import textwrap
from functools import cache
from pathlib import Path

import pytest

from kvreg.harness.mooncake.styles import computes_own_mr_limit
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import ImplementationError, make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import ScenarioError, bundled_root, load_file

IMPLS = Path(__file__).parent / "impls"
ROOT = bundled_root()
CATALOG = {sc.id: sc for f in sorted((ROOT / "mooncake").glob("*.toml"))
           for sc in load_file(f, ROOT)}
GiB = 1 << 30


def _user(tmp_path: Path, source: str):
    path = tmp_path / f"impl_{abs(hash(source))}.py"
    path.write_text("from __future__ import annotations\nfrom typing import Any\n"
                    + textwrap.dedent(source))
    return make_implementation(f"{path}:register", None, "mooncake")


def _mr_sizes(result: ScenarioResult) -> list[int]:
    return [int(line.split(", ")[1].split(")")[0], 16)
            for line in result.trace_text.splitlines() if ".register_buffer(" in line]


@cache
def _reference(sid: str) -> ScenarioResult:
    return run_scenario(CATALOG[sid], make_implementation(), keep_trace=True)


@pytest.mark.parametrize(("name", "limit"), [
    ("own-limit-fastdeploy-default", 4 * GiB),
    ("own-limit-clamped-up-to-1gib", 1 * GiB),
    ("own-limit-clamped-down-to-6gib", 6 * GiB),
    ("own-limit-ionic-nic", 2 * GiB),
    ("own-limit-device-max-mr-size", 3 * GiB),
    ("own-limit-two-nics", 2 * GiB),
])
def test_reference_computes_the_limit_the_store_uses(name: str, limit: int) -> None:
    result = _reference(f"mooncake/own_mr_limit/{name}")
    assert result.verdict == "pass", result.violations
    sizes = _mr_sizes(result)
    # MRs of whole 999424-byte blocks, as large as the limit allows
    assert max(sizes) == limit // 999424 * 999424, sizes


def test_own_limit_scenarios_pass_none_and_reach_the_nics(tmp_path: Path) -> None:
    seen = tmp_path / "seen.txt"
    impl = _user(tmp_path, f"""
        def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: Any = None,
                     granularity: Any) -> list:
            import os
            from pyverbs.device import Context, get_device_list
            names = [d.name.decode() for d in get_device_list()]
            with Context(name=names[0]) as ctx:
                nic = ctx.query_device().max_mr_size
            open({str(seen)!r}, "a").write(f"{{max_mr_size}} {{names}} {{nic}} "
                                           f"{{os.environ.get('MC_MAX_MR_SIZE')}}\\n")
            raise ValueError("only looking")

        def teardown(store: Any, ranges: list) -> None:
            pass
        """)
    assert computes_own_mr_limit(impl)
    run_scenario(CATALOG["mooncake/own_mr_limit/own-limit-ionic-nic"], impl)
    # None for the limit, the ionic NIC's 2 GiB, FastDeploy's written-back 4 GiB
    assert seen.read_text().split("\n")[0] == f"None ['ionic_0'] {2 * GiB} {4 * GiB}"


def test_an_implementation_that_needs_the_limit_is_skipped_saying_why() -> None:
    impl = make_implementation(f"{IMPLS / 'other_mr_size'}.py:register", None, "mooncake")
    assert not computes_own_mr_limit(impl)
    result = run_scenario(CATALOG["mooncake/own_mr_limit/own-limit-ionic-nic"], impl)
    assert result.verdict == "skip"
    assert "passes max_mr_size=None" in result.reason


def test_env_only_limit_breaks_the_nic_limit() -> None:
    impl = make_implementation(f"{IMPLS / 'own_limit_env_only'}.py:register", None, "mooncake")
    result = run_scenario(CATALOG["mooncake/own_mr_limit/own-limit-ionic-nic"], impl)
    assert result.violations[0].rule == "mr-over-limit"
    assert "above the effective MR limit 2147483648" in result.first_violation
    control = run_scenario(CATALOG["mooncake/own_mr_limit/own-limit-fastdeploy-default"], impl)
    assert control.verdict == "pass", control.violations


# -- teardown by closing the store ----------------------------------------------------------

@pytest.mark.parametrize("name", ["close-releases-every-mr", "close-after-failed-register"])
def test_close_teardown_releases_every_mr(name: str) -> None:
    result = _reference(f"mooncake/close_teardown/{name}")
    assert result.verdict == "pass", result.violations
    teardown = result.trace_text.split(".close()", 1)[1]
    assert "unregister_buffer" not in teardown


def test_teardown_close_is_a_style_option() -> None:
    impl = make_implementation(f"{IMPLS / 'close_only'}.py:register", "close", "mooncake")
    assert impl.teardown_close
    for sid in ("mooncake/fastdeploy_register_buffer/above-limit-aligned",
                "mooncake/unregister_faults/rollback-last-unregister-fails",
                "mooncake/close_teardown/close-releases-every-mr"):
        result = run_scenario(CATALOG[sid], impl)
        assert result.verdict == "pass", (sid, result.violations)
    with pytest.raises(ImplementationError, match="--teardown close closes a Mooncake store"):
        make_implementation(f"{IMPLS / 'close_only'}.py:register", "close", "generic")


def test_close_without_close_leaks(tmp_path: Path) -> None:
    """The same registration with a teardown that does nothing leaks every MR: close is
    what released them."""
    impl = _user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                     granularity: Any) -> list:
            step = max_mr_size // granularity * granularity
            out = []
            for off in range(0, nbytes, step):
                size = min(step, nbytes - off)
                assert store.register_buffer(ptr + off, size) == 0
                out.append((ptr + off, size))
            return out

        def teardown(store: Any, ranges: list) -> None:
            pass
        """)
    # (a scenario without faults: the keep-and-retry ones skip a teardown that declares no
    # repeatable teardown)
    result = run_scenario(CATALOG["mooncake/fastdeploy_register_buffer/above-limit-aligned"],
                          impl)
    assert [v.rule for v in result.violations] == ["leak"] * 8


@pytest.mark.parametrize(("key", "value", "words"), [
    ("limit", "mine", "limit = one of ['given', 'own']"),
    ("teardown", "exit", "teardown = one of ['unregister', 'close']"),
])
def test_bad_options_are_refused(tmp_path: Path, key: str, value: str, words: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        'format = 1\n[pool]\ntype = "fastdeploy"\nparams = { num_layers = 2, head_num = 1, '
        'head_dim = 8, dtype = "bfloat16", page_size = 4 }\n[[scenario]]\nname = "x"\n'
        f'pages = 4\ntarget = "mooncake"\nmooncake = {{ {key} = "{value}" }}\n'
        'guards = "an unknown option value is refused"\n')
    with pytest.raises(ScenarioError) as err:
        load_file(path)
    assert words in str(err.value)


# -- the rules on the Mooncake target -------------------------------------------------------

RETRY_ONCE = """
    def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                 granularity: Any) -> list:
        step = max_mr_size // granularity * granularity
        done = []
        for off in range(0, nbytes, step):
            size = min(step, nbytes - off)
            rc = store.register_buffer(ptr + off, size)
            if rc != 0:
                rc = store.register_buffer(ptr + off, size)   # one retry
            if rc != 0:
                for p, _ in reversed(done):
                    store.unregister_buffer(p)
                raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off}")
            done.append((ptr + off, size))
        return done

    def teardown(store: Any, ranges: list) -> None:
        ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
    """


def test_a_retry_that_recovers_passes_with_a_warning(tmp_path: Path) -> None:
    impl = _user(tmp_path, RETRY_ONCE)
    result = run_scenario(CATALOG["mooncake/persistent_and_transient/transient-middle-chunk"],
                          impl)
    assert result.verdict == "pass", result.violations
    (w,) = result.warnings
    assert w.rule == "recovered"
    assert w.message.startswith("register_buffer(read+0xf4000, 999424) (call #")
    assert "returned -600 INVALID_PARAMS; register() recovered: read ended fully registered "\
           "in 4 MR(s) on aligned seams" in w.message
    # a failure that persists is raised, with its code, after a rollback
    persistent = run_scenario(
        CATALOG["mooncake/persistent_and_transient/persistent-middle-chunk"], impl)
    assert persistent.verdict == "pass", persistent.violations


def test_an_error_without_its_code_is_named(tmp_path: Path) -> None:
    impl = _user(tmp_path, RETRY_ONCE.replace(' (rc={rc})', ''))
    result = run_scenario(CATALOG["mooncake/persistent_and_transient/persistent-middle-chunk"],
                          impl)
    assert [v.rule for v in result.violations] == ["error-reported"]
    assert result.first_violation == (
        "register() of read raised RuntimeError: register_buffer failed at offset 999424, "
        "which does not name INVALID_PARAMS (-600) returned by register_buffer(read+0xf4000, "
        "999424) (call #4): say the failing code, its name or its string")


def test_rollback_messages_say_none_or_part(tmp_path: Path) -> None:
    fd = make_implementation(f"{IMPLS / 'fastdeploy_chunker'}.py:register", None, "mooncake")
    result = run_scenario(CATALOG["mooncake/persistent_and_transient/transient-middle-chunk"],
                          fd)
    assert result.first_violation.endswith(
        "no rollback (none of its 1 earlier MR(s) was released; still registered: "
        "[read+0x0, +999424))")
    partial = _user(tmp_path, RETRY_ONCE.replace(
        "for p, _ in reversed(done):", "for p, _ in reversed(done[-1:]):"))
    # the third MR fails twice (the retry too): only the second MR is released
    sc = dataclasses.replace(
        CATALOG["mooncake/persistent_and_transient/transient-middle-chunk"],
        faults=({"point": "mooncake.register_buffer", "nth": 3, "times": 2,
                 "error": "INVALID_PARAMS"},))
    result = run_scenario(sc, partial)
    assert "partial rollback (released 1 of 2 earlier MR(s); still registered: " \
           "[read+0x0, +999424))" in result.first_violation
