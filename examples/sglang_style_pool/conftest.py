"""Hypothesis profiles for this project: `shared` keeps failing examples where every CI runner
and every developer can replay them (see kvreg's examples/README.md, "Share Hypothesis
failures")."""

import os

from hypothesis import settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

local = DirectoryBasedExampleDatabase(".hypothesis/examples")
shared = local
if os.environ.get("GITHUB_REPOSITORY") and os.environ.get("GITHUB_TOKEN"):
    # read what other runs uploaded as the `hypothesis-example-db` artifact; write locally
    owner, repo = os.environ["GITHUB_REPOSITORY"].split("/", 1)
    shared = MultiplexedDatabase(local, ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo)))

# derandomize must stay False: a derandomized run neither reads nor saves examples
settings.register_profile("shared", database=shared, derandomize=False, deadline=None,
                          max_examples=50)
settings.register_profile("quick", max_examples=10, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))
