"""What the test folders share, in one place rather than in their conftests.

``paths`` names the implementations under test, ``kvreg_cli`` runs ``kvreg`` command lines
(``run_json``: one ``kvreg run --json`` and its report), ``report_schema`` holds a JSON report
to the public contract, ``scenario_text`` writes the small MLA scenario files, ``fixtures``
offers these as pytest fixtures (a conftest imports the ones its folder uses), and
``cli_process`` is the fork server that makes a command line cheap, ``gpu_memory`` lays out
device memory on the fake driver as PyTorch's expandable segments do, ``kv_transfer`` builds a
prefill/decode pair of nodes with fake GPUs and Mooncake engines for real KV-transfer code, and
``device_tensor`` stands in for a CUDA tensor over the fake driver's device memory.
"""
