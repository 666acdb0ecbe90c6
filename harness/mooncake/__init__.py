"""The ``mooncake`` target: register_buffer of host pools in a Mooncake Store over RDMA.

``reference`` (kvreg's correct registration, the MR limit), ``io`` (pages through the store),
``pd`` (prefill -> decode RDMA writes), ``checks`` (the rules a run is judged by) and
``target`` (the options table and the world the runner core drives).
"""
