"""The ``kvreg`` command line: ``main`` parses and dispatches; one module per subcommand."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
