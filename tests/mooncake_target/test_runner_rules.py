"""The Mooncake runner's rules, one situation each: what a wrong implementation does, and the
sentence kvreg says about it (harness/mooncake/world.py, harness/mooncake/checks.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.pools import HostPoolGroup
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario, ScenarioError, bundled_root, load_file

FD_POOL = ('type = "fastdeploy"\nparams = { num_layers = 61, head_num = 1, head_dim = 128, '
           'dtype = "bfloat16", page_size = 4 }\nmemory = "real"')
MLA_POOL = ('type = "mla"\nparams = { layout = "layer_first", layer_num = 4, kv_lora_rank = 64, '
            'qk_rope_head_dim = 32, dtype = "bfloat16", page_size = 16 }\nmemory = "real"')


def scenario(tmp_path: Path, body: str, pool: str = FD_POOL, pages: int = 32) -> Scenario:
    text = (f'format = 1\n[pool]\n{pool}\n[defaults]\ntarget = "mooncake"\npages = {pages}\n'
            f'[[scenario]]\nname = "s"\nguards = "a situation the runner must judge (test)"\n'
            + textwrap.dedent(body))
    path = tmp_path / "case.toml"
    path.write_text(text)
    (sc,) = load_file(path, tmp_path)
    return sc


GOOD_TEARDOWN = """
def teardown(store: Any, ranges: list) -> None:
    ranges[:] = [(p, s) for p, s in ranges if store.unregister_buffer(p) != 0]
"""


def user(tmp_path: Path, register: str, teardown: str = GOOD_TEARDOWN) -> Implementation:
    """A mooncake-style implementation written to a file, loaded as --impl loads it."""
    source = textwrap.dedent(register) + textwrap.dedent(teardown)
    path = tmp_path / f"impl_{abs(hash(source))}.py"
    path.write_text("from __future__ import annotations\nfrom typing import Any\n" + source)
    return make_implementation(f"{path}:register", None, "mooncake")


def rules(result: ScenarioResult) -> list[str]:
    return [v.rule for v in result.violations]


# -- options ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("table", "words"), [
    ('{ profile = "v0.4" }', "profile = one of ['head', 'released', 'v0.3.13'] (got 'v0.4')"),
    ('{ mc_max_mr_sizes = 1 }', "not 'mc_max_mr_sizes'"),
    ('{ io = "zip" }', "io = one of"),
    ('{ devices = { nic0 = "nosuchnic" } }', "devices.nic0 = a NIC profile"),
    ('{ mc_max_mr_size = -1 }', "mc_max_mr_size = a byte count"),
    ('{ pd = "yes" }', "pd = true or false"),
    ('{ pd = true, profile = "head" }', "publishes no rkey"),
    ('{ pd = true, protocol = "tcp" }', "RDMA WRITE needs MRs"),
])
def test_bad_options_name_file_and_field(tmp_path: Path, table: str, words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(tmp_path, f"mooncake = {table}\n")
    assert "case.toml" in str(err.value) and "mooncake: expected" in str(err.value)
    assert words in str(err.value)


def test_mooncake_fault_points_load_in_a_fresh_process(tmp_path: Path) -> None:
    # the fault is checked before anything else imports the Mooncake fake
    path = tmp_path / "first.toml"
    path.write_text(f'format = 1\n[pool]\n{FD_POOL}\n[[scenario]]\nname = "s"\n'
                    'guards = "a fault on a mooncake point (test)"\npages = 4\n'
                    'target = "mooncake"\nfaults = [{ point = "mooncake.register_buffer", '
                    'nth = 1, error = "INVALID_PARAMS" }]\n')
    code = ("import sys; from pathlib import Path; from kvreg.harness.scenario import load_paths;"
            f"print(load_paths([Path({str(path)!r})])[0].faults)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert "mooncake.register_buffer" in out.stdout


def test_group_pages_reach_every_member(tmp_path: Path) -> None:
    sc = load_file(bundled_root() / "mooncake" / "hybrid_group.toml", bundled_root())[0]
    geo = sc.geometry()
    assert isinstance(geo, HostPoolGroup)
    assert [m.page_count for m in geo.members] == [64, 64]


# -- styles -------------------------------------------------------------------------------------

def test_cuda_styles_skip_mooncake_scenarios_and_back(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 999424 }\n")
    generic = Implementation("generic", "x", lambda *a, **k: [], lambda *a: None)
    result = run_scenario(sc, generic)
    assert result.verdict == "skip" and "need --style mooncake" in result.reason
    cuda = load_file(bundled_root() / "mla" / "page_first.toml", bundled_root())[0]
    mine = user(tmp_path, "def register(*a: Any, **k: Any) -> list:\n    return []\n")
    assert run_scenario(cuda, mine).verdict == "skip"


def test_user_function_gets_the_limit_and_the_object_stride(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 1048576 }\n")
    seen: list[tuple[int, int | None]] = []

    def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                 granularity: int | None) -> list[tuple[int, int]]:
        seen.append((max_mr_size, granularity))
        from kvreg.harness.mooncake.reference import register as ref

        done: list[tuple[int, int]] = ref(store, ptr, nbytes, max_mr_size=max_mr_size,
                                          granularity=granularity)
        return done

    from kvreg.harness.mooncake.reference import teardown

    result = run_scenario(sc, Implementation("mooncake", "t", register, teardown))
    assert result.verdict == "pass"
    # FastDeploy: cache_buffer_stride_bytes = 61 x 1 x 4 x 128 x 2
    assert seen == [(1048576, 62464), (1048576, 62464)]


# -- registration rules -------------------------------------------------------------------------

def test_mr_outside_the_buffer_and_zero_size(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 8388608 }\n"
                  'exercise = ["register", "teardown"]\n')
    impl = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                     granularity: Any) -> list:
            store.register_buffer(ptr, 0)
            assert store.register_buffer(ptr + 4096, nbytes) == 0
            return [(ptr + 4096, nbytes)]
        """)
    result = run_scenario(sc, impl)
    # the zero-size call got -600, which register() ignored: that is swallowed too
    assert rules(result)[0] == "register-size-zero"
    assert set(rules(result)) >= {"range-outside-buffer", "error-swallowed"}
    outside = next(v for v in result.violations if v.rule == "range-outside-buffer")
    assert "register_buffer(read+0x1000, 3997696) is not inside one pool buffer" in \
        outside.message


def test_mr_over_limit_follows_the_store_profile(tmp_path: Path) -> None:
    """HEAD's transfer engine cuts a registration above max_mr_size into MRs itself (#2644,
    docs/mooncake-verbs.md §1.6) and every page moves: one call is no fault there. Released
    Mooncake rejects the same call with -600, which mr-over-limit names."""
    one_call = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, **kw: Any) -> list:
            rc = store.register_buffer(ptr, nbytes)
            if rc != 0:
                raise RuntimeError(f"register_buffer returned {rc}")
            return [(ptr, nbytes)]
        """)
    head = run_scenario(scenario(tmp_path, 'mooncake = { profile = "head", '
                                           'mc_max_mr_size = 999424 }\n'), one_call)
    assert head.verdict == "pass", head.violations
    assert head.copy and \
        head.copy["pages_copied"] == head.copy["pages_total"] > 0, head.copy
    released = run_scenario(scenario(tmp_path, 'mooncake = { mc_max_mr_size = 999424 }\n'),
                            one_call)
    assert rules(released)[0] == "mr-over-limit"
    assert "asks for one MR of 3997696 bytes, above the effective MR limit 999424" in \
        released.first_violation
    assert "released Mooncake rejects it with -600 INVALID_PARAMS" in released.first_violation


def test_an_accepted_mr_above_the_limit_is_judged_by_its_transfers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that does not check the limit accepts one MR above it; a released transfer
    engine then shrinks the MR to max_mr_size while publishing the whole buffer
    (docs/mooncake-verbs.md §1.6): the pages past the MR fail to move, and that is the
    verdict, not the size of the call."""
    from kvreg.fakes.mooncake import profiles

    unchecked = profiles.STORE_PROFILES["head"].replace(
        te_splits_mrs=False, slices_split_at_mr_seams=False)
    monkeypatch.setattr(profiles, "STORE_PROFILES",
                        {**profiles.STORE_PROFILES, "head": unchecked})
    one_call = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, **kw: Any) -> list:
            rc = store.register_buffer(ptr, nbytes)
            if rc != 0:
                raise RuntimeError(f"register_buffer returned {rc}")
            return [(ptr, nbytes)]
        """)
    result = run_scenario(scenario(tmp_path, 'mooncake = { profile = "head", '
                                             'mc_max_mr_size = 999424 }\n'), one_call)
    assert rules(result) == ["transfer-failed"]
    # 999424 bytes = 16 blocks of 62464: block 16 is the first past the shrunk MR
    assert "block 16 (key 'block16_k') of the K half of write [999424, 1061888) lies in no " \
        "registered MR" in result.first_violation
    # the same pool in MR-sized calls moves every page
    from kvreg.harness.mooncake.reference import register, teardown

    chunked = run_scenario(scenario(tmp_path, 'mooncake = { profile = "head", '
                                              'mc_max_mr_size = 999424 }\n'),
                           Implementation("mooncake", "t", register, teardown))
    assert chunked.verdict == "pass", chunked.violations


def test_failed_register_that_returns_normally_is_swallowed(tmp_path: Path) -> None:
    sc = scenario(tmp_path, 'mooncake = { mc_max_mr_size = 999424 }\n'
                  'expect = "register-error"\n'
                  'faults = [{ point = "verbs.reg_mr", nth = 2, error = "ENOMEM" }]\n')
    ignores = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                     granularity: Any) -> list:
            step = max_mr_size // granularity * granularity
            out = []
            for off in range(0, nbytes, step):
                if store.register_buffer(ptr + off, min(step, nbytes - off)) == 0:
                    out.append((ptr + off, min(step, nbytes - off)))
            return out
        """)
    result = run_scenario(sc, ignores)
    assert rules(result)[0] == "error-swallowed"
    assert "register_buffer(read+0xf4000, 999424)" in result.first_violation


def test_rejected_too_late_and_with_the_wrong_error(tmp_path: Path) -> None:
    sc = scenario(tmp_path, 'mooncake = { mc_max_mr_size = 32768 }\nexpect = "rejected"\n')
    late = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, **kw: Any) -> list:
            store.register_buffer(ptr, 32768)
            raise ValueError("stride above the limit")
        """)
    assert rules(run_scenario(sc, late))[0] == "rejected-too-late"
    wrong = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, **kw: Any) -> list:
            raise RuntimeError("no")
        """)
    assert rules(run_scenario(sc, wrong)) == ["rejected-wrong-error"]


def test_teardown_that_raises_and_a_second_unregister(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 8388608 }\n")
    impl = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, **kw: Any) -> list:
            assert store.register_buffer(ptr, nbytes) == 0
            return [(ptr, nbytes)]
        """, """
        def teardown(store: Any, ranges: list) -> None:
            for p, _ in ranges:
                if store.unregister_buffer(p) != 0:
                    raise RuntimeError(f"unregister_buffer({p:#x}) failed")
        teardown.repeatable = True   # a promise it breaks: the second round runs
        """)
    result = run_scenario(sc, impl)
    assert "unregister-not-a-live-base" in rules(result)
    assert "which was already released, returned -600 INVALID_PARAMS" in result.first_violation
    assert rules(result).count("teardown-raised") == 2


def test_a_looping_implementation_is_stopped(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 999424 }\ncall_budget = 50\n")
    loops = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, **kw: Any) -> list:
            while True:
                try:
                    store.register_buffer(ptr, 4096)
                except Exception:
                    pass
        """)
    result = run_scenario(sc, loops)
    assert rules(result)[0] == "call-budget"


# -- transfers ----------------------------------------------------------------------------------

def test_an_injected_get_failure_is_reported_with_key_and_code(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 999424 }\n"
                  'faults = [{ point = "mooncake.get", nth = 3, error = "OBJECT_NOT_FOUND" }]\n')
    result = run_scenario(sc, make_implementation())
    assert rules(result) == ["transfer-failed"]
    assert result.first_violation.startswith("block 2 (key 'block2_k') of the K half of read")
    assert "batch_get_into (call #" in result.first_violation
    assert "-704 OBJECT_NOT_FOUND [injected]" in result.first_violation


def test_an_unregistered_buffer_fails_its_pages(tmp_path: Path) -> None:
    sc = scenario(tmp_path, "mooncake = { mc_max_mr_size = 8388608 }\n", MLA_POOL, pages=8)
    nothing = user(tmp_path, "def register(*a: Any, **k: Any) -> list:\n    return []\n")
    result = run_scenario(sc, nothing)
    # the end state names the cause first; the copy of page 0 shows the symptom
    assert rules(result) == ["registered", "transfer-failed"]
    assert "register() of kv_buffer returned normally but registered none of its" in \
        result.first_violation
    symptom = result.violations[1].message
    assert "page 0 (key '0__k') in layer 0 of kv_buffer" in symptom
    assert "lies in no registered MR" in symptom


def test_pd_protection_error_names_the_page_and_status(tmp_path: Path) -> None:
    pool = ('type = "mha"\nparams = { layout = "page_first", layer_num = 4, head_num = 2, '
            'head_dim = 64, dtype = "bfloat16", page_size = 128 }\nmemory = "real"')
    sc = scenario(tmp_path, "mooncake = { pd = true, mc_max_mr_size = 1114112 }\n", pool,
                  pages=16)
    # seams 64 KiB into a 128 KiB page: the store's 64 KiB slices pass, a one-WR page fails
    fixed = user(tmp_path, """
        def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                     granularity: Any) -> list:
            out = []
            for off in range(0, nbytes, max_mr_size):
                size = min(max_mr_size, nbytes - off)
                assert store.register_buffer(ptr + off, size) == 0
                out.append((ptr + off, size))
            return out
        """)
    result = run_scenario(sc, fixed)
    # the symptom first, then the end state: each node's seam at 1114112 cuts a page
    assert rules(result) == ["pd-transfer-failed", "seams-aligned", "seams-aligned"]
    assert all("lies at offset 1114112" in v.message for v in result.violations[1:])
    assert result.first_violation.startswith(
        "page 8 of the K half of kv_buffer on prefill [1048576, 1179648) is cut by the MR "
        "seam at offset 1114112: the RDMA WRITE from prefill to decode (call #")
    assert result.first_violation.endswith("completed with IBV_WC_LOC_PROT_ERR (4)")


def test_mha_layer_first_cannot_be_stored_page_by_page(tmp_path: Path) -> None:
    pool = ('type = "mha"\nparams = { layout = "layer_first", layer_num = 2, head_num = 1, '
            'head_dim = 64, dtype = "bfloat16", page_size = 16 }\nmemory = "real"')
    result = run_scenario(scenario(tmp_path, "", pool, pages=4), make_implementation())
    assert result.verdict == "error"
    assert "layer_first multi-buffer is only supported for MLA" in result.reason


def test_pd_decode_seam_is_a_remote_access_error(tmp_path: Path) -> None:
    pool = ('type = "mha"\nparams = { layout = "page_first", layer_num = 4, head_num = 2, '
            'head_dim = 64, dtype = "bfloat16", page_size = 128 }\nmemory = "real"')
    sc = scenario(tmp_path, "mooncake = { pd = true, mc_max_mr_size = 1114112 }\n", pool,
                  pages=16)
    # the decode pool (registered first) gets fixed-offset MRs, the prefill pool aligned ones
    mixed = user(tmp_path, """
        CALLS: list[int] = []

        def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                     granularity: Any) -> list:
            CALLS.append(ptr)
            step = max_mr_size if len(CALLS) == 1 else max_mr_size // granularity * granularity
            out = []
            for off in range(0, nbytes, step):
                size = min(step, nbytes - off)
                assert store.register_buffer(ptr + off, size) == 0
                out.append((ptr + off, size))
            return out
        """)
    result = run_scenario(sc, mixed)
    # only the decode pool's seams are misaligned
    assert rules(result) == ["pd-transfer-failed", "seams-aligned"]
    assert "kv_buffer on decode" in result.violations[1].message
    assert result.first_violation.startswith(
        "page 8 of the K half of kv_buffer on decode [1048576, 1179648) is cut by the MR seam "
        "at offset 1114112")
    assert result.first_violation.endswith("completed with IBV_WC_REM_ACCESS_ERR (10)")


DSA_POOL = ('type = "dsa_indexer"\nparams = { layout = "page_first", layer_num = 4, '
            'index_head_dim = 64, quant_block_size = 64, page_size = 16 }\nmemory = "real"')
SPLIT_AT = """
def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list:
    seam = nbytes - ({back} * granularity) + granularity // 2
    ranges = [(ptr, seam), (ptr + seam, nbytes - seam)]
    for p, s in ranges:
        assert store.register_buffer(p, s) == 0
    return ranges
"""


def test_an_mr_seam_in_the_dsa_spare_row_cuts_no_object(tmp_path: Path) -> None:
    """The DSA indexer's last row is allocated but never put or read (docs/pools.md §2.5):
    an MR seam inside it cuts no object; the same seam one row earlier cuts a real page."""
    spare = run_scenario(scenario(tmp_path, "", pool=DSA_POOL, pages=8),
                         user(tmp_path, SPLIT_AT.format(back=1)))
    assert spare.verdict == "pass", spare.violations
    page = run_scenario(scenario(tmp_path, "", pool=DSA_POOL, pages=8),
                        user(tmp_path, SPLIT_AT.format(back=2)))
    assert "seams-aligned" in rules(page)
    assert any(v.rule != "seams-aligned" and "cut by the MR seam" in v.message
               for v in page.violations), page.violations
