"""Help texts are for a terminal: no reStructuredText markup (double backquotes, :mod:
roles) in any subcommand's description or option help, and ``--jobs`` says its default."""

from __future__ import annotations

import argparse
import re

from kvreg.harness.cli.arguments import plain
from kvreg.harness.cli.main import build_parser

RST = re.compile(r"``|:(mod|func|class|meth|attr):`")


def _texts(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, str]]:
    out = [(f"{name} description", parser.description or "")]
    for action in parser._actions:
        out.append((f"{name} {'/'.join(action.option_strings) or action.dest}",
                    action.help or ""))
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out.append((f"{name} {choice.dest}", choice.help or ""))
            for sub, subparser in action.choices.items():
                out += _texts(subparser, f"{name} {sub}")
    return out


def test_no_help_text_has_rst_markup() -> None:
    texts = _texts(build_parser(), "kvreg")
    assert len(texts) > 40
    assert [where for where, text in texts if RST.search(text)] == []


def test_jobs_states_its_default() -> None:
    helps = dict(_texts(build_parser(), "kvreg"))
    assert "default 1" in helps["kvreg run --jobs/-j"]


def test_plain_rewrites_the_markup() -> None:
    assert plain("run ``kvreg plan mla`` (:mod:`.sizes`)") == "run 'kvreg plan mla' (.sizes)"
    assert RST.search("``x``") and not RST.search(plain("``x`` :func:`y`"))
