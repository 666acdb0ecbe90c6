"""The cgroup a rank process finds on a fake host: a cgroup2 root at /sys/fs/cgroup.

Code that locates its memory cgroup reads ``/proc/self/cgroup`` and the cgroup mounts of
``/proc/self/mountinfo``, then walks to ``memory.max`` / ``memory.high`` / ``memory.current``
/ ``memory.stat`` (SGLang 0.5.23 ``mem_cache/host_memory.py``; cgroup-v2.rst "Memory
Interface Files"); on a fake host every one of them answers from the host, whatever
cgroup version the machine running kvreg has.
"""

from __future__ import annotations

from pathlib import Path

from kvreg.fakes.host.fake_host import FakeHost
from kvreg.fakes.host.limits import HostLimits
from kvreg.fakes.host.meminfo import patch_host_files

GiB = 1 << 30


def test_the_cgroup_is_a_cgroup2_root_holding_the_ranks_memory(tmp_path: Path) -> None:
    host = FakeHost.create(tmp_path / "host.json",
                           HostLimits(ram=64 * GiB, cgroup_memory_max=32 * GiB))
    rank = host.rank(0)
    rank.touch(0x1000_0000, GiB)
    rank.shm_create("region")
    rank.shm_fallocate("region", 0, 2 * GiB)
    with patch_host_files(host):
        assert Path("/proc/self/cgroup").read_text() == "0::/\n"
        mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if " - cgroup" in line]
        assert len(mounts) == 1 and mounts[0].split()[4] == "/sys/fs/cgroup"
        assert mounts[0].split(" - ")[1].split()[0] == "cgroup2"
        cg = Path("/sys/fs/cgroup")
        assert (cg / "memory.max").read_text() == f"{32 * GiB}\n"
        assert (cg / "memory.high").read_text() == "max\n"
        assert int((cg / "memory.current").read_text()) == 3 * GiB
        stat = dict(line.split() for line in (cg / "memory.stat").read_text().splitlines())
        assert int(stat["anon"]) == GiB and int(stat["shmem"]) == 2 * GiB
        assert stat["active_file"] == stat["inactive_file"] == "0"
    assert Path("/proc/self/cgroup").read_text() != "" # the real file again
