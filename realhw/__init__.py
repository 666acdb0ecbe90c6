"""kvreg.realhw: the real-hardware tier (real CUDA and RDMA backends, fidelity probes, report).

Nothing is imported here: the submodules load CUDA, torch and pyverbs only when used, so
``import kvreg.realhw`` works on any machine. Start from :mod:`kvreg.realhw.backend`
(``RealCuda``), :mod:`kvreg.realhw.capabilities` (``detect``) and
:mod:`kvreg.realhw.fidelity` (``run_fidelity``); the README explains the tiers.
"""
