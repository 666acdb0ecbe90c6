"""The runner core: one scenario through one target, from its file to its verdict.

``core.run_scenario`` loads nothing and knows no target by name: it asks the registry
(``targets``) for the scenario's target, lets it build its world, drives the exercise steps,
and hands the record to the target's checks. ``result`` holds what a run returns,
``isolation`` what every run restores, ``implementation`` loading an implementation of a style.
``supervisor`` runs scenarios in worker processes (``worker``) under ``limits``, reading how
far each got from ``progress``; ``catalog`` runs a selection for ``kvreg run`` (Ctrl-C,
atomic reports).
"""
