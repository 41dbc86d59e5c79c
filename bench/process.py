"""slurmtopo run as users run it, for the command-line benchmarks: a fresh
process measured (wall clock, CPU time, peak resident memory), the
inventory it plans on, the command shown as typed, and the units the
tables print. bench/cli.py, bench/launch.py and bench/simulate.py share it
(none of them imports another for these)."""
from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: nodes of the command-line benchmarks' inventory (100,000 GPUs), and of --quick
NODES = 12500
QUICK_NODES = 512


def layout_for(world: int) -> Tuple[int, int, int]:
    """(tp, pp, dp): TP 8 in a node, PP up to 16, DP the rest
    (16,384 GPUs = tp 8, pp 16, dp 128)."""
    tp = min(8, world)
    pp = max(1, min(16, world // tp // 8))
    return tp, pp, world // (tp * pp)


def child_env() -> Dict[str, str]:
    """The environment of a measured child: this tree first on its path, and
    byte-code written, as an installed package has it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc
    return env


#: starts the measured command and reports its wall time, CPU time, peak
#: RSS and exit status on stdout. A small process of its own does the
#: spawning because Linux counts the spawning process's resident memory at
#: exec time into the child's peak RSS: spawned from this benchmark (which
#: plans 16,384 GPUs in-process) every child would report ~100 MiB.
_SPAWNER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ, file_actions=[
    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, os.waitstatus_to_exitcode(status))
"""


def run_process(argv: Sequence[str], cwd: Optional[str] = None, env=None,
                stdin: Optional[str] = None) -> Dict[str, Any]:
    """Wall seconds, CPU seconds, peak RSS (bytes) and exit code of one
    child process (its stdout discarded, its stderr kept for errors)."""
    p = subprocess.run([sys.executable, "-S", "-c", _SPAWNER, *argv], cwd=cwd,
                       env=env or child_env(), capture_output=True,
                       input=stdin.encode() if stdin is not None else None,
                       stdin=subprocess.DEVNULL if stdin is None else None)
    try:
        wall, cpu, rss, rc = p.stdout.decode().split()
    except ValueError:  # the spawner itself failed (no such program)
        return {"wall_s": 0.0, "cpu_s": 0.0, "rss_bytes": 0, "rc": p.returncode or 1,
                "stderr": p.stderr.decode(errors="replace")[-2000:]}
    return {"wall_s": float(wall), "cpu_s": float(cpu), "rss_bytes": int(rss), "rc": int(rc),
            "stderr": p.stderr.decode(errors="replace")[-2000:]}


def median_run(argv: Sequence[str], repeats: int, **kw) -> Dict[str, Any]:
    runs = [run_process(argv, **kw) for _ in range(max(1, repeats))]
    bad = [r for r in runs if r["rc"] != 0]
    out = {"median_s": statistics.median(r["wall_s"] for r in runs),
           "cpu_s": statistics.median(r["cpu_s"] for r in runs),
           "samples_s": [r["wall_s"] for r in runs],
           "rss_bytes": max(r["rss_bytes"] for r in runs)}
    if bad:
        out["error"] = bad[0]["stderr"].strip().splitlines()[-1:] or ["failed"]
    return out


def slurmtopo(*args: str) -> List[str]:
    return [sys.executable, "-m", "slurmtopo", *args]


def show(argv: Sequence[str]) -> str:
    """The command as a user would type it."""
    words = ["slurmtopo"] + list(argv[3:]) if list(argv[1:3]) == ["-m", "slurmtopo"] else argv
    return " ".join(shlex.quote(str(w)) for w in words)


def write_inventory(directory: str, nodes: int) -> str:
    """The 3-level fat tree of HGX H100 nodes, folded (one node type)."""
    sys.path.insert(0, ROOT)
    from bench.scenarios import cluster
    from slurmtopo.inventory.schema import dump_inventory

    path = os.path.join(directory, f"fattree3-{nodes}.yaml")
    if not os.path.exists(path):
        with open(path, "w") as fh:
            fh.write(dump_inventory(cluster("fattree3", nodes)))
    return path


def seconds(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def mib(x: Optional[float]) -> str:
    return "-" if x is None else f"{x / 2**20:.0f} MiB"


def kib(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x / 1024:.0f} KiB" if x < 2**20 else f"{x / 2**20:.1f} MiB")
