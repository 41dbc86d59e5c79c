"""``slurmtopo audit``: what today's placements cost, job by job.

Pure computation (docs/audit.md): :mod:`~slurmtopo.audit.spans` how many
leaves, blocks and NVLink domains a set of nodes spans;
:mod:`~slurmtopo.audit.placements` one running job against what slurmtopo
would have given it; :mod:`~slurmtopo.audit.stranded` the free GPUs no
whole-domain or whole-leaf job can have; :mod:`~slurmtopo.audit.statejobs`
the running jobs of a state snapshot; :mod:`~slurmtopo.audit.history` a
past period rebuilt from ``sacct -P`` output; :mod:`~slurmtopo.audit.report`
the document and the tables. Slurm is read by the command
(``slurmtopo.commands.audit``) through the backend, never here.
"""
