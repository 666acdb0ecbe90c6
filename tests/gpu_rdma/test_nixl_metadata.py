"""Which registration the gpu_rdma rules name when a peer cannot load an agent's metadata
(harness/gpu_rdma/nixl_checks.py): the refusal that left an empty section, replayed from
the trace as the agent keeps its sections (docs/nixl.md §3.3), not merely the first
registration that failed."""

from __future__ import annotations

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.gpu_rdma.nixl_checks import NixlNodeRun, NxRecord, check_nixl_run
from kvreg.harness.gpu_rdma.nixl_transfers import MetadataFailure

NOT_FOUND, BACKEND = -4, -3
A, B = (0x1000, 64, 0), (0x2000, 64, 0)


def _call(seq: int, api: str, rows: tuple[tuple[int, int, int], ...], code: int,
          mem: str = "VRAM_SEG", injected: bool = False) -> TraceEntry:
    return TraceEntry(seq, "nixl:prefill", api, (rows, mem), code, code, injected, 0)


def _why(calls: list[TraceEntry]) -> str:
    record = NxRecord("register-error", [NixlNodeRun("prefill", ()), NixlNodeRun("decode", ())],
                      trace=calls,
                      metadata_failures=[MetadataFailure(99, "decode", "prefill", NOT_FOUND)])
    found = [v.message for v in check_nixl_run(record) if v.rule == "transfer-unregistered"]
    assert len(found) == 1 and found[0].startswith(
        "add_remote_agent of prefill's metadata on decode raised NIXL_ERR_NOT_FOUND"), found
    return found[0].split("can be prepared: ", 1)[1]


def test_a_refusal_into_no_section_is_named() -> None:
    why = _why([_call(0, "register_memory", (A,), 0, "DRAM_SEG"),
                _call(1, "register_memory", (B,), BACKEND, injected=True)])
    assert why.startswith("prefill's register_memory([0x2000], VRAM) raised NIXL_ERR_BACKEND "
                          "(seq 1): the refused registration left an empty VRAM section")


def test_a_refusal_after_the_kind_was_all_deregistered_is_named() -> None:
    why = _why([_call(0, "register_memory", (A,), 0),
                _call(1, "deregister_memory", (A,), 0),
                _call(2, "register_memory", (B,), BACKEND)])
    assert "(seq 2): the refused registration left an empty VRAM section" in why


def test_a_refusal_beside_held_memory_or_one_filled_later_is_not_blamed() -> None:
    # beside a registration of its kind (then released: the section erased with it), and a
    # refusal whose empty section a later registration filled: neither empties anything
    for calls in ([_call(0, "register_memory", (A,), 0),
                   _call(1, "register_memory", (B,), BACKEND),
                   _call(2, "deregister_memory", (A,), 0)],
                  [_call(0, "register_memory", (B,), BACKEND),
                   _call(1, "register_memory", (A,), 0)],
                  [_call(0, "register_memory", (B,), NOT_FOUND, injected=True)]):
        assert _why(calls) == "prefill's metadata is refused", calls
