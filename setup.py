"""Packages found, not listed: each top-level folder is a subpackage of ``kvreg``.

The repository keeps ``fakes/``, ``harness/``, ``realhw/`` and ``scenarios/`` at its root while
they install as ``kvreg.fakes`` ... ``kvreg.scenarios``; pyproject.toml cannot say "find under
a folder and prefix the names", so this file does, and a new subpackage can never be left out
of the wheel (tests/infra/test_wheel_contents.py builds one and checks it).
"""

from setuptools import find_packages, setup

FOLDERS = ("fakes", "harness", "realhw", "scenarios")

package_dir = {f"kvreg.{folder}": folder for folder in FOLDERS}
packages = [
    f"kvreg.{folder}{'.' + sub if sub else ''}"
    for folder in FOLDERS
    for sub in ["", *sorted(find_packages(folder))]
]

setup(package_dir=package_dir, packages=packages)
