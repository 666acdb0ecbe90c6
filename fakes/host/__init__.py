"""The fake host: one machine's memory as the kernel accounts it, shared by N rank processes.

``fake_host.py`` holds the host (RAM, the cgroup's ``memory.max``, ``/dev/shm``,
``RLIMIT_MEMLOCK``) and each rank's view of it; ``limits.py`` what one host is;
``shared_state.py`` the state every rank process opens and locks; ``pages.py`` the page
ranges; ``meminfo.py`` what ``/proc/meminfo`` (and so ``psutil.virtual_memory()``) answers.
Facts: docs/host.md.
"""
