"""Batch scripts for a planned job.

:class:`~slurmtopo.sbatch.script.SbatchRequest` is the whole script as data
(directives, the embedded plan, the command) and renders it as text; it does
no I/O, so ``slurmtopo plan`` writes it and ``slurmtopo sbatch`` can submit
the same text. See docs/sbatch.md for what the script does at start time.
"""
from slurmtopo.sbatch.script import (SbatchRequest, sanitize_job_name, topology_request)

__all__ = ["SbatchRequest", "sanitize_job_name", "topology_request"]
