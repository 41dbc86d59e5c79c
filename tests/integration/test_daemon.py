"""The placement daemon on the dev Slurm cluster (4 nodes x 8 GPUs,
node[1-2] on leaf1, node[3-4] on leaf2).

The inventory describes each node as two NVLink quads (GPUs 0-3 on socket 0,
4-7 on socket 1), matching the dev cluster's gres.conf sockets. Cycles are
driven by the tests (``Daemon.cycle()`` in process, the real CLI backend);
one test runs the daemon as a background process and SIGKILLs it mid-cycle.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.spool import Journal, read_events
from tests.events import release_count
from slurmtopo.daemon.protocol import PREFIX, REJECTED_PREFIX
from slurmtopo.daemon.submit import submit_for_daemon
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.slurm.cli_backend import CliBackend

ROOT = Path(__file__).resolve().parents[2]

# each node: two NVLink quads, GPUs 0-3 on socket 0 and 4-7 on socket 1 (the
# dev cluster's gres.conf binds them so); node[1-2] on leaf1, node[3-4] on leaf2
QUAD8 = (Path(__file__).resolve().parents[1] / "fixtures" / "daemon" /
         "quad8-inventory.yaml").read_text()

pytestmark = pytest.mark.integration

QUADS = [{0, 1, 2, 3}, {4, 5, 6, 7}]


# --------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def inv_path(devcluster):
    path = devcluster.dir / "daemon-inventory.yaml"
    path.write_text(QUAD8)
    return str(path)


@pytest.fixture(scope="module")
def inv(inv_path):
    return load_inventory(inv_path)


@pytest.fixture
def backend(devcluster):
    return CliBackend(env=devcluster.env)


@pytest.fixture
def spool(devcluster):
    path = devcluster.dir / f"spool-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return str(path)


def plain_script(devcluster, nodes: int, gpn: int, cmd: str = "sleep 300") -> str:
    """A batch script with the shape `slurmtopo sbatch` writes (the command
    itself does not matter to the daemon)."""
    out = devcluster.dir / "out"
    out.mkdir(exist_ok=True)
    return ("#!/bin/bash\n"
            f"#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node={gpn}\n"
            f"#SBATCH --gpus-per-node={gpn}\n#SBATCH --output={out}/%j.out\n"
            f"#SBATCH --switches=1@5:00\n{cmd}\n")


def slurmtopo_script(devcluster, inv, inv_path, req, cmd) -> str:
    """The real `slurmtopo sbatch` script: plan embedded, `slurmtopo bind`
    at start, one srun."""
    from slurmtopo.plan.choice import plan
    from slurmtopo.sbatch import SbatchRequest

    (devcluster.dir / "out").mkdir(exist_ok=True)
    p = plan(inv, None, req)
    return SbatchRequest.from_plan(
        inv, p, req.layout, cmd, req, inventory_path=inv_path,
        extra=(f"--output={devcluster.dir}/out/%j.out",),
        run_dir=str(devcluster.dir / "run" / uuid.uuid4().hex[:8])).render()


def submit(backend, devcluster, layout, gpn=4, script=None, **kw) -> int:
    req = JobRequest(layout=layout, gpus_per_node=gpn, **kw)
    text = script or plain_script(devcluster, -(-req.world // gpn), gpn)
    return submit_for_daemon(backend, req, text)


def block(devcluster, *nodes):
    """An exclusive job on each node; {node: job id} once all run."""
    jobs = {n: devcluster.sbatch("-w", n, "--exclusive", "-o", "/dev/null", wrap="sleep 300")
            for n in nodes}
    for j in jobs.values():
        devcluster.wait_state(j, {"RUNNING"})
    return jobs


def occupy(devcluster, node, busy):
    """Make exactly the GPUs ``busy`` of ``node`` busy (one 1-GPU job each;
    Slurm picks the indices, so fill the node and cancel the others)."""
    jobs = [devcluster.sbatch("-w", node, "--gres=gpu:1", "-o", "/dev/null", wrap="sleep 300")
            for _ in range(devcluster.gpus_per_node)]
    held = {}
    for j in jobs:
        devcluster.wait_state(j, {"RUNNING"})
        held[j] = devcluster.gpus(j)[node][0]
    drop = [str(j) for j, g in held.items() if g not in busy]
    if drop:
        devcluster.run(["scancel"] + drop)
        for j in drop:
            devcluster.wait_job(int(j), timeout=30)
    return {j: g for j, g in held.items() if g in busy}


def releases_in_log(devcluster, job_id) -> int:
    """How many times slurmctld says it released the job's hold."""
    text = (devcluster.dir / "log" / "slurmctld.log").read_text(errors="replace")
    return len(re.findall(rf"release hold on JobId={job_id} by", text))


def in_one_quad(gpus) -> bool:
    return any(set(gpus) <= q for q in QUADS)


# --------------------------------------------------------------------------
# tests


def test_two_jobs_that_fragment_each_other_both_run_well(devcluster, backend, inv, inv_path,
                                                         spool):
    """B (tp=2 x dp=2) and A (tp=4, NVLink required), on a cluster where
    node1 has one free quad (4-7) and node2 two free pairs (0-1, 4-5).
    Slurm, given B first, puts B on node1's quad and A on node2 across
    sockets; the daemon puts A on the quad and B on the pairs."""
    block(devcluster, "node3", "node4")
    occupy(devcluster, "node1", {0, 1, 2, 3})
    occupy(devcluster, "node2", {2, 3, 6, 7})

    # Slurm's own choice, for comparison
    b0 = devcluster.sbatch("-N1", "--ntasks-per-node=4", "--gpus-per-node=4", "-o", "/dev/null",
                           wrap="sleep 300")
    a0 = devcluster.sbatch("-N1", "--ntasks-per-node=4", "--gpus-per-node=4", "-o", "/dev/null",
                           wrap="sleep 300")
    devcluster.wait_state(b0, {"RUNNING"})
    devcluster.wait_state(a0, {"RUNNING"})
    a0_gpus = devcluster.gpus(a0)
    assert not all(in_one_quad(g) for g in a0_gpus.values()), \
        f"Slurm put the tp=4 job on one quad by itself: {a0_gpus}"
    devcluster.run(["scancel", str(a0), str(b0)])
    devcluster.wait_job(a0)
    devcluster.wait_job(b0)

    # the daemon, B submitted first (higher priority)
    b = submit(backend, devcluster, Layout(tp=2, dp=2), require={"tp": "nvlink"})
    a = submit(backend, devcluster, Layout(tp=4), require={"tp": "nvlink"},
               script=slurmtopo_script(devcluster, inv, inv_path,
                                       JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"},
                                                  gpus_per_node=4), ["sleep", "1"]))
    assert backend.job(a).held and backend.job(b).held
    d = Daemon(backend, inv, spool)
    ds = {x.job_id: x for x in d.cycle()}
    assert ds[a].action == "release" and ds[b].action == "release", ds
    devcluster.wait_state(b, {"RUNNING"})
    assert devcluster.gpus(b) == {"node2": [0, 1, 4, 5]}
    assert devcluster.wait_job(a, timeout=60) == "COMPLETED"
    out = devcluster.output(a)
    # the script's plan was made at submit time (on an idle cluster); bind
    # maps the ranks onto what the daemon pinned and Slurm gave: the quad
    assert "node1: GPUs 4-7" in out, out
    assert "node1: ranks 0-3 on GPUs 4,5,6,7" in out, out
    assert devcluster.job(a)["NodeList"] == "node1"
    d.cycle()
    assert d.records[b].phase == "running" and d.records[b].drift is None
    assert releases_in_log(devcluster, a) == releases_in_log(devcluster, b) == 1


def test_a_job_waits_for_its_preferred_placement_then_falls_back(devcluster, backend, inv,
                                                                 spool):
    blockers = block(devcluster, "node1", "node3")      # free: node2 (leaf1), node4 (leaf2)
    kw = dict(require={"tp": "nvlink"}, prefer={"dp": "leaf"})
    d = Daemon(backend, inv, spool)

    # 1. a short wait: held while young, then the cross-leaf fallback
    f = submit(backend, devcluster, Layout(tp=4, dp=2), wait={"dp": 3}, **kw)
    first = [x for x in d.cycle() if x.job_id == f][0]
    assert first.action == "wait" and first.waiting_for == ("dp=leaf",), first
    st = subprocess.run([sys.executable, "-m", "slurmtopo", "daemon", "status", "--spool", spool],
                        capture_output=True, text=True, env=devcluster.env, cwd=ROOT)
    # the cycles run in this process: no daemon holds the spool (exit 3)
    assert st.returncode == 3 and str(f) in st.stdout and "waiting up to" in st.stdout, st
    submitted = int(backend.job(f).submit_time)
    time.sleep(max(0.0, submitted + 3.2 - time.time()))
    rel = [x for x in d.cycle() if x.job_id == f][0]
    assert rel.action == "release" and rel.taken == "fallback", rel
    assert set(rel.hosts) == {"node2", "node4"}
    devcluster.wait_state(f, {"RUNNING"})
    assert devcluster.job(f)["NodeList"] == "node[2,4]"
    ev = [e for e in read_events(spool, f) if e["event"] == "intent-release"][0]
    assert ev["taken"] == "fallback" and ev["gave_up"] == ["dp=leaf"]
    assert ev["cost_s"] >= ev["preferred_cost_s"] > 0
    devcluster.run(["scancel", str(f)])
    devcluster.wait_job(f)

    # 2. a long wait: held until one leaf frees, then the preferred placement
    p = submit(backend, devcluster, Layout(tp=4, dp=2), wait={"dp": 600}, **kw)
    assert [x for x in d.cycle() if x.job_id == p][0].action == "wait"
    devcluster.run(["scancel", str(blockers["node1"])])
    devcluster.wait_job(blockers["node1"])
    rel = [x for x in d.cycle() if x.job_id == p][0]
    assert rel.action == "release" and rel.taken == "preferred", rel
    devcluster.wait_state(p, {"RUNNING"})
    assert devcluster.job(p)["NodeList"] == "node[1-2]"


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_held_job_is_released_where_its_launcher_can_start_it(devcluster, backend, inv,
                                                                 spool, launcher):
    """node1 and node2 taken: tp=2 pp=2 dp=4 on node3 and node4. The
    faster-modelled nesting interleaves ranks over the two nodes, which
    torchrun cannot start; the launcher travels in the job's comment through
    Slurm, and the daemon releases a torchrun job node-contiguous (srun
    jobs keep the faster nesting)."""
    from slurmtopo.plan.rankmap import node_contiguous

    blockers = block(devcluster, "node1", "node2")
    # small gradient buckets and large pipeline sends (the daemon's protocol
    # carries message sizes, not the model): keeping each pipeline inside a
    # node then models clearly faster
    req = JobRequest(layout=Layout(tp=2, pp=2, dp=4), gpus_per_node=8,
                     message_bytes={"dp": 1 << 16, "pp": 1 << 28})
    j = submit_for_daemon(backend, req, plain_script(devcluster, 2, 8), launcher=launcher)
    try:
        assert ('"launcher":"torchrun"' in backend.job(j).comment) == (launcher == "torchrun")
        rel = [x for x in Daemon(backend, inv, spool).cycle() if x.job_id == j][0]
        assert rel.action == "release" and set(rel.hosts) == {"node3", "node4"}, rel
        why = node_contiguous(rel.placement)
        assert (why is None) if launcher == "torchrun" else ("interleaves" in why)
        devcluster.wait_state(j, {"RUNNING"})
    finally:
        devcluster.run(["scancel", str(j)] + [str(b) for b in blockers.values()], check=False)
        for b in [j, *blockers.values()]:
            devcluster.wait_job(b)


class RacingBackend(CliBackend):
    """Between the daemon's plan and its release, another job takes the
    node it pinned."""

    def __init__(self, devcluster, **kw):
        super().__init__(**kw)
        self.dc = devcluster
        self.thief = None

    def update_job(self, job_id, **fields):
        if "ReqNodeList" in fields and self.thief is None:
            self.thief = self.dc.sbatch("-w", fields["ReqNodeList"], "--exclusive",
                                        "-o", "/dev/null", wrap="sleep 300")
            self.dc.wait_state(self.thief, {"RUNNING"})
        return super().update_job(job_id, **fields)


def test_a_race_for_the_pinned_node_is_recovered(devcluster, inv, spool):
    block(devcluster, "node3", "node4")
    racing = RacingBackend(devcluster, env=devcluster.env)
    x = submit(racing, devcluster, Layout(tp=8), gpn=8, require={"tp": "node"})
    d = Daemon(racing, inv, spool)
    first = [y for y in d.cycle() if y.job_id == x][0]
    assert first.action == "release"
    lost = first.hosts[0]
    info = devcluster.job(x)
    assert info["JobState"] == "PENDING" and info["Reason"] != "JobHeldUser", info
    again = [y for y in d.cycle() if y.job_id == x]
    assert [y.action for y in again] == ["rehold", "release"], again
    assert "race" in again[0].reason
    devcluster.wait_state(x, {"RUNNING"})
    won = devcluster.job(x)["NodeList"]
    assert won in ("node1", "node2") and won != lost
    assert releases_in_log(devcluster, x) == 2
    assert release_count(read_events(spool), x) == 2
    assert [e["event"] for e in read_events(spool, x)].count("reheld") == 1


def _daemon_proc(devcluster, inv_path, spool, *pauses):
    """The daemon as a process; ``pauses`` (``after-intent=60``) make it
    sleep after those steps of a release (tests/integration/paused_daemon.py)."""
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    log = open(os.path.join(spool, f"daemon-{uuid.uuid4().hex[:6]}.log"), "w")
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paused_daemon.py")
    return subprocess.Popen([sys.executable, driver, *pauses, "--", "daemon", "run",
                             "--inventory", inv_path, "--spool", spool, "--interval", "0.3"],
                            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _until(cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_daemon_killed_mid_cycle_releases_every_job_exactly_once(devcluster, backend,
                                                                   inv_path, spool):
    jobs = [submit(backend, devcluster, Layout(tp=2), gpn=2, require={"tp": "nvlink"},
                   script=plain_script(devcluster, 1, 2, "sleep 1")) for _ in range(4)]

    def events(kind):
        return [e for e in read_events(spool) if e["event"] == kind]

    # 1. killed after writing its intent, before touching the job
    p1 = _daemon_proc(devcluster, inv_path, spool, "after-intent=60")
    try:
        _until(lambda: events("intent-release"), what="the first intent")
    finally:
        p1.send_signal(signal.SIGKILL)
        p1.wait(timeout=10)
    assert all(backend.job(j).held for j in jobs)          # nothing was released

    # 2. killed right after `scontrol release`, before journalling it
    p2 = _daemon_proc(devcluster, inv_path, spool, "after-release=60")
    try:
        _until(lambda: any(not backend.job(j).held for j in jobs), what="a release")
    finally:
        p2.send_signal(signal.SIGKILL)
        p2.wait(timeout=10)
    first = [j for j in jobs if not backend.job(j).held]
    assert len(first) == 1

    # 3. a normal daemon finishes the work
    p3 = _daemon_proc(devcluster, inv_path, spool)
    try:
        for j in jobs:
            assert devcluster.wait_job(j, timeout=60) == "COMPLETED"
        _until(lambda: len(events("ended")) >= len(jobs), what="the journal to empty")
    finally:
        p3.send_signal(signal.SIGTERM)
        rc = p3.wait(timeout=20)
    assert rc == 0
    ev = read_events(spool)
    for j in jobs:
        assert releases_in_log(devcluster, j) == 1, j
        assert release_count(ev, j) == 1, [e for e in ev if e.get("job") == j]
    kinds = [e["event"] for e in ev]
    assert "release-not-done" in kinds and "release-confirmed" in kinds
    assert [e["job"] for e in ev if e["event"] == "release-confirmed"] == first
    assert Journal(spool).load() == {}


def test_a_job_that_can_never_fit_is_rejected_not_held_forever(devcluster, backend, inv,
                                                               spool):
    never = submit(backend, devcluster, Layout(tp=16), gpn=8, require={"tp": "nvlink"})
    garbled = backend.submit(plain_script(devcluster, 1, 4), hold=True,
                             args=[f"--comment={PREFIX}{{oops"])
    d = Daemon(backend, inv, spool)
    d.cycle()
    assert devcluster.wait_job(never, timeout=30) == "CANCELLED"
    comment = devcluster.job(never)["Comment"]
    assert comment.startswith(REJECTED_PREFIX) and "can never run" in comment, comment
    assert "groups of 16 with NVLink" in comment
    assert devcluster.job(garbled)["JobState"] == "CANCELLED"
    assert "not valid JSON" in devcluster.job(garbled)["Comment"]

    # --on-reject hold: left held, reason in the comment, never looked at again
    kept = submit(backend, devcluster, Layout(tp=16), gpn=8, require={"tp": "nvlink"})
    d2 = Daemon(backend, inv, spool, on_reject="hold")
    d2.cycle()
    info = devcluster.job(kept)
    assert info["JobState"] == "PENDING" and info["Reason"] == "JobHeldUser"
    assert info["Comment"].startswith(REJECTED_PREFIX)
    assert [x for x in d2.cycle() if x.job_id == kept] == []
    st = subprocess.run([sys.executable, "-m", "slurmtopo", "daemon", "status", "--spool", spool],
                        capture_output=True, text=True, env=devcluster.env, cwd=ROOT)
    assert f"job {kept} (hold" in st.stdout and "can never run" in st.stdout, st.stdout


def test_a_placement_with_an_error_hazard_is_never_released(devcluster, backend, inv,
                                                            spool):
    """node3 and node4 taken. bob's tp=8 job with 4 GPUs a node, first in
    line, submitted under group-domain=error: every TP group it can have
    spans two hosts although a node holds 8 GPUs, even on the empty cluster.
    It is never released: held, the reason in its comment; it claims
    nothing, so the whole-node job after it runs on node1 and node2 in the
    same cycle (docs/hazards.md, "The placement daemon")."""
    blockers = block(devcluster, "node3", "node4")
    spread = submit_for_daemon(backend, JobRequest(layout=Layout(tp=8), gpus_per_node=4),
                               plain_script(devcluster, 2, 4), hazards=("group-domain=error",))
    assert '"hazards":{"policy":["group-domain=error"]}' in backend.job(spread).comment
    whole = submit(backend, devcluster, Layout(tp=8, dp=2), gpn=8)
    try:
        ds = {x.job_id: x for x in Daemon(backend, inv, spool).cycle()}
        assert ds[spread].action == "wait" and ds[spread].final, ds[spread]
        assert ds[whole].action == "release", ds[whole]
        devcluster.wait_state(whole, {"RUNNING"})
        assert devcluster.job(whole)["NodeList"] == "node[1-2]"
        info = devcluster.job(spread)
        assert info["JobState"] == "PENDING" and info["Reason"] == "JobHeldUser", info
        assert info["Comment"].startswith(REJECTED_PREFIX), info
        assert "hazard group-domain (error): tp group 0 (8 ranks) spans 2 hosts" \
            in info["Comment"]
        assert releases_in_log(devcluster, spread) == 0
    finally:
        devcluster.run(["scancel", str(spread), str(whole)]
                       + [str(b) for b in blockers.values()], check=False)


def test_cli_sbatch_daemon_then_daemon_once(devcluster, inv_path, spool):
    """The user's path: `slurmtopo sbatch --daemon` submits held and tagged
    (with the job's model: the training step travels through Slurm's
    comment), `slurmtopo daemon --once` releases it, the job runs through
    bind."""
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    (devcluster.dir / "out").mkdir(exist_ok=True)
    run_dir = devcluster.dir / "run" / uuid.uuid4().hex[:8]
    p = subprocess.run([sys.executable, "-m", "slurmtopo", "sbatch", "--daemon", "--parsable",
                        "--inventory", inv_path, "--tp", "4", "--require", "tp=nvlink",
                        "--model", "params=0,layers=4,hidden=512,heads=8,ffn=2048,vocab=1000,"
                        "seq_len=256,global_batch=4",
                        "--gpus-per-node", "4", "--run-dir", str(run_dir), "--spool", spool,
                        f"--sbatch=--output={devcluster.dir}/out/%j.out", "--", "sleep", "1"],
                       capture_output=True, text=True, env=env, cwd=devcluster.dir)
    assert p.returncode == 0, p.stderr
    assert f"warning: no placement daemon is running with spool {spool}" in p.stderr
    job = int(p.stdout.strip().splitlines()[-1])
    info = devcluster.job(job)
    assert info["Reason"] == "JobHeldUser" and info["Comment"].startswith(PREFIX), info
    assert '"model":{' in info["Comment"] and '"layers":4' in info["Comment"], info
    p = subprocess.run([sys.executable, "-m", "slurmtopo", "daemon", "--inventory", inv_path,
                        "--spool", spool, "--once"], capture_output=True, text=True, env=env,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert f"job {job}: release on node1" in p.stderr, p.stderr
    assert devcluster.wait_job(job, timeout=60) == "COMPLETED"
    assert "ranks 0-3 on GPUs 0,1,2,3" in devcluster.output(job)
    # the daemon is down now: `daemon status` says so in its exit code, and
    # a job submitted meanwhile is listed from Slurm, marked
    p = subprocess.run([sys.executable, "-m", "slurmtopo", "sbatch", "--daemon", "--parsable",
                        "--inventory", inv_path, "--tp", "4", "--gpus-per-node", "4",
                        "--spool", spool, f"--sbatch=--output={devcluster.dir}/out/%j.out",
                        "--wrap", "sleep 1"], capture_output=True, text=True, env=env,
                       cwd=devcluster.dir)
    assert p.returncode == 0, p.stderr
    later = int(p.stdout.strip().splitlines()[-1])
    try:
        st = subprocess.run([sys.executable, "-m", "slurmtopo", "daemon", "status", "--spool",
                             spool], capture_output=True, text=True, env=env, cwd=ROOT)
        assert st.returncode == 3, (st.stdout, st.stderr)
        assert "NOT running" in st.stdout
        row = [line for line in st.stdout.splitlines() if line.startswith(f"{later} ")]
        assert row and "unseen" in row[0], st.stdout
    finally:
        devcluster.run(["scancel", str(later)], check=False)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(text: str) -> dict:
    """{sample name: value} of the unlabelled samples of a text exposition,
    read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name: s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if not s.labels}


def test_metrics_show_a_held_job_released(devcluster, backend, inv_path, spool):
    """A background daemon with a node-exporter textfile and a port: the
    job is counted held while no node is free, then released once one is
    (releases 1, held 0), in both exports."""
    import urllib.request

    blockers = block(devcluster, "node1", "node2", "node3", "node4")
    job = submit(backend, devcluster, Layout(tp=4), require={"tp": "nvlink"},
                 script=plain_script(devcluster, 1, 4, "sleep 1"))
    mdir = devcluster.dir / f"metrics-{uuid.uuid4().hex[:8]}"
    mdir.mkdir()
    os.chmod(mdir, 0o755)
    textfile = mdir / "slurmtopo.prom"
    port = _free_port()
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    log = open(os.path.join(spool, "daemon-metrics.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "slurmtopo", "daemon", "run", "--inventory",
                             inv_path, "--spool", spool, "--interval", "0.3",
                             "--metrics-textfile", str(textfile), "--metrics-port", str(port)],
                            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def from_file():
        return _scrape(textfile.read_text()) if textfile.exists() else {}

    def from_port():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            return _scrape(r.read().decode())

    try:
        _until(lambda: from_file().get("slurmtopo_daemon_held_jobs") == 1, what="held 1")
        assert from_file()["slurmtopo_daemon_releases_total"] == 0
        assert backend.job(job).held
        scraped = from_port()
        assert scraped["slurmtopo_daemon_held_jobs"] == 1
        assert scraped["slurmtopo_daemon_releases_total"] == 0
        devcluster.run(["scancel", str(blockers["node1"])])
        devcluster.wait_job(blockers["node1"])
        _until(lambda: from_file().get("slurmtopo_daemon_releases_total") == 1,
               what="releases 1")
        doc = from_file()
        assert doc["slurmtopo_daemon_held_jobs"] == 0
        assert doc["slurmtopo_daemon_release_wait_seconds_count"] == 1
        scraped = from_port()
        assert scraped["slurmtopo_daemon_releases_total"] == 1
        assert scraped["slurmtopo_daemon_held_jobs"] == 0
        assert devcluster.wait_job(job, timeout=60) == "COMPLETED"
        assert devcluster.job(job)["NodeList"] == "node1"
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
    assert rc == 0
    assert oct(os.stat(textfile).st_mode & 0o777) == oct(0o644)
    assert releases_in_log(devcluster, job) == 1
