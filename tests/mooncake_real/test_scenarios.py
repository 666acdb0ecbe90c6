"""Mooncake scenarios on the real store: the verdicts equal the fake's.

Every bundled Mooncake scenario with real memory runs twice per implementation — on the
fake alone, and with every store call mirrored to the real store (``MooncakeMirror``: the
fake still decides MRs, NIC limits and faults, which need RDMA; the bytes read back are
the real store's). The verdict and the first rule broken must be the same, and no mirrored
call may disagree except where the fake answers for RDMA (fake-only, counted). Virtual
pools are fake-only and skip with that reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import bundled_root, load_file

pytestmark = pytest.mark.kvreg_mooncake_real

ROOT = bundled_root()
FILES = [*sorted((ROOT / "mooncake").glob("*.toml")),
         *sorted((ROOT / "regressions").glob("mooncake_*.toml"))]
CATALOG = [sc for f in FILES for sc in load_file(f, ROOT)]
REAL_MEMORY = [sc for sc in CATALOG if sc.memory == "real"]
IMPLS = Path(__file__).parents[1] / "mooncake_target" / "impls"
REFERENCE = "kvreg.harness.mooncake.reference:register"
# one per rule family the real store can speak to: a transfer across a seam, a leak, an
# unregister of a non-base (tier budget: each implementation costs ~10 s on the real store)
BROKEN = ["fastdeploy_chunker", "never_unregisters", "interior_unregister"]


def _impl(name: str) -> Any:
    spec = REFERENCE if name == "reference" else f"{IMPLS / name}.py:register"
    return make_implementation(spec, None, "mooncake")


@pytest.fixture(scope="module")
def mirror(master: Any) -> Any:
    from kvreg.realhw.mooncake_mirror import MooncakeMirror
    from kvreg.realhw.mooncake_real import RealMooncake

    if master is None:          # no wheel: the test fails under --kvreg-require-hw
        yield None
        return
    with RealMooncake(master) as real:
        yield MooncakeMirror(real)


def _rules(result: Any) -> list[str]:
    return [v.rule for v in result.violations]


@pytest.mark.parametrize("name", ["reference", *BROKEN])
def test_verdicts_on_the_real_store_equal_the_fakes(mirror: Any, name: str,
                                                     record_property: Any) -> None:
    impl = _impl(name)
    assert REAL_MEMORY, "the catalog has real-memory Mooncake scenarios"
    for sc in REAL_MEMORY:
        fake = run_scenario(sc, impl)
        real = run_scenario(sc, impl, backend=mirror)
        assert (real.verdict, _rules(real)[:1]) == (fake.verdict, _rules(fake)[:1]), sc.id
    record_property("mooncake_mirror", mirror.summary())
    print(mirror.summary())
    assert mirror.disagreements == [], "\n".join(mirror.disagreements[:10])
    assert mirror.agreeing > 0


def test_virtual_pools_are_fake_only(mirror: Any) -> None:
    virtual = next(sc for sc in CATALOG if sc.memory != "real")
    result = run_scenario(virtual, _impl("reference"), backend=mirror)
    assert result.verdict == "skip" and "fake-only" in result.reason


def test_a_real_store_that_answers_differently_is_a_disagreement(master: Any) -> None:
    # the mirror can fail: the real store holds other bytes under the key than the fake
    from kvreg.fakes.mooncake import FakeMooncake
    from kvreg.realhw.mooncake_mirror import MooncakeMirror
    from kvreg.realhw.mooncake_real import RealMooncake, setup_args

    with RealMooncake(master) as real:
        mirror = MooncakeMirror(real)
        fake = FakeMooncake("v0.3.13", env={})
        fake_store = fake.store()
        assert fake_store.setup(*setup_args(master, 16 << 20, 16 << 20)) == 0
        store = mirror.wrap_store("node0", fake_store, fake)
        assert store.put("k", b"fake") == 0
        assert mirror.disagreements == [] and mirror.agreeing == 1
        mirror.real_store("node0").remove("k", True)
        mirror.real_store("node0").put("k", b"real!")
        assert store.get("k") == b"fake"
        assert mirror.disagreements == ["get('k',): fake b'fake', real b'real!'"]
        fake.close_all()
