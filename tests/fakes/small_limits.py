"""A stand-in for the job's Python (``SLURMTOPO_PYTHON`` / ``--python``)
that runs ``python -m slurmtopo ...`` with the start-time step's size
limits shrunk, so a job of a few ranks takes the path of a big one (each
task reads its block of ranks from the run directory)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

_WRAPPER = """#!/bin/sh
# drops "-m slurmtopo" and runs the same with the limits below
shift 2
exec {python} -c 'import runpy, sys
from slurmtopo.binding import limits
limits.ENV_TABLE_LIMIT = {env_limit}
limits.TASK_BLOCK = {block}
sys.argv[0] = "slurmtopo"
runpy.run_module("slurmtopo", run_name="__main__", alter_sys=True)' "$@"
"""


def small_limits_python(directory: Path, block: int = 3, env_limit: int = 10) -> str:
    """Write the stand-in into ``directory``; returns its path."""
    path = Path(directory) / "python-small-limits"
    path.write_text(_WRAPPER.format(python=shlex.quote(sys.executable), block=block,
                                    env_limit=env_limit))
    path.chmod(0o755)
    return str(path)
