"""Helpers the integration test modules share (the fixture is in conftest.py)."""
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


def _load_devcluster():
    """scripts/devcluster.py as the module ``slurmtopo_devcluster`` (once)."""
    name = "slurmtopo_devcluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "devcluster.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


devcluster_mod = _load_devcluster()
DevClusterError = devcluster_mod.DevClusterError

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}



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

    def recover(self, timeout: float = 90) -> None:
        """Back to the default files after Slurm drained nodes for a refused
        one, and every node resumed until all are idle: a RESUME sent before
        a node registered is refused ('from=UNKNOWN'), and a slurmd that
        registered late with the refused gres.conf was drained again, which
        once left a node drained for every later test on 26.05. Each round
        resumes the nodes, and if one is still refused makes the slurmds
        read the (restored) files again."""
        dc = self._dc
        try:
            dc.reset()
        except DevClusterError:
            pass      # its files are back; the nodes' state is dealt with below
        deadline = time.monotonic() + timeout
        while True:
            self.run(["scontrol", "update", f"NodeName={','.join(self.nodes)}", "State=RESUME"],
                     check=False)
            try:
                dc.wait_idle(timeout=10)
                return
            except DevClusterError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
                self.run(["scontrol", "reconfigure"], check=False)
                time.sleep(1)

    def set_extra_conf(self, lines) -> None:
        """More slurm.conf lines (the Slurm hooks'), daemons restarted on them;
        ``[]`` takes them out again (scripts/devcluster.py set_extra_conf)."""
        self._dc.set_extra_conf(list(lines))

    def cancel_all(self) -> None:
        if self.run(["squeue", "-h"], check=False).stdout.strip():
            self.run(["scancel", "-p", self.partition], check=False)
            deadline = time.monotonic() + 30
            while self.run(["squeue", "-h"], check=False).stdout.strip():
                if time.monotonic() > deadline:
                    raise AssertionError("jobs left after scancel:\n" + self.run("squeue").stdout)
                time.sleep(0.1)
        self._dc.wait_idle(timeout=30)



_SLURM_PREFIX: Dict[str, str] = {}


def it_slurm() -> str:
    """The install prefix of the Slurm under test ("" = the packaged one);
    a tarball in SLURMTOPO_IT_SLURM is built (or found in the cache) once."""
    spec = os.environ.get("SLURMTOPO_IT_SLURM", "")
    if spec not in _SLURM_PREFIX:
        try:
            _SLURM_PREFIX[spec] = devcluster_mod.resolve_slurm(spec)
        except devcluster_mod.DevClusterError as exc:
            pytest.fail(f"SLURMTOPO_IT_SLURM={spec}: {exc}", pytrace=False)
    return _SLURM_PREFIX[spec]


def it_config(**kw):
    """A dev cluster Config for the Slurm under test (see the module doc);
    fails the test with the reason when that Slurm is not installed."""
    prefix = it_slurm()
    missing = devcluster_mod.missing_binaries(prefix)
    if missing:
        pytest.fail(f"integration tests need Slurm: {', '.join(missing)} not found"
                    f"{' in ' + prefix if prefix else ''}. Run: bash scripts/install-deps.sh "
                    "(apt-get install slurmctld slurmd slurm-client munge), or deselect them "
                    "with -m 'not integration'.", pytrace=False)
    kw.setdefault("topology_param", os.environ.get("SLURMTOPO_IT_TOPOLOGY_PARAM", ""))
    return devcluster_mod.Config(slurm=prefix, **kw)


def it_version() -> tuple:
    """(major, minor, micro) of the Slurm under test."""
    return devcluster_mod.version_tuple(devcluster_mod.slurm_version(it_slurm()))




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


def node_records(cluster) -> list:
    """Slurm's own JSON node records, whatever the version prints them with:
    ``scontrol show nodes --json`` (23.02+), else 22.05's ``sinfo --json``.
    ``state`` is folded to one lower-case string (``idle``, ``idle+drain``)
    because 23.02+ prints a list of flags."""
    p = cluster.run(["scontrol", "show", "nodes", "--json"], check=False)
    if p.returncode != 0:
        p = cluster.run(["sinfo", "--json"])
    import json
    nodes = json.loads(p.stdout)["nodes"]
    for n in nodes:
        if isinstance(n.get("state"), list):
            n["state"] = "+".join(s.lower() for s in n["state"])
    return nodes
