"""Constants and the command runner shared by the binding step."""
from __future__ import annotations

import subprocess
from typing import Callable, Mapping, Optional, Sequence, Tuple


TABLE_MAGIC = "slurmtopo-ranktable"
#: the rank table travels in the environment below this size (one variable
#: may not exceed 128 KiB on Linux); above it, in DIR/ranktable, which must
#: then be on a file system every node can read
ENV_TABLE_LIMIT = 96 * 1024
CGROUP_MODES = ("auto", "yes", "no")

#: (argv, env) -> (exit code, stdout); tests pass fakes
Runner = Callable[[Sequence[str], Optional[Mapping[str, str]]], Tuple[int, str]]


def run_command(argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
                timeout: float = 120) -> Tuple[int, str]:
    """Run a Slurm client; (127, "") when it is not installed."""
    try:
        p = subprocess.run(list(argv), env=dict(env) if env is not None else None,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=timeout)
    except FileNotFoundError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    return p.returncode, p.stdout


