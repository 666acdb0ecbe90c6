"""What a rank process is given before ``torch.distributed`` starts: torchrun's variables and
a rendezvous socket that listens on 127.0.0.1 only.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT`` in every worker [DOC: docs.pytorch.org/docs/stable/elastic/run.html,
"Environment Variables"], and code under test reads them (``int(os.environ["LOCAL_RANK"])``
picks a GPU, ``WORLD_SIZE`` sizes a per-rank share of a host budget), so a rank has them all.

Loopback only: a ``TCPStore`` server opened by port listens on every interface (``::``), and
gloo's default device binds the address the host name resolves to. So the store is handed a
socket kvreg bound to 127.0.0.1 (``master_listen_fd``), whose port is the free port (no race
between choosing it and binding it), and gloo is pointed at the loopback interface
(``GLOO_SOCKET_IFNAME`` [DOC: docs.pytorch.org/docs/stable/distributed.html, "Choosing the
network interface to use"]); tests/ranks prove every socket a rank holds is on 127.0.0.1
(docs/ranks.md §1).

Threads: with more than one process per node torchrun sets ``OMP_NUM_THREADS=1`` unless it is
already set ("to avoid your system being overloaded" [DOC: torch/distributed/run.py, 2.13]);
kvreg does the same, or eight ranks of two intra-op threads each spin on a two-core runner
(measured: 1.4 s of CPU for an 8-rank call that costs 30 ms as eight single-rank calls).
"""

from __future__ import annotations

import socket

__all__ = ["LOOPBACK", "LOOPBACK_IFNAME", "loopback_listener", "omp_threads", "rank_env"]

LOOPBACK = "127.0.0.1"
LOOPBACK_IFNAME = "lo"      # Linux's loopback interface


def loopback_listener() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 at a port the kernel chose: the store's server."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, 0))
    sock.listen(128)
    return sock


def rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The variables torchrun sets in worker ``rank`` of a one-machine run of ``world_size``
    (one machine: the local rank is the rank), and gloo's interface."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": LOOPBACK,
            "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": LOOPBACK_IFNAME}


def omp_threads(world_size: int, env: dict[str, str], inherited: str | None) -> str | None:
    """The ``OMP_NUM_THREADS`` a rank runs with: the configuration's, else the one the caller
    runs with (``inherited``), else torchrun's default of 1 for more than one rank."""
    if "OMP_NUM_THREADS" in env:
        return env["OMP_NUM_THREADS"]
    if inherited is not None or world_size == 1:
        return inherited
    return "1"
