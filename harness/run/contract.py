"""The contract an implementation is judged by: the one its own ``register`` declares.

kvreg's contract rules (``chunk-over-limit``, ``not-rejected``, ``rejected-too-late``) judge a
promise, not what the real runtime or store enforces: each call within a chunk limit, and a
granularity above that limit refused before any call. SGLang makes that promise (its code reads
``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``); other code may never have made it, and a call the
real runtime accepts (anything below the per-call ceiling of the device profile) is then no
fault. So the promise is read from the signature: a ``chunk_limit`` (Mooncake:
``max_mr_size``) or ``granularity`` parameter without a None default declares it and gets the
scenario's value; one that defaults to None declares nothing and gets None; an absent one
declares nothing and gets nothing. A ``**kwargs`` without the named parameter may forward it
anywhere, so it gets the value and counts as declaring it, as before. A signature Python
cannot read is taken the same way. The mooncake style's None default keeps its meaning
("computed when not given", harness/mooncake/target.py ``limit``): such a register still gets
the store's effective MR limit, a fact of the real machine, where a scenario gives it, and
only the rejection contract leaves it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ABSENT", "DECLARED", "NONE", "Contract", "contract_of"]

# how a keyword reaches register: the scenario's value, None, or not at all
DECLARED, NONE, ABSENT = "declared", "none", "absent"
# the contract keywords of each style that takes them by name, the limit's first
KEYWORDS = {"generic": ("chunk_limit", "granularity"), "ctypes": ("chunk_limit", "granularity"),
            "driver": ("chunk_limit", "granularity"),
            "mooncake": ("max_mr_size", "granularity")}
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"


@dataclass(frozen=True)
class Contract:
    """Which contract rules apply to an implementation, and what its register receives."""

    style: str
    # keyword -> DECLARED / NONE / ABSENT (empty for the sglang style and the reference)
    modes: tuple[tuple[str, str], ...] = ()
    signature: str = ""

    def mode(self, name: str) -> str:
        return dict(self.modes).get(name, DECLARED)

    @property
    def limit_name(self) -> str:
        return "max_mr_size" if self.style == "mooncake" else "chunk_limit"

    @property
    def limit(self) -> bool:
        """Each registration call within the limit it was given (chunk-over-limit)."""
        return self.mode(self.limit_name) == DECLARED

    @property
    def granularity(self) -> bool:
        return self.mode("granularity") == DECLARED

    @property
    def rejects(self) -> bool:
        """A granularity above the limit refused before any call (not-rejected,
        rejected-too-late): it takes both, so both must be declared."""
        return self.limit and self.granularity

    @property
    def limit_with_granularity_only(self) -> bool:
        """SGLang's limit binds only when a granularity is passed (G None: one call)."""
        return self.style == "sglang"

    def kwargs(self, **values: Any) -> dict[str, Any]:
        """The keywords register gets: each declared one its value, a None-default one
        None, an absent one nothing. The mooncake style's None-default keywords get the
        value: its max_mr_size is the store's effective MR limit, a fact of the real machine,
        and a None default there already says "computed when not given" (the scenarios
        with ``limit = "own"`` give None); only the rejection contract leaves them."""
        out: dict[str, Any] = {}
        for name, value in values.items():
            mode = self.mode(name)
            if mode != ABSENT:
                out[name] = value if mode == DECLARED or self.style == "mooncake" else None
        return out

    def skip_reason(self) -> str | None:
        """Why a scenario that judges only the rejection contract does not apply, or None."""
        if self.rejects:
            return None
        if not self.limit:
            word, name = ("MR-limit" if self.style == "mooncake" else "chunk-limit",
                          self.limit_name)
        else:
            word, name = "granularity", "granularity"
        how = (f"its {name} defaults to None in {self.signature}" if self.mode(name) == NONE
               else f"{self.signature} has no {name} parameter")
        what = ("an object stride above the MR limit" if self.style == "mooncake" else
                "a granularity above the chunk limit")
        return (f"the implementation declares no {word} contract ({how}); this scenario "
                f"judges only that contract: {what} refused before any call")

    def text(self) -> str:
        """One line: which contract the implementation was judged by."""
        if self.style == "reference":
            return ("contract: kvreg's reference: each call within the scenario's chunk limit "
                    "(MR limit), a granularity above it refused before any call")
        if self.style == "sglang":
            return (f"contract: chunk limit from {ENV_CHUNK_GB} (sglang style): each call "
                    "within it where a granularity is passed, a granularity above it refused "
                    "before any call")
        if self.style == "mooncake":
            if self.rejects:
                return (f"contract: max_mr_size and granularity declared by "
                        f"{self.signature}: an object stride above max_mr_size refused before "
                        "any call; MRs judged against the store profile")
            return (f"contract: none declared by {self.signature}: judged against the store "
                    "profile only (the scenarios of a stride above the MR limit are skipped)")
        if not self.limit:
            return (f"contract: none declared by {self.signature}: judged against the device "
                    "profile only")
        return (f"contract: chunk_limit{' and granularity' if self.granularity else ''} "
                f"declared by {self.signature}: each call within chunk_limit"
                + (", a granularity above it refused before any call" if self.rejects else
                   "; no granularity declared, so the scenarios of a granularity above the "
                   "limit are skipped"))

    def as_dict(self) -> dict[str, Any]:
        """The JSON report's ``contract`` object."""
        if self.style in ("reference", "sglang"):
            source = "reference" if self.style == "reference" else f"environment:{ENV_CHUNK_GB}"
            keywords = {"chunk_limit": source, "granularity": source}
        else:
            keywords = {name: self.mode(name) for name in KEYWORDS[self.style]}
        rules = (["chunk-over-limit"] if self.limit and self.style != "mooncake" else []) + \
            (["not-rejected", "rejected-too-late", "rejected-wrong-error"] if self.rejects
             else [])
        return {"style": self.style, "register": self.signature, "keywords": keywords,
                "rules": rules, "text": self.text()}


def _plain(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return sig.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                   for p in sig.parameters.values()],
                       return_annotation=inspect.Signature.empty)


def contract_of(style: str, register_fn: Callable[..., Any] | None) -> Contract:
    """The contract ``register_fn`` declares in ``style`` (see the module's docstring)."""
    names = KEYWORDS.get(style)
    if names is None or register_fn is None:
        return Contract(style)
    sig = _plain(register_fn)
    label = getattr(register_fn, "__name__", type(register_fn).__name__)
    if sig is None:
        return Contract(style, tuple((n, DECLARED) for n in names), f"{label}(...)")
    params = sig.parameters
    kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    modes = []
    for name in names:
        p = params.get(name)
        if p is None:
            modes.append((name, DECLARED if kwargs else ABSENT))
        else:
            modes.append((name, NONE if p.default is None else DECLARED))
    return Contract(style, tuple(modes), f"{label}{sig}")
