"""Choosing a Slurm backend by name (``auto``, ``cli``, ``pyslurm``).

Apart from :mod:`slurmtopo.slurm.backend` (the interface), so the interface
never imports the backends that implement it.
"""
from __future__ import annotations

import os
import shutil

from slurmtopo.errors import SlurmError
from slurmtopo.slurm.backend import SlurmBackend
from slurmtopo.slurm.cli_backend import CliBackend


def get_backend(name: str = "auto", **kwargs) -> SlurmBackend:
    """The backend called ``name``: "cli", "pyslurm" or "auto".

    "auto" (also ``$SLURMTOPO_BACKEND``) is the command-line backend
    whenever Slurm's commands are on PATH (every Slurm site), and pyslurm
    only where they are not and a pyslurm matching the local Slurm imports.
    The pyslurm backend is used for sure only when chosen by name.
    """
    if name in (None, "", "auto"):
        name = os.environ.get("SLURMTOPO_BACKEND", "auto") or "auto"
    name = name.lower()
    if name == "cli":
        return CliBackend(**kwargs)
    if name not in ("pyslurm", "auto"):
        raise SlurmError(f"unknown Slurm backend {name!r} (one of auto, cli, pyslurm)")
    if name == "auto":
        env = kwargs.get("env")
        if shutil.which("sinfo", path=(env or os.environ).get("PATH")) is not None:
            return CliBackend(**kwargs)
    # lazy: the pyslurm backend (and the sbatch script reader it loads: 10 modules, 9.7 ms
    #   measured) only where chosen: `hooks task-prolog` (the batch step) loads this module
    from slurmtopo.slurm import pyslurm_backend

    if name == "pyslurm":
        return pyslurm_backend.PySlurmBackend(**kwargs)
    if pyslurm_backend.available():
        try:
            return pyslurm_backend.PySlurmBackend()
        except SlurmError:
            pass
    return CliBackend(**kwargs)
