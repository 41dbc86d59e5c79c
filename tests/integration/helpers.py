"""Helpers the integration test modules share (the fixture is in conftest.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_slurmtopo(args, cwd=ROOT, env=None, check=True) -> subprocess.CompletedProcess:
    """Run the slurmtopo CLI as a user would; with ``check``, fail the test
    with its output when it exits non-zero."""
    p = subprocess.run([sys.executable, "-m", "slurmtopo", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"slurmtopo {' '.join(map(str, args))} exited {p.returncode}\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


def scontrol_topology(cluster) -> dict:
    """switch -> {"Nodes": ..., "Switches": ...} from `scontrol show topology`."""
    out = {}
    for line in cluster.run(["scontrol", "show", "topology"]).stdout.splitlines():
        kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "SwitchName" in kv:
            out[kv["SwitchName"]] = kv
    return out
