"""The ``gpu_rdma`` target: GPU KV caches (and host aux/state buffers) registered for RDMA
through Mooncake's Transfer Engine on a prefill and a decode node, then written across.

The files every target has: ``target`` (the Target), ``options`` (the ``gpu_rdma`` table),
``world`` (the two nodes and the run the core drives), ``reference``, ``styles``,
``transfers`` (page writes prefill -> decode), ``selection`` and ``checks``; and its own:
``buffers`` (the ``KvBuffers`` shape a style receives), ``layout`` (GPU memory as the
engines allocate it), ``node_world`` and ``record`` (what the engine's and NIXL's worlds and
records share); over NIXL, ``nixl_world``, ``nixl_reference``, ``nixl_transfers`` and
``nixl_checks``.
"""

# the implementation styles this target runs (import-light: see harness/cuda/__init__.py):
# the engine's, and ``nixl`` (the same KvBuffers with a NIXL agent instead of the engine)
STYLES = ("mooncake_engine", "nixl")
