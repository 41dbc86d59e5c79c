"""``slurmtopo simulate``: a job trace replayed on an inventory, once per
placement policy, on a simulated clock (docs/simulate.md).

One module per job: the trace readers (:mod:`.trace` and the formats
beside it), the GPU counts made layouts (:mod:`.layouts`), the policies
(:mod:`.policies`, each the real code path: Slurm's own choice, the
planner, the placement daemon's decisions), the cluster's free GPUs kept
up to date event by event (:mod:`.freestate`), the event loop
(:mod:`.engine`), and what comes out of it (:mod:`.report`). Beside the
placement daemon and :mod:`slurmtopo.api` in the layering: it imports
them, nothing below imports it. Exports nothing (import the modules).
"""
