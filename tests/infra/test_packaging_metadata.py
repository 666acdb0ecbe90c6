"""The package metadata builds without warnings on every setuptools the project meets.

setuptools >= 77 warns on ``project.license`` as a TOML table and wants an SPDX string,
which setuptools < 77 refuses; the license therefore comes from setup.cfg through
``dynamic`` (PEP 621), which both read without a warning."""

from __future__ import annotations

import os
import tomllib
import warnings
from pathlib import Path

from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_set_without_a_warning() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "license" not in project and "license" in project["dynamic"]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        dist = Distribution()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            dist.parse_config_files()
    finally:
        os.chdir(cwd)
    assert dist.metadata.license == "Apache-2.0"
    assert not [w for w in seen if "license" in str(w.message).lower()], \
        [str(w.message) for w in seen]


def test_ci_recipes_install_the_tag_of_this_version() -> None:
    """The CI recipes pin kvreg to the tag ``v<version>`` of pyproject.toml (the release
    a user installs must be the one these docs describe)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for recipe in sorted((ROOT / "examples" / "ci").glob("*.yml")):
        text = recipe.read_text()
        assert f"/kvreg@v{version}\"" in text, recipe.name
