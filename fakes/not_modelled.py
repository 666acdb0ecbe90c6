"""The APIs a run reached that kvreg's fakes do not model: kvreg's gap, never the code's fault.

Every fake family raises its ``NotModelledError`` (a :class:`NotModelled`) where a real API
exists that the fake does not implement. Code that catches it and carries on takes a path
the real machine would not have taken, so whatever the run's checks say afterwards, kvreg
cannot judge it: raising one notes it in every open :func:`reached` scope, and the runner
turns such a run into an ``error`` naming the API and where to model it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["NotModelled", "Reached", "reached"]

_SCOPES: list[list[Reached]] = []
_LOCK = threading.Lock()
# "kvreg's fake pyverbs does not model MR.rkey ..." / "cuda.bindings.runtime.cudaX is not
# modelled by ...": the API a message names
_NAMED = (re.compile(r"does not model (\S+?)(?:\(\))?(?:[ ,;:]|$)"),
          re.compile(r"^(.+?)(?: in libcudart)? is not modelled"))


@dataclass(frozen=True)
class Reached:
    """One not-modelled API the code called: its name and where to model it."""

    api: str
    message: str
    docs: str


class NotModelled(NotImplementedError):
    """Base of the fakes' ``NotModelledError``: constructing one notes it in open scopes.

    ``api`` names the real API (read from the message when not given); ``docs`` says where
    the row that models it belongs (a class attribute per family).
    """

    docs = "the fake's coverage table"

    def __init__(self, message: str = "", *, api: str = "", docs: str = "") -> None:
        super().__init__(message)
        if not api:
            found = [m.group(1) for m in (p.search(message) for p in _NAMED) if m]
            api = found[0] if found else message
        self.api = api
        if docs:
            self.docs = docs
        if _SCOPES:
            note = Reached(api, message, self.docs)
            with _LOCK:
                for scope in _SCOPES:
                    scope.append(note)


@contextmanager
def reached() -> Iterator[list[Reached]]:
    """The not-modelled APIs reached while the block runs (any thread), in call order."""
    found: list[Reached] = []
    with _LOCK:
        _SCOPES.append(found)
    try:
        yield found
    finally:
        with _LOCK:
            _SCOPES.remove(found)
