"""The ``cuda`` target: cudaHostRegister of host pools through the cudart faces.

The files every target has: ``target`` (the Target), ``options`` (what a scenario fixes),
``world`` (the run the core drives), ``reference``, ``styles``, ``transfers``, ``selection``
and ``checks``; ARCHITECTURE.md lists its own besides.
"""

# the implementation styles this target runs (here, import-light: the CLI's and the plugin's
# choices are read from every room's list by the target registry; styles.py says how each is
# called, and a test holds the two equal)
STYLES = ("sglang", "generic", "ctypes", "driver")
