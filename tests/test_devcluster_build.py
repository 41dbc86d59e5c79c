"""scripts/devcluster.py's Slurm build says what it is doing while a step
runs (a build takes 5-12 minutes on 2 cores: silence looks like a hang)."""
from __future__ import annotations

import io
import sys
import time

from tests.integration.helpers import devcluster_mod


def test_a_long_build_step_reports_progress_with_its_last_line(tmp_path):
    logfile = tmp_path / "build.log"
    said = io.StringIO()
    argv = [sys.executable, "-c",
            "import time; print('compiling src/common/hostlist.c', flush=True); time.sleep(1.2)"]
    with open(logfile, "w") as out:
        rc = devcluster_mod._run_step(argv, tmp_path, None, out, logfile, "Slurm test",
                                      time.monotonic(), said, every=0.2)
    assert rc == 0
    lines = said.getvalue().splitlines()
    assert lines, "no progress line while the step ran"
    assert all(l.startswith("devcluster: building Slurm test:") for l in lines)
    assert any(l.endswith("compiling src/common/hostlist.c") for l in lines)


def test_a_failing_step_returns_its_exit_code(tmp_path):
    logfile = tmp_path / "build.log"
    with open(logfile, "w") as out:
        rc = devcluster_mod._run_step([sys.executable, "-c", "raise SystemExit(3)"], tmp_path,
                                      None, out, logfile, "Slurm test", time.monotonic(),
                                      io.StringIO(), every=5)
    assert rc == 3
