"""The ``cuda`` target: cudaHostRegister of host pools through the cudart faces.

The files every target has: ``target`` (the Target), ``options`` (what a scenario fixes),
``world`` (the run the core drives), ``reference``, ``styles``, ``transfers``, ``selection``
and ``checks``; ARCHITECTURE.md lists its own besides.
"""
