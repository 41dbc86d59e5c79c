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
    if name == "pyslurm":
        # lazy: `slurmtopo hooks task-prolog` (batch step) loads this module but not
        #   slurmtopo.slurm.pyslurm_backend (start-up time)
        from slurmtopo.slurm.pyslurm_backend import PySlurmBackend
        return PySlurmBackend(**kwargs)
    if name == "auto":
        env = kwargs.get("env")
        path = (env or os.environ).get("PATH")
        if shutil.which("sinfo", path=path) is None:
            # lazy: `slurmtopo hooks task-prolog` (batch step) loads this module but not
            #   slurmtopo.slurm.pyslurm_backend (start-up time)
            from slurmtopo.slurm import pyslurm_backend
            if pyslurm_backend.available():
                try:
                    return pyslurm_backend.PySlurmBackend()
                except SlurmError:
                    pass
        return CliBackend(**kwargs)
    raise SlurmError(f"unknown Slurm backend {name!r} (one of auto, cli, pyslurm)")
