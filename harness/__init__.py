"""kvreg.harness: pool geometry, scenarios, the runner core and its targets, CLI, pytest side.

Kept import-light: submodules are imported on demand. ARCHITECTURE.md (repository root)
says which room holds what.
"""
