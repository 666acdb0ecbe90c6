"""The tier's network hygiene: the real agents' child process (realhw/nixl_real.py) runs in
the launcher's private namespace, and no socket of it uses an address that exists outside.

UCX's tcp transport listens on every interface address of its namespace (seen outside it:
a listening socket per agent on eth0's address beside loopback), so the launcher (``bash
.ci/nixl-real PYTHON test``) gives the tier loopback and one private address only; the
child's sockets are read from /proc/<pid>/fd and /proc/<pid>/net/* and reported with the
results.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from kvreg.realhw.mooncake_netns import local_addresses, namespace_info

pytestmark = pytest.mark.kvreg_nixl_real


def test_the_real_agents_use_no_outside_address(real_run: dict[str, Any] | None) -> None:
    assert real_run is not None
    info = namespace_info()
    assert info is not None
    outside = {a for a in set(info["outer_addresses"]) | local_addresses(1)
               if not ipaddress.ip_address(a).is_loopback}
    sockets = real_run["sockets"]
    assert [s for s in sockets if s.startswith("FOREIGN")] == []
    tcp = [s for s in sockets if " tcp" in s]
    assert any("LISTEN" in s for s in tcp), "UCX listened nowhere: the check saw nothing"
    for s in tcp:
        assert not any(f" {addr}:" in s for addr in outside), s
