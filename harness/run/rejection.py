"""The rejection contract's three rules, one body for every target.

A register that declares a limit (harness/run/contract.py) promises to refuse, with a
``ValueError`` and before any registration call, a buffer whose granularity (CUDA's copy
granularity, Mooncake's object stride) exceeds it:

- ``not-rejected``: register returned although a buffer's granularity exceeds the limit;
- ``rejected-too-late``: it raised, but only after registration calls for that buffer;
- ``rejected-wrong-error``: it raised before any call, with something other than ValueError.

The targets differ only in words (what the granularity and the limit are called, which call
must not come first), so each target passes its :class:`RejectionWords` and its records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .endstate import exc_text
from .result import Violation

__all__ = ["REJECTION_RULES", "Offered", "RejectionWords", "check_rejection"]

REJECTION_RULES = ("not-rejected", "rejected-too-late", "rejected-wrong-error")


class Offered(Protocol):
    """One buffer as register saw it: its granularity, what it raised, its calls' seqs."""

    @property
    def granularity(self) -> int | None: ...
    @property
    def error(self) -> BaseException | None: ...
    @property
    def seq_start(self) -> int: ...
    @property
    def seq_end(self) -> int: ...


class _Call(Protocol):
    @property
    def seq(self) -> int: ...


B = TypeVar("B", bound=Offered)


@dataclass(frozen=True)
class RejectionWords:
    """A target's words for the contract, e.g. CUDA's "granularity" under a "chunk limit",
    refused before any "cudaHostRegister" call."""

    unit: str          # what exceeds the limit: "granularity", "object stride"
    short_unit: str    # the same in the wrong-error message: "granularity", "stride"
    limit: str         # the limit in not-rejected: "chunk limit", "MR limit"
    bound: str         # the limit in rejected-too-late: "limit", "MR limit"
    api: str           # the call that must not come first: "cudaHostRegister"
    must: str          # not-rejected's tail after the limit, e.g. "; it must raise ..."


def check_rejection(rule: str, words: RejectionWords, expect: str, limit: int,
                    buffers: Sequence[B], label: Callable[[B], str],
                    calls: Sequence[_Call]) -> list[Violation]:
    """``rule``'s violations (one of :data:`REJECTION_RULES`) for a run whose scenario
    expects ``expect``; ``calls`` are the run's registration calls, ``label`` names a
    buffer."""
    if expect != "rejected":
        return []
    first = next((b for b in buffers if b.error is not None), None)
    if rule == "not-rejected":
        return [] if first is not None else _not_rejected(words, limit, buffers, label)
    if first is None:
        return []
    made = [e for e in calls if first.seq_start <= e.seq < first.seq_end]
    if rule == "rejected-too-late":
        return [] if not made else [Violation(
            rule, f"register() of {label(first)} made {len(made)} {words.api} call(s) before "
            f"rejecting {words.unit} {first.granularity} > {words.bound} {limit}", made[0].seq)]
    assert rule == "rejected-wrong-error", rule
    if made or isinstance(first.error, ValueError):
        return []
    assert first.error is not None
    return [Violation(rule, f"register() of {label(first)} rejected the {words.short_unit} "
                      f"with {exc_text(first.error)}; expected ValueError", first.seq_end)]


def _not_rejected(words: RejectionWords, limit: int, buffers: Sequence[B],
                  label: Callable[[B], str]) -> list[Violation]:
    big = next((b for b in buffers if b.granularity is not None and b.granularity > limit),
               None)
    what = f"{words.unit} {big.granularity} of {label(big)}" if big is not None \
        else "every buffer"
    return [Violation("not-rejected", f"register() accepted {what} with {words.limit} "
                      f"{limit}{words.must}", buffers[-1].seq_end if buffers else 0)]
