"""A mirroring door shows its current target's namespace as its own (fakes/doors.py), and
skips copying again only a constant target it mirrored last (``mark_constant``: the
pyverbs enum modules, shared by every fake fabric): a changed target is always shown."""

from __future__ import annotations

import types

from kvreg.fakes.doors import Door, FacadeModule, mark_constant
from kvreg.fakes.verbs.enums import new_generation_module, old_generation_module


def _module(name: str, **values: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(values)
    return module


def test_a_plain_target_is_mirrored_again_each_time_it_is_entered() -> None:
    door = Door("kvreg_test.plain")
    facade = FacadeModule("kvreg_test.plain", door, mirror=True)
    target = _module("kvreg_test.plain", A=1)
    with door.entered(target):
        assert vars(facade)["A"] == 1
    target.A = 2                     # a target that is not constant may change between uses
    with door.entered(target):
        assert vars(facade)["A"] == 2 and facade.A == 2


def test_a_constant_target_is_copied_once_and_again_after_another_target() -> None:
    door = Door("kvreg_test.constant")
    facade = FacadeModule("kvreg_test.constant", door, mirror=True)
    constant = mark_constant(_module("kvreg_test.constant", A=1))
    other = _module("kvreg_test.constant", A=7)
    with door.entered(constant):
        assert facade.A == 1
        del facade.__dict__["A"]     # not copied again while the same constant target stays
        with door.entered(constant):
            assert "A" not in vars(facade)
    with door.entered(other):
        assert facade.A == 7
    with door.entered(constant):     # changed to it from another: copied
        assert vars(facade)["A"] == 1


def test_the_enum_modules_are_built_once_and_constant() -> None:
    from kvreg.fakes.doors import _CONSTANT

    assert old_generation_module() is old_generation_module()
    assert new_generation_module() is new_generation_module()
    assert old_generation_module() in _CONSTANT and new_generation_module() in _CONSTANT
    assert old_generation_module("pyverbs.enums") is not new_generation_module(
        "pyverbs.libibverbs_enums")
