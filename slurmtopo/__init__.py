"""slurmtopo: topology-aware placement of distributed GPU training on Slurm."""

__version__ = "0.1.0"
