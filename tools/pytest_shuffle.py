"""A pytest plugin that runs the tests in a seeded random order: ``-p tools.pytest_shuffle
--shuffle SEED`` (from the repository root, with ``python -m pytest``).

A test whose verdict depends on what ran before it (state a fake or a module kept, memory a
collection had not freed yet) passes in the suite's usual order and fails alone or moved.
The files run in a shuffled order and the tests of each file are shuffled among themselves;
the seed is printed in the header, so a failing order can be run again. Every xdist worker
gets the same seed, so they collect the same order.
"""

from __future__ import annotations

import random

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shuffle", metavar="SEED", type=int, default=None,
                     help="run the files, and the tests of each file, in the order SEED draws")


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("shuffle")
    return None if seed is None else f"shuffled order: --shuffle {seed}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.getoption("shuffle")
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
