"""The Hypothesis registration state machine (kept at this path for users' imports).

It lives in :mod:`kvreg.harness.pytest.state_machine`.
"""

from __future__ import annotations

from kvreg.harness.pytest.state_machine import RegistrationMachine

__all__ = ["RegistrationMachine"]
