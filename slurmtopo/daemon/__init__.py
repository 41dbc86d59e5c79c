"""The placement daemon: gang release of held jobs onto topology-good nodes.

* :mod:`~slurmtopo.daemon.protocol` -- how a held job carries its request
  (the job comment ``slurmtopo:v1:{...}``);
* :mod:`~slurmtopo.daemon.submit` -- :func:`submit_for_daemon`, what
  ``slurmtopo sbatch --daemon`` calls;
* :mod:`~slurmtopo.daemon.scheduler` -- the pure decision step (queue +
  cluster state + inventory -> release / wait / reject / re-hold);
* :mod:`~slurmtopo.daemon.loop` -- the side-effect loop (read Slurm,
  decide, journal, act);
* :mod:`~slurmtopo.daemon.spool` -- what survives a restart (the journal,
  the event log, the lock).

See docs/daemon.md.
"""
from slurmtopo.daemon.submit import submit_for_daemon

__all__ = ["submit_for_daemon"]
