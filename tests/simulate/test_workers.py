"""A replay killed from outside leaves no worker behind (slurmtopo/simulate/workers.py)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "h100-32node-fattree.yaml")


def _children(pid: int):
    """The live child processes of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_the_replay_takes_its_workers(tmp_path):
    rng = random.Random(5)
    t = 0.0
    rows = ["job_id,gpu_num,submit_time,duration"]
    for i in range(4000):
        t += rng.expovariate(1 / 30.0)
        rows.append(f"j{i},{rng.choice([1, 8, 16, 32, 64])},{t:.0f},{rng.randint(600, 90000)}")
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "slurmtopo", "simulate", "--inventory", INV,
                             "--trace", str(trace), "--workers", "2", "--json",
                             "--policy", "daemon:wait=600", "--policy", "slurmtopo"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=tmp_path)
    try:
        workers = []
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "the replay ended before its workers were seen"
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) >= 2, "no workers forked"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
