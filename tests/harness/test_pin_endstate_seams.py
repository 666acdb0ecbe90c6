"""``seams-aligned`` at the edges of a buffer (harness/run/endstate.py's check_seams_aligned).

A seam is where one live registration ends or the next begins inside the buffer; the
buffer's own base and end are not seams. Each case is one a surviving mutant got wrong
(docs/mutation-testing.md): the registration at the base ignored, only offsets that are both
a start and an end checked, the buffer's end taken for a seam, one lone registration judged.
"""

from __future__ import annotations

from kvreg.harness.run.endstate import UNDRAINABLE, BufferEnd, check_seams_aligned, undrainable
from kvreg.harness.run.result import Violation

BASE = 0x7F0000000000


def end(live: list[tuple[int, int]], nbytes: int = 256, unit: int = 64) -> BufferEnd:
    return BufferEnd("kv", BASE, nbytes, unit, True, None, 9,
                     [(BASE + off, size) for off, size in live])


def seams(live: list[tuple[int, int]], nbytes: int = 256) -> list[str]:
    return [v.message for v in check_seams_aligned([end(live, nbytes)], 7)]


def test_the_end_of_the_registration_at_the_base_is_a_seam() -> None:
    # [0, 100) then [128, 256): the next one starts aligned, the first ends at 100
    msgs = seams([(0, 100), (128, 128)])
    assert len(msgs) == 1 and "lies at offset 100 (kv+0x64)" in msgs[0]


def test_a_seam_that_is_only_a_start_is_judged() -> None:
    # [0, 128) then [160, 256): 160 starts a registration and ends none
    msgs = seams([(0, 128), (160, 96)])
    assert len(msgs) == 1 and "lies at offset 160 (kv+0xa0)" in msgs[0]
    assert "cuts copy page 2 [128, 192) of 64 bytes: 32 bytes into it" in msgs[0]


def test_the_buffers_own_end_is_not_a_seam() -> None:
    # a 200-byte buffer (its end is not a multiple of 64) registered in two aligned parts
    assert seams([(0, 128), (128, 72)], nbytes=200) == []


def test_a_lone_short_registration_has_no_seam() -> None:
    # one registration of part of the buffer: a gap (the registered rule's), not a seam
    assert seams([(0, 100)]) == []


def test_every_misaligned_seam_is_counted_and_the_first_named() -> None:
    msgs = seams([(0, 96), (96, 64), (160, 96)])
    assert len(msgs) == 1
    assert "lies at offset 96 (kv+0x60)" in msgs[0]
    assert msgs[0].endswith("32 bytes into it (1 more misaligned seam(s))")
    assert check_seams_aligned([end([(0, 96), (96, 160)])], 7)[0].seq == 7


def test_only_an_error_pending_warning_is_undrainable() -> None:
    # the report's hint about torch's binding (causes.hints) counts error-pending warnings
    # that end with the undrainable note, and no other rule's message
    assert undrainable(Violation("error-pending", f"error 1 left pending {UNDRAINABLE}"))
    assert not undrainable(Violation("error-pending", "error 1 left pending"))
    assert not undrainable(Violation("leak", f"error 1 left pending {UNDRAINABLE}"))
