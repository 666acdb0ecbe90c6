"""The cuda-bindings range kvreg[test] declares, and what the fake needs from a release in it.

The fake returns the real ``cudaError_t`` members when cuda-bindings is installed, so every
code of its table (fakes/cuda/data/cuda_errors.tsv) must be a member there. Observed here
[OBS-local] with the released wheels: 13.1.0 lacks 10, 227, 918 and 919, 13.3.0 lacks 227 and
919, 13.4.1 and later hold them all; the range starts at 13.4.1. cuda-python 13.4.4 (what
SGLang 0.5.23's ``cuda-python>=13.0`` and LMCache resolve to) pins ``cuda-bindings~=13.4.4``,
so the range must hold 13.4.4; a ``==13.5.0`` pin made kvreg uninstallable beside them.
.ci/bindings-range runs this file and the bindings tests on the oldest release of the range.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from kvreg.fakes.cuda.errors import ERRORS

ROOT = Path(__file__).resolve().parents[2]


def _declared(extra: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["optional-dependencies"][extra]]
    return next(r for r in reqs if r.name == "cuda-bindings")


def test_the_range_holds_what_the_serving_projects_resolve_to() -> None:
    spec = _declared("test").specifier
    assert spec.contains("13.4.4")          # cuda-python 13.4.4: cuda-bindings~=13.4.4
    assert spec.contains("13.5.0")          # the newest release, the snapshot's
    assert not spec.contains("13.3.1")      # its cudaError_t lacks codes the fake returns
    assert not spec.contains("14.0.0")      # a new major: names and signatures change


def test_the_installed_release_holds_every_error_code_of_the_fake() -> None:
    runtime = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    version = metadata.version("cuda-bindings")
    members = {int(m.value) for m in runtime.cudaError_t}
    missing = sorted(set(ERRORS) - members)
    in_range = _declared("test").specifier.contains(version)
    # inside the range: nothing missing; outside it (an older release installed by hand) the
    # lower bound is there for a reason the test can see
    assert (missing == []) == in_range or Version(version) >= Version("13.4.1"), \
        (version, missing)
    if in_range:
        assert missing == [], f"cuda-bindings {version} lacks cudaError_t {missing}"
