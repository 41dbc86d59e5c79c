"""Constants shared by the binding step (Slurm is reached only through the
Slurm backend, :mod:`slurmtopo.slurm`)."""
from __future__ import annotations


TABLE_MAGIC = "slurmtopo-ranktable"
#: the rank table travels in the environment below this size (one variable
#: may not exceed 128 KiB on Linux); above it, in DIR/ranktable, which must
#: then be on a file system every node can read
ENV_TABLE_LIMIT = 96 * 1024
CGROUP_MODES = ("auto", "yes", "no")
