"""The ``mooncake`` target: register_buffer of host pools in a Mooncake Store over RDMA.

The files every target has: ``target`` (the Target), ``options`` (the ``mooncake`` table),
``world`` (the deployment and the run the core drives), ``reference`` (and the MR limit),
``styles``, ``transfers`` (pages through the store), ``selection`` and ``checks``; and ``pd``
(prefill -> decode RDMA writes).
"""

# the implementation styles this target runs (import-light: see harness/cuda/__init__.py)
STYLES = ("mooncake",)
