"""The ``cuda`` target: cudaHostRegister of host pools through the cudart faces.

``reference`` (kvreg's correct registration), ``buffers`` (the pool's memory), ``transfers``
(every page through the batch copy API), ``checks`` (the rules a run is judged by) and
``target`` (the world the runner core drives).
"""
