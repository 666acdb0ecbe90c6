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
cannot read is taken the same way. Which keywords a style reads from the signature, and how
the report words its contract, the style declares (:class:`StyleContract`, in its target's
``styles.py``): the mooncake style's None default keeps its meaning ("computed when not
given", harness/mooncake/options.py ``limit``), so such a register still gets the store's
effective MR limit, a fact of the real machine, where a scenario gives it, and only the
rejection contract leaves it.

The repeatable-teardown contract: a second teardown of the same pool releases only what the
first could not (a failed unregister kept and retried), and makes no call otherwise. The real
machine makes that second call only where the code's own caller does (a ``destroy()`` after a
``close()``, a ``__del__`` after a shutdown), so kvreg's later teardown rounds (the scenario's
``exercise`` lists ``teardown`` twice by default) run only for code that promises it, and the
scenarios that judge nothing but that promise (``contract = "repeatable-teardown"``) are
skipped for the rest, saying why. Who promises it: kvreg's reference (whose teardown the
target picks, so its promise is its style's); the sglang style, as
SGLang's ``_cuda_host_unregister`` keeps only the ranges that failed and its
``HostKVCache.destroy()`` is idempotent (docs/pools.md §1.1); a mooncake store closed by
``--teardown close`` (a closed store's ``close()`` returns 0, docs/mooncake-verbs.md §7.1); and
any teardown function with the attribute ``repeatable = True``. The attribute also says False
(an sglang-style adapter over code that unregisters once); any other value is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .targets import style_contract

__all__ = ["ABSENT", "DECLARED", "NONE", "REFERENCE", "REPEATABLE", "REPEATABLE_TEARDOWN",
           "Contract", "StyleContract", "contract_of", "declared_repeatable"]

# how a keyword reaches register: the scenario's value, None, or not at all
DECLARED, NONE, ABSENT = "declared", "none", "absent"
# the teardown function's attribute that declares (True) or disclaims (False) the contract
REPEATABLE = "repeatable"
# a scenario's ``contract`` value: it judges nothing but a repeatable teardown
REPEATABLE_TEARDOWN = "repeatable-teardown"
# how the repeatable-teardown contract is known: the style's (reference, sglang), the store's
# close (mooncake --teardown close), the teardown's attribute, or not declared
BY_STYLE, BY_CLOSE, BY_ATTRIBUTE, UNDECLARED = "style", "close", "attribute", "undeclared"


@dataclass(frozen=True)
class StyleContract:
    """What an implementation style declares by itself and how its contract is worded: each
    target's ``styles.py`` describes the styles it runs (``STYLE_CONTRACTS``)."""

    # the contract keywords, the limit's first
    keywords: tuple[str, ...] = ("chunk_limit", "granularity")
    # where the style takes them from instead of register's signature (the report's
    # ``keywords`` value for each), or None: read from the signature
    source: str | None = None
    # the words for the limit contract and for what it refuses before any call
    limit_word: str = "limit"
    refused: str = "a granularity above the limit"
    # whether ``chunk-over-limit`` judges each call against the declared limit
    limit_rule: bool = True
    # whether a keyword defaulting to None still gets the scenario's value (a fact of the
    # real machine rather than a promise), only the rejection contract left
    none_default_gets_value: bool = False
    # whether the style promises a repeatable teardown by itself
    repeatable: bool = False
    # what ``--teardown close`` closes where the style's teardown may be closing it (None: the
    # style has no such teardown)
    closes: str | None = None
    # whether its limit binds only where a granularity is passed (SGLang's G None)
    limit_with_granularity_only: bool = False
    # the contract line's register part, or None for the plain one
    register_text: Callable[[Contract], str] | None = field(default=None, compare=False)


def _reference_text(contract: Contract) -> str:
    return ("contract: kvreg's reference: each call within the scenario's chunk limit "
            "(MR limit), a granularity above it refused before any call")


# kvreg's own style: its target picks the reference, which keeps every contract
REFERENCE = StyleContract(source="reference", repeatable=True, register_text=_reference_text)


# a style no target describes: no contract keywords read from its signature
UNDESCRIBED = StyleContract(keywords=())


def description(style: str) -> StyleContract:
    """The style's description from the target that runs it (kvreg's reference: its own)."""
    if style == "reference":
        return REFERENCE
    found = style_contract(style)
    return found if found is not None else UNDESCRIBED


@dataclass(frozen=True)
class Contract:
    """Which contract rules apply to an implementation, and what its register receives."""

    style: str
    # keyword -> DECLARED / NONE / ABSENT (empty for a style that declares them by itself)
    modes: tuple[tuple[str, str], ...] = ()
    signature: str = ""
    # the repeatable-teardown contract, and how it is known (BY_STYLE, ... UNDECLARED)
    repeatable: bool = True
    repeatable_by: str = BY_STYLE
    teardown_name: str = "teardown"
    how: StyleContract = StyleContract()

    def mode(self, name: str) -> str:
        return dict(self.modes).get(name, DECLARED)

    @property
    def limit_name(self) -> str:
        return self.how.keywords[0] if self.how.keywords else "limit"

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
        return self.how.limit_with_granularity_only

    def kwargs(self, **values: Any) -> dict[str, Any]:
        """The keywords register gets: each declared one its value, a None-default one
        None (or its value, where the style says so), an absent one nothing."""
        out: dict[str, Any] = {}
        for name, value in values.items():
            mode = self.mode(name)
            if mode != ABSENT:
                out[name] = (value if mode == DECLARED or self.how.none_default_gets_value
                             else None)
        return out

    def skip_reason(self) -> str | None:
        """Why a scenario that judges only the rejection contract does not apply, or None."""
        if self.rejects:
            return None
        if not self.limit:
            word, name = self.how.limit_word, self.limit_name
        else:
            word, name = "granularity", "granularity"
        how = (f"its {name} defaults to None in {self.signature}" if self.mode(name) == NONE
               else f"{self.signature} has no {name} parameter")
        return (f"the implementation declares no {word} contract ({how}); this scenario "
                f"judges only that contract: {self.how.refused} refused before any call")

    def scenario_skip_reason(self, expect: str, judges: str | None) -> str | None:
        """Why a scenario that judges only a contract this code does not declare is skipped
        (``expect = "rejected"``: the rejection contract; ``contract =
        "repeatable-teardown"``), or None."""
        if expect == "rejected" and (why := self.skip_reason()):
            return why
        return self.teardown_skip_reason() if judges == REPEATABLE_TEARDOWN else None

    def _teardown_how(self) -> str:
        if self.repeatable_by == BY_ATTRIBUTE:
            return f"{self.teardown_name}.{REPEATABLE} = {self.repeatable}"
        if self.repeatable_by == UNDECLARED:
            return f"{self.teardown_name} has no {REPEATABLE} = True attribute"
        if self.repeatable_by == BY_CLOSE:
            return "closing the store: a closed store's close() returns 0"
        return "kvreg's reference" if self.how is REFERENCE else f"the {self.style} style"

    def teardown_skip_reason(self) -> str | None:
        """Why a scenario that judges only the repeatable-teardown contract does not apply."""
        if self.repeatable:
            return None
        return (f"the implementation declares no repeatable-teardown contract "
                f"({self._teardown_how()}); this scenario judges only that contract: a second "
                "teardown that retries what the first could not release and repeats nothing")

    def teardown_text(self) -> str:
        """The repeatable-teardown part of the contract line."""
        if self.repeatable:
            return (f"teardown repeatable ({self._teardown_how()}): every teardown round is "
                    "judged, a later one may only retry what failed")
        return (f"teardown once ({self._teardown_how()}): later teardown rounds are not run, "
                "the repeatable-teardown scenarios are skipped")

    def text(self) -> str:
        """One line: which contract the implementation was judged by."""
        register = (self.how.register_text(self) if self.how.register_text is not None
                    else self._plain_text())
        return f"{register}; {self.teardown_text()}"

    def _plain_text(self) -> str:
        declared = [name for name in self.how.keywords if self.mode(name) == DECLARED]
        if not declared:
            return f"contract: none declared by {self.signature}"
        return f"contract: {' and '.join(declared)} declared by {self.signature}"

    def as_dict(self) -> dict[str, Any]:
        """The JSON report's ``contract`` object."""
        source = self.how.source
        keywords = {name: source if source is not None else self.mode(name)
                    for name in self.how.keywords}
        rules = (["chunk-over-limit"] if self.limit and self.how.limit_rule else []) + \
            (["not-rejected", "rejected-too-late", "rejected-wrong-error"] if self.rejects
             else [])
        return {"style": self.style, "register": self.signature, "keywords": keywords,
                "rules": rules,
                "teardown": {"repeatable": self.repeatable, "known_by": self.repeatable_by},
                "text": self.text()}


def _plain(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return sig.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                   for p in sig.parameters.values()],
                       return_annotation=inspect.Signature.empty)


def declared_repeatable(teardown_fn: Callable[..., Any] | None) -> bool | None:
    """The teardown's ``repeatable`` attribute: True, False, or None where it has none;
    ValueError for any other value."""
    value = getattr(teardown_fn, REPEATABLE, None) if teardown_fn is not None else None
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"its {REPEATABLE} attribute must be True or False, not {value!r}")


def _repeatable(how: StyleContract, teardown_fn: Callable[..., Any] | None,
                close: bool) -> tuple[bool, str]:
    if close:
        return True, BY_CLOSE
    declared = declared_repeatable(teardown_fn)
    if declared is not None:
        return declared, BY_ATTRIBUTE
    return (True, BY_STYLE) if how.repeatable else (False, UNDECLARED)


def contract_of(style: str, register_fn: Callable[..., Any] | None,
                teardown_fn: Callable[..., Any] | None = None, *,
                close: bool = False) -> Contract:
    """The contract ``register_fn`` and ``teardown_fn`` declare in ``style`` (see the module's
    docstring); ``close``: teardown is closing a Mooncake store."""
    how = description(style)
    repeatable, by = _repeatable(how, teardown_fn, close)
    return replace(_register_contract(style, how, register_fn), repeatable=repeatable,
                   repeatable_by=by,
                   teardown_name=getattr(teardown_fn, "__name__", "teardown"))


def _register_contract(style: str, how: StyleContract,
                       register_fn: Callable[..., Any] | None) -> Contract:
    names = how.keywords
    if not names or how.source is not None or register_fn is None:
        return Contract(style, how=how)
    sig = _plain(register_fn)
    label = getattr(register_fn, "__name__", type(register_fn).__name__)
    if sig is None:
        return Contract(style, tuple((n, DECLARED) for n in names), f"{label}(...)", how=how)
    params = sig.parameters
    kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    modes = []
    for name in names:
        p = params.get(name)
        if p is None:
            modes.append((name, DECLARED if kwargs else ABSENT))
        else:
            modes.append((name, NONE if p.default is None else DECLARED))
    return Contract(style, tuple(modes), f"{label}{sig}", how=how)
