"""Root test configuration: Hypothesis profiles (pytester is enabled with -p in pyproject)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# `ci`: deterministic and bounded (2-core runners); `dev`: more examples for local digging.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
