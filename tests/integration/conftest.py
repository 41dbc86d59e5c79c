"""A real Slurm cluster for the integration tests (scripts/devcluster.py).

Every test under tests/integration is marked ``integration``. Unit runs
deselect them (``pytest -m "not integration"``); ``pytest -m integration``
runs them against a private cluster that the session-scoped ``devcluster``
fixture brings up once (4 nodes x 8 fake GPUs, two leaf switches under one
spine) and always tears down. Without Slurm installed (or without root) the
fixture *fails* with the reason: integration tests never skip themselves
into green.

Environment knobs:

* ``SLURMTOPO_IT_SLURM``: which Slurm to test, an install prefix or a
  release tarball (built once into the cache, see ``devcluster.py build``);
  empty or unset: the packaged Slurm (/usr/sbin, /usr/bin).
* ``SLURMTOPO_IT_TOPOLOGY_PARAM``: ``TopologyParam=`` for every test
  cluster (scripts/test.sh runs 25.11 with ``SwitchAsNodeRank``).
* ``SLURMTOPO_IT_DIR``: the cluster's state directory (default: a pytest
  temp dir). scripts/test.sh sets it so it can clean up after a killed run.
* ``SLURMTOPO_IT_REUSE=DIR``: use the dev cluster already running in DIR
  (``scripts/devcluster.py up --dir DIR``) and leave it running; for fast
  edit-test loops. Tests that reconfigure it put the defaults back.

The fixture's object (:class:`Cluster`)::

    devcluster.env            dict for subprocess (SLURM_CONF, PATH)
    devcluster.dir            Path of the state dir (etc/, log/, dev/, ...)
    devcluster.conf           Path of slurm.conf
    devcluster.nodes          ["node1", ..., "node4"]
    devcluster.gpus_per_node  8
    devcluster.partition      "gpu"
    devcluster.run(cmd, check=True, timeout=60) -> CompletedProcess (text)
    devcluster.sbatch(*args, wrap=None, script=None) -> int job id
    devcluster.wait_job(jobid, timeout=60) -> final state ("COMPLETED", ...)
    devcluster.job(jobid) -> dict of `scontrol -d -o show job` fields (+ "_raw")
    devcluster.gpus(jobid) -> {"node1": [0, 1], ...} GPU indices per node
    devcluster.output(jobid) -> text of DIR/out/<jobid>.out (sbatch's default -o)
    devcluster.wait_state(jobid, states, timeout=30) -> state once in states
    devcluster.reconfigure(topology_conf=None, gres_conf=None)  # paths or text
    devcluster.restart_ctld()
    devcluster.reset()        # back to the default gres.conf/topology.conf
    devcluster.cancel_all()   # scancel everything and wait for idle nodes
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, Optional, Union

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


from tests.integration.helpers import devcluster_mod, it_config, it_slurm, it_version  # noqa: F401
DevClusterError = devcluster_mod.DevClusterError

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark everything collected from tests/integration as ``integration``
    (before -m deselects anything)."""
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _parse_scontrol(line: str) -> Dict[str, str]:
    """``A=1 B=x y C=z`` (one record, -o) -> dict; values may hold spaces."""
    out: Dict[str, str] = {}
    key = None
    for tok in line.split(" "):
        if "=" in tok and not tok.startswith("="):
            k, v = tok.split("=", 1)
            if k and (k[0].isalpha()):
                key = k
                out[key] = v
                continue
        if key is not None and tok:
            out[key] += " " + tok
    return out


class Cluster:
    """What the ``devcluster`` fixture yields; see the module doc."""

    def __init__(self, dc):
        self._dc = dc
        self.dir: Path = dc.dir
        self.conf: Path = dc.conf
        self.nodes = list(dc.cfg.node_names)
        self.gpus_per_node: int = dc.cfg.gpus
        self.partition: str = dc.cfg.partition
        self.cfg = dc.cfg

    @property
    def env(self) -> Dict[str, str]:
        return self._dc.env

    def run(self, cmd: Union[str, Iterable[str]], check: bool = True, timeout: float = 60,
            **kw) -> subprocess.CompletedProcess:
        """Run with the cluster's env; a str goes through bash -c. check=True
        raises AssertionError carrying stdout/stderr."""
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(map(str, cmd))
        p = subprocess.run(argv, env=self.env, text=True, capture_output=True, timeout=timeout, **kw)
        if check and p.returncode != 0:
            raise AssertionError(f"{cmd if isinstance(cmd, str) else shlex.join(argv)} "
                                 f"exited {p.returncode}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}")
        return p

    def sbatch(self, *args: str, wrap: Optional[str] = None, script: Optional[str] = None) -> int:
        """Submit; returns the job id. Output goes to DIR/out/<jobid>.out
        unless args say otherwise."""
        (self.dir / "out").mkdir(exist_ok=True)
        argv = ["sbatch", "--parsable", "-o", str(self.dir / "out" / "%j.out"), *args]
        if wrap is not None:
            argv += ["--wrap", wrap]
        p = self.run(argv, input=script)
        return int(p.stdout.strip().split(";")[0])

    def output(self, jobid: int) -> str:
        return (self.dir / "out" / f"{jobid}.out").read_text()

    def job(self, jobid: int) -> Dict[str, str]:
        p = self.run(["scontrol", "-d", "-o", "show", "job", str(jobid)], check=False)
        if p.returncode != 0:
            return {}
        line = p.stdout.strip().splitlines()[0]
        return dict(_parse_scontrol(line), _raw=line)

    def gpus(self, jobid: int) -> Dict[str, list]:
        """node -> GPU indices the job holds there (from ``scontrol -d``)."""
        out: Dict[str, list] = {}
        raw = self.job(jobid).get("_raw", "")
        for nodes, gres in re.findall(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", raw):
            idx = []
            for m in re.finditer(r"IDX:([0-9,\-]+)", gres):
                for part in m.group(1).split(","):
                    a, _, b = part.partition("-")
                    idx += list(range(int(a), int(b or a) + 1))
            for node in devcluster_mod.expand(nodes):
                out[node] = sorted(idx)
        return out

    def state(self, jobid: int) -> str:
        return self.job(jobid).get("JobState", "UNKNOWN")

    def wait_state(self, jobid: int, states: Iterable[str], timeout: float = 30) -> str:
        states = set(states)
        deadline = time.monotonic() + timeout
        while True:
            st = self.state(jobid)
            if st in states:
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"job {jobid} not in {sorted(states)} after {timeout}s: "
                                     f"{self.job(jobid)}\n{self.run('squeue', check=False).stdout}")
            time.sleep(0.1)

    def wait_job(self, jobid: int, timeout: float = 60) -> str:
        """Poll until the job has ended; returns its final JobState."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.run(["squeue", "-h", "-j", str(jobid)], check=False).stdout.strip():
                st = self.state(jobid)     # squeue drops it once done; scontrol keeps it (MinJobAge)
                if st in TERMINAL:
                    return st
            if time.monotonic() > deadline:
                raise AssertionError(f"job {jobid} still not done after {timeout}s: {self.job(jobid)}\n"
                                     f"{self.run('squeue', check=False).stdout}\n{self._dc.log_tails(10)}")
            time.sleep(0.1)

    def _as_path(self, value, name: str) -> Optional[str]:
        if value is None:
            return None
        if isinstance(value, str) and "\n" in value:          # text, not a path
            fd, path = tempfile.mkstemp(prefix=f"{name}.", suffix=".conf", dir=self.dir)
            with os.fdopen(fd, "w") as f:
                f.write(value)
            return path
        return str(value)

    def reconfigure(self, topology_conf=None, gres_conf=None) -> None:
        """Load new topology.conf/gres.conf (a path, or the text itself).
        Raises DevClusterError (cluster restored) if Slurm rejects them."""
        self._dc.reconfigure(gres_conf=self._as_path(gres_conf, "gres"),
                             topology_conf=self._as_path(topology_conf, "topology"))

    def restart_ctld(self) -> None:
        self._dc.restart_ctld()

    def reset(self) -> None:
        self._dc.reset()

    def cancel_all(self) -> None:
        if self.run(["squeue", "-h"], check=False).stdout.strip():
            self.run(["scancel", "-p", self.partition], check=False)
            deadline = time.monotonic() + 30
            while self.run(["squeue", "-h"], check=False).stdout.strip():
                if time.monotonic() > deadline:
                    raise AssertionError("jobs left after scancel:\n" + self.run("squeue").stdout)
                time.sleep(0.1)
        self._dc.wait_idle(timeout=30)


@pytest.fixture(scope="session")
def devcluster(tmp_path_factory):
    reuse = os.environ.get("SLURMTOPO_IT_REUSE")
    if reuse:
        try:
            dc = devcluster_mod.DevCluster(reuse)
            dc.wait_idle(timeout=10, allow_busy=True)
        except DevClusterError as exc:
            pytest.fail(f"SLURMTOPO_IT_REUSE={reuse}: no usable dev cluster there: {exc}", pytrace=False)
        yield Cluster(dc)
        return
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (the dev cluster mknods fake GPUs and runs "
                    "slurmd as root)", pytrace=False)
    state_dir = os.environ.get("SLURMTOPO_IT_DIR") or str(tmp_path_factory.mktemp("devcluster"))
    cfg = it_config(dir=state_dir, nodes=4, gpus=8, leaves=2,
                    port=devcluster_mod.free_port_base(4))
    try:
        dc = devcluster_mod.DevCluster.up(cfg)
    except DevClusterError as exc:
        pytest.fail(f"dev cluster did not come up: {exc}", pytrace=False)
    try:
        yield Cluster(dc)
    finally:
        dc.down()


@pytest.fixture(autouse=True)
def _no_jobs_left(request):
    """Tests start on an idle cluster: cancel whatever a test left behind."""
    yield
    if "devcluster" in request.fixturenames:
        try:
            cluster = request.getfixturevalue("devcluster")
        except (Exception, pytest.fail.Exception):   # the fixture itself failed: reported already
            return
        cluster.cancel_all()
