"""The enum table is generated from rdma-core's ``libibverbs/verbs.h``, never by hand.

``fakes/verbs/data/verbs_enums.json`` must be exactly what ``gen_enums`` makes of the
installed header (Debian's ``libibverbs-dev``) plus the supplement; the parser must count
implicit values as C does (docs/mooncake-verbs.md §4.6).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.fakes.verbs import enums as V
from kvreg.fakes.verbs.gen_enums import (
    DEFAULT_OUTPUT,
    DEFAULT_SUPPLEMENT,
    evaluate,
    generate,
    main,
    parse_header,
)

HEADER = Path("/usr/include/infiniband/verbs.h")
TM_TYPES = HEADER.with_name("tm_types.h")


@pytest.mark.skipif(not HEADER.is_file(),
                    reason="rdma-core's verbs.h is absent (apt-get install libibverbs-dev)")
def test_committed_table_is_what_the_installed_header_generates() -> None:
    text = HEADER.read_text() + "\n" + TM_TYPES.read_text()
    table = generate(text, json.loads(DEFAULT_SUPPLEMENT.read_text()),
                     include_dir=HEADER.parent)
    committed = json.loads(DEFAULT_OUTPUT.read_text())
    assert committed["enums"] == table["enums"]
    assert committed["constants"] == table["constants"]
    assert committed["supplement"] == table["supplement"]
    assert main([str(HEADER), str(TM_TYPES), "--check"]) == 0


def test_issue_members_are_in_the_table() -> None:
    # verbs.h: IBV_NODE_UNSPECIFIED after USNIC_UDP; wc opcodes ATOMIC_WRITE 9, RECV 1 << 7,
    # then the TM opcodes and DRIVER1..3 counted on from RECV_RDMA_WITH_IMM
    assert V.ibv_node_type.IBV_NODE_UNSPECIFIED == 7
    W = V.ibv_wc_opcode
    assert (W.IBV_WC_ATOMIC_WRITE, W.IBV_WC_RECV, W.IBV_WC_RECV_RDMA_WITH_IMM) == (9, 128, 129)
    tail = [W.IBV_WC_TM_ADD, W.IBV_WC_TM_DEL, W.IBV_WC_TM_SYNC, W.IBV_WC_TM_RECV,
            W.IBV_WC_TM_NO_TAG, W.IBV_WC_DRIVER1, W.IBV_WC_DRIVER2, W.IBV_WC_DRIVER3]
    assert tail == list(range(130, 138))
    assert W.IBV_WC_FLUSH == 8            # supplement: newer than rdma-core v44
    assert V.ibv_wr_opcode.IBV_WR_FLUSH == 14 and V.ibv_wr_opcode.IBV_WR_ATOMIC_WRITE == 15
    assert {e["name"] for e in V.SUPPLEMENT} == {
        "IBV_ACCESS_FLUSH_GLOBAL", "IBV_ACCESS_FLUSH_PERSISTENT", "IBV_WR_FLUSH",
        "IBV_WC_FLUSH", "IBV_GID_TYPE_SYSFS_IB_ROCE_V1", "IBV_GID_TYPE_SYSFS_ROCE_V2",
        "IBV_QPF_GRH_REQUIRED"}
    assert all(e["source"] for e in V.SUPPLEMENT)


SAMPLE = """
/* a comment with enum fake { X = 1 } inside */
#define SAMPLE_FIRST (1ULL << 20)
enum sample_a {
	SA_ZERO,
	SA_ONE,
	SA_TEN = 10,  // comment
	SA_ELEVEN,
	SA_BIG = SAMPLE_FIRST,
	SA_OR = SA_ONE |
		SA_TEN,
	SA_NEG = -1,
	SA_AFTER_NEG,
};
enum {
	ANON_A,
	ANON_B = 1 << 3,
};
enum sample_a f(void);
"""


def test_parser_counts_like_c() -> None:
    enums, constants = parse_header(SAMPLE)
    assert list(enums) == ["sample_a"]
    assert enums["sample_a"] == [("SA_ZERO", 0), ("SA_ONE", 1), ("SA_TEN", 10),
                                 ("SA_ELEVEN", 11), ("SA_BIG", 1 << 20), ("SA_OR", 11),
                                 ("SA_NEG", -1), ("SA_AFTER_NEG", 0)]
    assert constants == {"ANON_A": 0, "ANON_B": 8}


def test_supplement_may_add_but_never_contradict() -> None:
    ok = generate(SAMPLE, [{"enum": "sample_a", "name": "SA_NEW", "value": 99,
                            "source": "x"}])
    assert ["SA_NEW", 99] in ok["enums"]["sample_a"]
    same = generate(SAMPLE, [{"enum": "sample_a", "name": "SA_TEN", "value": 10,
                              "source": "x"}])
    assert same["supplement"] == []
    with pytest.raises(ValueError, match="disagrees"):
        generate(SAMPLE, [{"enum": "sample_a", "name": "SA_TEN", "value": 12, "source": "x"}])
    with pytest.raises(ValueError, match="not in the header"):
        generate(SAMPLE, [{"enum": "nope", "name": "N", "value": 1, "source": "x"}])


@given(st.integers(0, 1 << 40), st.integers(0, 40), st.integers(0, 1 << 20))
def test_evaluate_matches_python_on_c_expressions(a: int, shift: int, b: int) -> None:
    assert evaluate(f"({a}ULL << {shift}) | {b}u", {}) == (a << shift) | b
    assert evaluate("~(X - 1)", {"X": b + 1}) == ~b
    with pytest.raises(ValueError):
        evaluate("(void *)-1", {})
    with pytest.raises(ValueError):
        evaluate("UNKNOWN_NAME + 1", {})
