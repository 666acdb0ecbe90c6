"""The many-rank fields of the scenario format (harness/scenario/fields.py, host_table.py):
``ranks``, ``host`` (a top-level ``[host]``, ``[defaults]`` or the scenario's own), ``[pool]
shared`` and a fault rule's ``rank``; each wrong value is one line naming the field, and
``kvreg run`` refuses the file with exit 2 and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.harness.scenario import ScenarioError, load_file

from ..helpers.kvreg_cli import run_kvreg

TiB, GiB = 1 << 40, 1 << 30
POOL = '''format = 1
[pool]
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
'''
SCENARIO = '''[[scenario]]
name = "s"
guards = "a scenario around the field under test (vllm #51762)"
pages = 10
'''


def _load(tmp_path: Path, top: str, fields: str, pool: str = "") -> list:  # type: ignore[type-arg]
    path = tmp_path / "f.toml"
    path.write_text(POOL + pool + top + SCENARIO + fields)
    return load_file(path)


def test_one_rank_is_the_default_and_has_no_host(tmp_path: Path) -> None:
    (sc,) = _load(tmp_path, "", "")
    assert (sc.ranks, sc.host, sc.shared) == (1, {}, False)


def test_the_host_table_is_read_in_sizes_and_the_fakes_option_names(tmp_path: Path) -> None:
    top = '[host]\nram = "2TiB"\nshm = "1.5TiB"\ncgroup_memory_max = "max"\n'
    (sc,) = _load(tmp_path, top, 'ranks = 8\nhost = { ram = "1TiB", memlock = 65536, '
                  "concurrent_shared_pin_fails = true }\n", "shared = true\n")
    # the scenario's own table replaces the file's
    assert sc.ranks == 8 and sc.shared
    assert sc.host == {"ram": TiB, "memlock": 65536, "concurrent_shared_pin_fails": True}
    (sc,) = _load(tmp_path, top, "ranks = 2\n")
    assert sc.host == {"ram": 2 * TiB, "shm": 3 * TiB // 2, "cgroup_memory_max": None}


def test_the_refusal_order_and_stale_files_are_host_options(tmp_path: Path) -> None:
    (sc,) = _load(tmp_path, "", 'ranks = 2\nhost = { refusal_order = "rank", stale_shm = '
                  '[{ name = "kv_cache_region", size = "64GiB" }] }\n')
    assert sc.host["refusal_order"] == "rank"
    assert sc.host["stale_shm"] == (("kv_cache_region", 64 * GiB),)
    (sc,) = _load(tmp_path, "", "ranks = 2\n")
    assert "refusal_order" not in sc.host      # the host's default: arrival, the real order


def test_a_fault_keeps_its_rank_only_with_several_ranks(tmp_path: Path) -> None:
    fault = 'faults = [{ point = "cudart.cudaHostRegister", nth = 1, error = 1, rank = 0 }]\n'
    (sc,) = _load(tmp_path, "", fault)
    assert sc.faults == ({"point": "cudart.cudaHostRegister", "nth": 1, "error": 1},)
    (sc,) = _load(tmp_path, "", "ranks = 2\n" + fault.replace("rank = 0", "rank = 1"))
    assert sc.faults[0]["rank"] == 1


@pytest.mark.parametrize(("pool", "top", "fields", "words"), [
    ("", "", "ranks = 0\n", "ranks: expected an integer from 1 to 64; got 0"),
    ("", "", "ranks = 65\n", "ranks: expected an integer from 1 to 64; got 65"),
    ("", "", 'ranks = "8"\n', "ranks: expected an integer from 1 to 64; got '8'"),
    ("", "", 'ranks = 2\ntarget = "mooncake"\n',
     "ranks: expected 1 with target = 'mooncake' (many-rank scenarios run on the cuda target)"),
    ("", '[host]\nram = "2TiB"\n', "",
     "host: expected ranks >= 2 (a host is what several rank processes share)"),
    ("", "", 'ranks = 2\nhost = { ram = "2TB" }\n',
     'host: expected a valid host (host.ram: a size in bytes or such as "2TiB"'),
    ("", "", "ranks = 2\nhost = { swap = 1 }\n", "host: expected a valid host (host.swap: not a "
     "host option"),
    ("", "", "ranks = 2\nhost = { pin_exhausted_code = 3 }\n",
     "host: expected a valid host (host pin_exhausted_code must be one of 1, 2; got 3)"),
    ("", "", 'ranks = 2\nhost = "2TiB"\n',
     "host: expected a table of host sizes and options; got '2TiB'"),
    ("", "", 'exercise = ["register", "fill"]\n',
     "exercise: expected 'fill' with ranks >= 2 (it writes the pool on the ranks' host)"),
    ("", "", 'ranks = 2\nhost = { refusal_order = "first" }\n',
     "host: expected a valid host (host refusal_order must be one of 'arrival', 'rank'; "
     "got 'first')"),
    ("", "", 'ranks = 2\nhost = { stale_shm = "kv" }\n',
     'host: expected a valid host (host.stale_shm: a list of { name = "<file in /dev/shm>", '
     'size = "<size>" }'),
    ("", "", 'ranks = 2\nhost = { stale_shm = [{ name = "a/b", size = 1 }] }\n',
     "host: expected a valid host (host stale_shm: a file name in /dev/shm (no '/'); got "
     "'a/b')"),
    ("", "", 'ranks = 2\nhost = { stale_shm = [{ name = "kv", size = "1TB" }] }\n',
     "host: expected a valid host (host.stale_shm: 'kv': a size in bytes or such as"),
    ("", "", 'ranks = 2\nhost = { stale_shm = [{ name = "kv", size = 1 }, '
     '{ name = "kv", size = 2 }] }\n', "host stale_shm: kv is given twice"),
    ("shared = true\n", "", "", "pool.shared: expected ranks >= 2 (one region mapped by every "
     "rank)"),
    ('shared = "yes"\n', "", "ranks = 2\n", "pool.shared: expected true or false; got 'yes'"),
    ("", "", 'ranks = 2\nfaults = [{ point = "cudart.cudaHostRegister", nth = 1, error = 1, '
     "rank = 2 }]\n", "faults[0].rank: expected a rank from 0 to 1"),
])
def test_a_wrong_many_rank_field_is_one_line(tmp_path: Path, pool: str, top: str, fields: str,
                                             words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        _load(tmp_path, top, fields, pool)
    assert words in str(err.value), str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_kvreg_run_refuses_a_wrong_ranks_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(POOL + SCENARIO + "ranks = 2\ntarget = \"mooncake\"\n")
    proc = run_kvreg("run", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "ranks: expected 1 with target = 'mooncake'" in proc.stderr
    path.write_text(POOL + SCENARIO + 'ranks = 2\nhost = { stale_shm = [{ name = "kv" }] }\n')
    proc = run_kvreg("run", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "host.stale_shm" in proc.stderr


def test_an_implementation_the_ranks_cannot_import_is_an_error_saying_so(tmp_path: Path) -> None:
    from kvreg.harness.run.core import run_scenario
    from kvreg.harness.run.implementation import Implementation

    def register(cudart: object, ptr: int, nbytes: int) -> list[tuple[int, int]]:
        return []

    (sc,) = _load(tmp_path, "", "ranks = 2\n")
    result = run_scenario(sc, Implementation("generic", "local", register, register))
    assert result.verdict == "error"
    assert result.reason.startswith("kvreg cannot run this scenario: the implementation cannot "
                                    "be sent to the rank processes")
