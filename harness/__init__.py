"""kvreg.harness: reference registration, pool geometry, runner, CLI and the pytest plugin.

Kept import-light: submodules are imported on demand.
"""
