"""Where a job's files live: one run directory per job, all in one place.

``slurmtopo sbatch`` keeps, per submitted job, ``<submit dir>/.slurmtopo/
runs/<jobid>/``: the batch script as submitted (``job.sbatch``, so the
planned rank map can be shown after Slurm forgot the job) and, once the job
starts, what ``slurmtopo bind`` writes there (``rankmap.json`` with the
actual rank map, ``hostfile``, ``env.sh``, ``task-env.sh``). Keeping them
under one hidden directory stops ``slurmtopo-run-*`` directories piling up
next to the user's files; :func:`clean_old` removes those of old jobs.
"""
from __future__ import annotations

import os
import shutil
import time
from typing import List, Optional

#: relative to the submit directory; the batch script uses the same path
RUNS_SUBDIR = os.path.join(".slurmtopo", "runs")
#: run directories untouched this long are removed at the next submission
DEFAULT_KEEP_DAYS = 14.0
SCRIPT_NAME = "job.sbatch"


def runs_root(submit_dir: str) -> str:
    return os.path.join(submit_dir, RUNS_SUBDIR)


def run_dir_for(submit_dir: str, job_id: int) -> str:
    return os.path.join(runs_root(submit_dir), str(int(job_id)))


def save_script(run_dir: str, script_text: str) -> str:
    """Keep the submitted script in the job's run directory (private:
    mode 0700 directories, 0600 file, like the run directory bind makes)."""
    from slurmtopo.fileio import atomic_write, ensure_dir

    ensure_dir(run_dir, "run directory", mode=0o700)
    path = os.path.join(run_dir, SCRIPT_NAME)
    atomic_write(path, script_text, mode=0o600)
    return path


def _newest_mtime(path: str) -> float:
    newest = os.lstat(path).st_mtime
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    return newest


def clean_old(submit_dir: str, keep_days: float = DEFAULT_KEEP_DAYS,
              now: Optional[float] = None, keep: tuple = ()) -> List[str]:
    """Remove run directories (named by job id) under ``submit_dir`` whose
    newest file is older than ``keep_days``; never one named in ``keep``.
    Returns the removed paths. ``keep_days`` <= 0 removes nothing."""
    root = runs_root(submit_dir)
    if keep_days <= 0 or not os.path.isdir(root):
        return []
    cutoff = (time.time() if now is None else now) - keep_days * 86400
    removed = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not name.isdigit() or name in keep or os.path.islink(path) or not os.path.isdir(path):
            continue
        try:
            if _newest_mtime(path) < cutoff:
                shutil.rmtree(path)
                removed.append(path)
        except OSError:
            continue
    return removed
