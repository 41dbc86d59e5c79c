"""The second trust-boundary round (issue 33) on the dev cluster: the
placement daemon as root, and two unprivileged users (tests/integration/
users.py: stopo-alice, stopo-bob) who do not trust each other. Each test
is a finding of that round, replayed as bob did it, and fails on the code
before its fix:

* a job name that reads as Slurm's fields lifts no admin's hold, stops no
  cycle (``x ReqNodeList=n[``), and holds no one else's GPUs: read as JSON
  where Slurm has it, and where it does not (the text path, forced here),
  never split into fields, let go with the reason in its comment;
* a tagged array job is refused, never released task by task;
* the lock is the daemon's alone, `daemon status` tells liveness from the
  daemon's process, a silent metrics client blocks no scrape and no stop;
* a full spool is a visible SPOOL PROBLEM, request names cannot be
  squatted, request files of jobs that left are removed;
* root reading bob's files (`show` of his job, `audit --sacct-file`,
  `--config`, a Philly log) ends in one line, bounded.

One daemon cycle covers several users' jobs where it can, and the cycles
are one-shot (`--once`) or in process: the file adds little to the run.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from slurmtopo.daemon import protocol
from slurmtopo.daemon.decisions import Config
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.protocol import PREFIX, REJECTED_PREFIX, Shape, make_comment
from slurmtopo.daemon.spool import prepare_spool, read_events
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.slurm.cli_backend import CliBackend
from tests.integration.test_daemon_security import (SCRIPT, SCRIPT8, TP4, TP8,  # noqa: F401
                                                    daemon_once, inv_path, releases_in_log,
                                                    submit_as)
from tests.integration.users import ALICE, BOB, USER_PYTHON

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spool(users):
    """A fresh spool, prepared as the daemon does (0755, requests/ 1733),
    where the users reach it: in their 0755 base directory, not under
    pytest's /tmp/pytest-of-root, which another pytest session on the
    machine makes 0700 again at any moment."""
    path = users.base / f"spool-{uuid.uuid4().hex[:8]}"
    prepare_spool(str(path))
    return str(path)


def busy(devcluster, nodes=("node2", "node3", "node4")):
    """Whole-node jobs on ``nodes``: only the others are free."""
    jobs = [devcluster.sbatch("-w", n, "--exclusive", "-o", "/dev/null", wrap="sleep 300")
            for n in nodes]
    for j in jobs:
        devcluster.wait_state(j, {"RUNNING"})
    return jobs


def comment_of(devcluster, job_id) -> str:
    """The job's comment, read as JSON where Slurm has it (the text's
    Comment= may be cut by a forged key)."""
    backend = CliBackend(env=devcluster.env)
    job = backend.job(job_id)
    return job.comment if job is not None and not job.unreadable else ""


def state_of(devcluster, job_id) -> str:
    """``PENDING JobHeldAdmin``: the job's state and reason, from squeue
    fields no user writes."""
    return devcluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%T %r"]).stdout.strip()


def forged_name(users) -> str:
    """bob's name for an admin-held job: newlines and keys that say
    JobHeldUser and carry a tag (what the second round used)."""
    uid = users.uid(BOB)
    return (f"x\nUserId={BOB}({uid}) Priority=0 JobState=PENDING Reason=JobHeldUser "
            f"Comment={make_comment(TP8, Shape(1, 8, 8))}\nCommand=")


# --------------------------------------------------------------------------
# user text read as structure, and hostages


def test_forged_fields_in_a_name_hold_nobody_hostage_on_the_text_path(devcluster, users,
                                                                      inv_path, spool):
    """Slurm without JSON (the text path, forced): bob's admin-held job
    renamed with newlines and forged keys had its admin hold lifted; a job
    named `x ReqNodeList=n[` failed every cycle; a job named
    `x Reason=JobHeldUser`, first in line for the one free node, was never
    released and kept alice's job held on an idle node. Now none of bob's
    records is split into fields: alice's job runs in the first cycle, the
    admin's hold stays, and bob's jobs are let go with the reason in their
    comments, held."""
    blockers = busy(devcluster)
    held = submit_as(users, BOB, make_comment(TP8, Shape(1, 8, 8)), SCRIPT8)
    devcluster.run(["scontrol", "hold", str(held)])
    users.run(BOB, ["scontrol", "update", f"JobId={held}", f"JobName={forged_name(users)}"],
              check=True)
    broken = submit_as(users, BOB, make_comment(TP8, Shape(1, 8, 8)), SCRIPT8)
    users.run(BOB, ["scontrol", "update", f"JobId={broken}", "JobName=x ReqNodeList=n["],
              check=True)
    first = submit_as(users, BOB, make_comment(TP8, Shape(1, 8, 8)), SCRIPT8)
    users.run(BOB, ["scontrol", "update", f"JobId={first}", "JobName=x Reason=JobHeldUser"],
              check=True)
    a = submit_as(users, ALICE, make_comment(TP8, Shape(1, 8, 8)), SCRIPT8)
    d = Daemon(CliBackend(env=devcluster.env, json=False), load_inventory(inv_path), spool,
               Config(release_tries=2, retry_backoff=0))
    ds = {x.job_id: x for x in d.cycle()}
    devcluster.wait_state(a, {"RUNNING"})
    for b in (held, broken, first):
        assert ds[b].action == "left-alone" and "cannot be read" in ds[b].reason, ds[b]
    d.cycle()
    assert state_of(devcluster, held) == "PENDING JobHeldAdmin"
    for b in (held, broken, first):
        assert releases_in_log(devcluster, b) == 0
        assert comment_of(devcluster, b).startswith(REJECTED_PREFIX), b
        assert "cannot be read with certainty" in comment_of(devcluster, b)
    assert [e["event"] for e in read_events(spool, first)][-1] == "let-go"
    devcluster.run(["scancel", *map(str, blockers)])


def test_forged_fields_in_a_name_are_plain_text_as_json(devcluster, users, inv_path, spool):
    """Where Slurm prints JSON (squeue --json everywhere, scontrol show job
    --json from 23.02) the same names are only names: the admin's hold
    stays, and `x Reason=JobHeldUser` (never released before: "its comment
    changed" every cycle) is released like any job, by the daemon as an
    admin runs it."""
    held = submit_as(users, BOB, make_comment(TP8, Shape(1, 8, 8)), SCRIPT8)
    devcluster.run(["scontrol", "hold", str(held)])
    users.run(BOB, ["scontrol", "update", f"JobId={held}", f"JobName={forged_name(users)}"],
              check=True)
    named = submit_as(users, BOB, make_comment(TP4, Shape(1, 4, 4)))
    users.run(BOB, ["scontrol", "update", f"JobId={named}", "JobName=x Reason=JobHeldUser"],
              check=True)
    # from 25.11 SubmitLine= carries the script's arguments: `job.sh Account=foo`
    d = users.private_dir(BOB, f"script{uuid.uuid4().hex[:6]}")
    (d / "job.sh").write_text(SCRIPT)
    argued = int(users.run(BOB, ["sbatch", "--parsable", "--hold",
                                 f"--comment={make_comment(TP4, Shape(1, 4, 4))}",
                                 str(d / "job.sh"), "Account=foo", "Reason=JobHeldUser"],
                           check=True).stdout.strip().split(";")[0])
    run = daemon_once(devcluster, inv_path, spool)
    assert run.returncode == 0, run.stderr
    devcluster.wait_state(named, {"RUNNING"})
    devcluster.wait_state(argued, {"RUNNING"})
    assert state_of(devcluster, held) == "PENDING JobHeldAdmin"
    assert releases_in_log(devcluster, held) == 0
    status = json.load(open(os.path.join(spool, "status.json")))
    assert {j["job_id"]: j["action"] for j in status["jobs"]}[held] == "left-alone"


def test_a_tagged_array_is_refused_not_released_task_by_task(devcluster, users, inv_path,
                                                             spool):
    """An array job with a tag: one release started 2 tasks under
    --max-releases 1, `uhold` left running tasks held, then "Job resizing
    not supported for job arrays" every cycle. It is refused with the
    reason in its comment (left held here), and `slurmtopo sbatch --daemon`
    refuses an array before it exists."""
    p = users.run(BOB, ["sbatch", "--parsable", "--hold", "--array=0-1",
                        f"--comment={make_comment(TP4, Shape(1, 4, 4))}"], input=SCRIPT,
                  check=True)
    arr = int(p.stdout.strip().split(";")[0])
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "slurmtopo", "daemon", "run", "--inventory",
                          inv_path, "--spool", spool, "--once", "--max-releases", "1",
                          "--on-reject", "hold"], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert releases_in_log(devcluster, arr) == 0
    assert comment_of(devcluster, arr).startswith(REJECTED_PREFIX)
    assert "an array job cannot be placed by the daemon" in comment_of(devcluster, arr)
    listed = devcluster.run(["squeue", "-h", "-r", "-j", str(arr), "-o", "%i %T %r"]).stdout
    assert [line.split()[1:] for line in listed.splitlines()] == \
        [["PENDING", "JobHeldUser"]] * 2, listed


def test_big_requests_are_read_once_and_forgotten_with_their_jobs(devcluster, users, inv_path,
                                                                  spool, monkeypatch):
    """bob's waiting jobs with distinct 65,536-name excludes: each was
    decoded again every cycle (an 8 s cycle for 40 of them) and planned on
    the empty cluster, the plans kept until the inventory changed (26 MB to
    220 MB after 40 jobs). Each request is now decoded once, only the
    inventory's names kept, and forgotten with its job, plans included."""
    blockers = busy(devcluster, ("node1", "node2", "node3", "node4"))
    calls = []
    real = protocol.parse_comment

    def counting(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)
    monkeypatch.setattr(protocol, "parse_comment", counting)
    jobs = []
    for k in range(3):
        jobs.append(submit_as(users, BOB, _comment_as(users, BOB, spool,
                                                      f"node4,z{k}n[0-65534]")))
    d = Daemon(CliBackend(env=devcluster.env), load_inventory(inv_path), spool)
    for _ in range(3):
        ds = {x.job_id: x for x in d.cycle()}
    assert all(ds[j].action == "wait" for j in jobs), [ds[j] for j in jobs]
    assert len(calls) == 3 and len(d.requests) == 3
    assert d.requests.read(d.snapshot[jobs[0]])[0].request.exclude == ("node4",)
    assert len(d.memo.get("ideal") or {}) >= 1
    devcluster.run(["scancel", *map(str, jobs)])
    for j in jobs:
        devcluster.wait_job(j)
    d.cycle()
    assert len(d.requests) == 0 and not d.memo.get("ideal")
    devcluster.run(["scancel", *map(str, blockers)])


# --------------------------------------------------------------------------
# the lock, liveness, metrics


def test_the_lock_is_the_daemons_and_a_silent_client_stops_nothing(devcluster, users,
                                                                   inv_path, spool):
    """The lock was 0644: bob's `flock -s` kept the daemon from starting,
    his `flock -x` made `daemon status` say running with no daemon. A
    client sending a byte every few seconds blocked every other scrape, and
    after SIGTERM the daemon lived until that client went away. Now bob
    holds the old lock's name to no effect, cannot open the daemon's, reads
    liveness from the daemon's process, and the daemon stops at once."""
    old = Path(spool) / "daemon.lock"          # what an earlier release left
    old.write_text("1\n")
    old.chmod(0o644)
    bob = users.env(BOB)
    holder = subprocess.Popen(["flock", "-s", str(old), "sleep", "60"], user=users.uid(BOB),
                              group=users.group.gr_gid, env=bob)
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    daemon = subprocess.Popen([sys.executable, "-m", "slurmtopo", "daemon", "run",
                               "--inventory", inv_path, "--spool", spool, "--interval", "1",
                               "--metrics-port", "0"], env=env, cwd=ROOT,
                              stderr=subprocess.PIPE, text=True)
    slow = None
    try:
        port = None
        for line in daemon.stderr:
            if "metrics on http://" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
                break
        assert port, "the daemon did not start"
        threading.Thread(target=daemon.stderr.read, daemon=True).start()  # drained
        deadline = time.monotonic() + 30
        while not (Path(spool) / "status.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        p = users.slurmtopo(BOB, "daemon", "status", "--spool", spool, "--backend", "none")
        assert p.returncode == 0 and "running (pid" in p.stdout, (p.stdout, p.stderr)
        p = users.run(BOB, ["flock", "-n", "-s", f"{spool}/private/daemon.lock", "true"])
        assert p.returncode != 0 and "Permission denied" in p.stderr, p.stderr
        # bob's trickling client; root's scrape is answered all the same
        slow = socket.create_connection(("127.0.0.1", port))
        stop = threading.Event()

        def trickle():
            for ch in b"GET /metrics HTTP/1.0\r\n":
                if stop.wait(1.0):
                    return
                try:
                    slow.send(bytes([ch]))
                except OSError:
                    return
        threading.Thread(target=trickle, daemon=True).start()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"slurmtopo_daemon_spool_problem" in body
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=15)    # never waits for the trickling client
        stop.set()
        p = users.slurmtopo(BOB, "daemon", "status", "--spool", spool, "--backend", "none")
        assert p.returncode == 3 and "NOT running" in p.stdout, (p.stdout, p.stderr)
    finally:
        if slow is not None:
            slow.close()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------
# the spool and request files


def _comment_as(users, user, spool, exclude: str) -> str:
    """make_comment as ``user`` (the request file is theirs) of TP4 with
    ``exclude`` and the shape 1 x 4 x 4, printed."""
    code = ("import sys; from slurmtopo.daemon.protocol import make_comment, Shape; "
            "from slurmtopo.job.request import JobRequest; "
            "from slurmtopo.job.groups import Layout; "
            "print(make_comment(JobRequest(layout=Layout(tp=4), require={'tp': 'nvlink'}, "
            f"gpus_per_node=4, exclude={exclude!r}), Shape(1, 4, 4), spool={spool!r}))")
    return users.run(user, [USER_PYTHON, "-c", code], check=True).stdout.strip()


@pytest.fixture
def small_spool(devcluster, users):
    """A spool on a file system of its own, 2 MiB (mounted here; what a
    user can fill)."""
    path = users.base / f"spool-fs-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    devcluster.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(path)])
    try:
        prepare_spool(str(path))
        yield str(path)
    finally:
        devcluster.run(["umount", "-l", str(path)], check=False)


def test_a_full_spool_is_visible_and_request_files_are_swept(devcluster, users, inv_path,
                                                             small_spool):
    """bob guesses alice's request file name and takes it first (it was
    the uid's hash and the text's: her submission failed); then he fills
    the spool's file system through requests/ (1733), and the daemon's
    journal could not be written: nothing was released, status.json went
    stale, and nobody saw why. Now alice's name has a random part, her job
    waits while `daemon status` says SPOOL PROBLEM to every user, is
    released once the space is back, and her request file is removed after
    her job has gone."""
    spool = small_spool
    exclude = ",".join(f"x{i}-{i * 37 % 101}" for i in range(160))
    req = TP4.__class__(layout=TP4.layout, require=TP4.require, gpus_per_node=4,
                        exclude=exclude)
    text = protocol.dumps_compact(protocol.request_to_dict(req, Shape(1, 4, 4)))
    guessed = protocol.request_file_name(text, users.uid(ALICE))
    users.run(BOB, ["sh", "-c", f"echo mine > {spool}/requests/{guessed}.json"], check=True)
    comment = _comment_as(users, ALICE, spool, exclude)
    assert comment.startswith(PREFIX + "@" + guessed) and len(comment) == len(PREFIX) + 33
    assert daemon_once(devcluster, inv_path, spool).returncode == 0
    users.run(BOB, ["sh", "-c", f"mkdir {spool}/requests/d && "
                    f"dd if=/dev/zero of={spool}/requests/d/fill bs=64k 2>/dev/null; true"])
    a = submit_as(users, ALICE, comment)
    run = daemon_once(devcluster, inv_path, spool)
    assert run.returncode == 0, run.stderr
    assert releases_in_log(devcluster, a) == 0
    p = users.slurmtopo(BOB, "daemon", "status", "--spool", spool, "--backend", "none")
    assert "SPOOL PROBLEM: cannot write journal.json" in p.stdout, p.stdout
    devcluster.run(["rm", "-rf", f"{spool}/requests/d"])
    assert daemon_once(devcluster, inv_path, spool).returncode == 0
    devcluster.wait_state(a, {"RUNNING"})
    p = users.slurmtopo(BOB, "daemon", "status", "--spool", spool, "--backend", "none")
    assert "SPOOL PROBLEM" not in p.stdout, p.stdout
    name = comment[len(PREFIX) + 1:] + ".json"
    devcluster.run(["scancel", str(a)])
    devcluster.wait_job(a)
    old = time.time() - 3600
    os.utime(os.path.join(spool, "requests", name), (old, old))
    assert daemon_once(devcluster, inv_path, spool).returncode == 0
    assert name not in os.listdir(os.path.join(spool, "requests"))


# --------------------------------------------------------------------------
# root reads bob's files


def test_root_reads_bobs_files_within_bounds(devcluster, users, tmp_path_factory):
    """An admin's `slurmtopo show` of bob's job (its script's packed plan
    unpacking to 1.5 GiB took 3.2 GB), `audit --sacct-file`, `--config` and
    a Philly log that bob wrote: each ends in one line, in bounded time and
    memory (a child with 1 GiB of address space)."""
    import base64
    import zlib

    from slurmtopo.plan.planwrite import dumps_plan
    from slurmtopo.sbatch.script import extract_plan
    from tests.clirun import run_cli_subprocess

    d = users.private_dir(BOB, "plans")
    inv = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-inventory.yaml"
    users.run(BOB, ["cp", str(inv), str(d / "inv.yaml")], check=True)
    p = users.slurmtopo(BOB, "plan", "--inventory", str(d / "inv.yaml"), "--tp", "2",
                        "--output-dir", str(d / "p"), "--", "true")
    assert p.returncode == 0, p.stderr
    script = (d / "p" / "job.sbatch").read_text()
    plan = extract_plan(script)
    doc = json.loads(plan)
    inflate = zlib.compressobj(9)
    packed = b"".join(inflate.compress(b"0," * (1 << 20)) for _ in range(768)) + \
        inflate.flush()
    b64 = base64.b64encode(packed).decode()
    doc["ranks"] = {"packed": "zlib+base64",
                    "data": [b64[i:i + 76] for i in range(0, len(b64), 76)]}
    bomb = script.replace(plan, dumps_plan(doc))
    p = users.run(BOB, ["sbatch", "--parsable", "--hold", "-o", "/dev/null"], input=bomb,
                  check=True)
    job = int(p.stdout.strip().split(";")[0])
    base = tmp_path_factory.mktemp("bobs")
    files = {
        "sacct.txt": "JobID|Submit|Start|End|AllocTRES|NodeList|NNodes|Timelimit|State\n" + "".join(
            f"{k}|2025-03-03T09:00:00|2025-03-03T09:05:00|2025-03-03T10:00:00|"
            f"gres/gpu=16,node=2|n[{k}-{k + 65535}]|2|01:00:00|COMPLETED\n" for k in range(1, 500)),
        "ds.json": "[" * 100_000 + "]" * 100_000,
        "philly.json": '[{"jobid":' + "9" * 5000 + ',"submitted_time":"x","attempts":[]}]',
    }
    for name, text in files.items():
        (base / name).write_text(text)
    env = {k: v for k, v in devcluster.env.items() if k != "PYTHONPATH"}
    for argv, why in [
        (["show", str(job)], "unpack to more than 64 MiB"),
        (["audit", "--inventory", str(inv), "--sacct-file", str(base / "sacct.txt")],
         None),
        (["plan", "--inventory", str(inv), "--framework", "deepspeed", "--config",
          str(base / "ds.json"), "--dp", "2", "--state", "none"], "nested deeper than"),
        (["simulate", "--inventory", str(inv), "--trace", str(base / "philly.json"),
          "--trace-format", "philly"], "a number of thousands of digits"),
    ]:
        code, out, err = run_cli_subprocess(argv, env=env, memory_bytes=1 << 30, timeout=60)
        assert "Traceback" not in err, (argv, err)
        if why is None:
            assert code == 0 and "499 on nodes not in the inventory" in out, (argv, out, err)
        else:
            assert code == 2 and why in err and len(err.strip().splitlines()) == 1, (argv, err)
