"""The functions the ranks run live in ``rank_probes.py`` here; the ranks import them by
name (``rank_probes:...``), so this folder is put on the path the forked ranks inherit."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
