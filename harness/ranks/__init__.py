"""Rank processes: N real processes of one machine, coordinated by real ``torch.distributed``.

Serving engines run one process per GPU, and the registration bugs of a machine (ranks that
end incoherent, budgets read at different moments, a rank that dies inside a collective)
show only with several processes that agree through barriers and all-reduces. A
:class:`~.group.RankGroup` starts those processes once per process configuration, with the
environment ``torchrun`` gives its workers and a gloo process group over 127.0.0.1 only, and
runs one function in every rank per call; each rank's end comes back as a
:class:`~.outcome.RankOutcome`, and no rank's death or hang ever hangs the caller.
"""

from __future__ import annotations

from .group import RankGroup, RankStartError, close_all
from .outcome import RankOutcome

__all__ = ["RankGroup", "RankOutcome", "RankStartError", "close_all"]
