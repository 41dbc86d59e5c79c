"""slurmtopo inside Slurm's own extension points: the ``#SLURMTOPO``
directive, the cli_filter planning call and the TaskProlog's per-task
environment (docs/admin.md, "Slurm hooks"; docs/sbatch.md, "The
#SLURMTOPO directive"). Exports nothing: import the modules."""
