"""A pytest plugin that runs the tests in a seeded random order: ``-p tools.pytest_shuffle
--shuffle SEED`` (from the repository root, with ``python -m pytest``).

A test whose verdict depends on what ran before it (state a fake or a module kept, memory a
collection had not freed yet) passes in the suite's usual order and fails alone or moved.
The files run in a shuffled order and the tests of each file are shuffled among themselves.
``--shuffle commit`` draws the seed from the checked-out commit (its first 8 hex digits), so
every commit CI tests runs in an order of its own at no extra cost (.ci/run). The seed is
printed in the header and again after the results (``-q`` hides the header), so a failing
order can be run again with ``--shuffle SEED``. Every xdist worker gets the same seed, so they
collect the same order.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

SEED = pytest.StashKey[int | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shuffle", metavar="SEED", default=None,
                     help="run the files, and the tests of each file, in the order SEED (a "
                          "number, or 'commit': the checked-out commit's) draws")


def commit_seed(folder: Path) -> int:
    """The seed of the commit checked out at ``folder``: its first 8 hex digits."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise pytest.UsageError(f"--shuffle commit: {folder} is not a git checkout; "
                                "give the seed as a number") from None
    return int(out[:8], 16)


def seed_of(config: pytest.Config) -> int | None:
    """The seed --shuffle names, or None when the order is the usual one."""
    value = config.getoption("shuffle")
    if value is None:
        return None
    if value == "commit":
        return commit_seed(Path(config.rootpath))
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"--shuffle: {value!r} is neither a number nor "
                                "'commit'") from None


def pytest_configure(config: pytest.Config) -> None:
    # resolved once, so a bad value is a usage error before collection
    config.stash[SEED] = seed_of(config)



def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.stash.get(SEED, None)
    return None if seed is None else f"shuffled order: --shuffle {seed}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    seed = config.stash.get(SEED, None)
    if seed is not None:
        terminalreporter.write_line(f"shuffled order: --shuffle {seed} repeats it")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.stash.get(SEED, None)
    if seed is None:
        return
    draw = random.Random(seed)
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(files)
    draw.shuffle(order)
    for name in order:
        draw.shuffle(files[name])
    items[:] = [item for name in order for item in files[name]]
