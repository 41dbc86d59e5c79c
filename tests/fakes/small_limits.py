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
{exec}{python} -c 'import runpy, sys
from slurmtopo.binding import limits
limits.ENV_TABLE_LIMIT = {env_limit}
limits.TASK_BLOCK = {block}
sys.argv[0] = "slurmtopo"
runpy.run_module("slurmtopo", run_name="__main__", alter_sys=True)' "$@"
"""

#: with ``pause``: once the step is done, say so and wait to be let go, so
#: a test can act between the start-time step and the tasks
_PAUSE = """rc=$?
: > {ready}
while [ ! -e {go} ]; do sleep 0.1; done
exit $rc
"""


def small_limits_python(directory: Path, block: int = 3, env_limit: int = 10,
                        python: str = sys.executable, pause: bool = False) -> str:
    """Write the stand-in into ``directory``; returns its path. ``pause``:
    after the step it creates ``directory/READY`` and waits for
    ``directory/GO``."""
    path = Path(directory) / "python-small-limits"
    text = _WRAPPER.format(python=shlex.quote(python), block=block, env_limit=env_limit,
                           exec="" if pause else "exec ")
    if pause:
        text += _PAUSE.format(ready=shlex.quote(str(Path(directory) / "READY")),
                              go=shlex.quote(str(Path(directory) / "GO")))
    path.write_text(text)
    path.chmod(0o755)
    return str(path)
