"""The placement daemon as root among users who do not trust each other
(issue 21, docs/security.md), on the dev cluster with two unprivileged
users (tests/integration/users.py: stopo-alice, stopo-bob):

* an admin's hold on a user's daemon job is never lifted, and the daemon
  says why in `daemon status` (which the user reads);
* a job the admin changed after submission (put in a reservation) is left
  alone, and the status names the change;
* hostile comments and request files from bob (the four that stopped the
  daemon before, and a link to /etc/shadow) do not stop alice's job from
  being released in the same cycle, and bob sees why his were rejected;
* the start race: a released job that starts while the daemon's view is
  stale is never left held (consistent view, fresh check before the hold,
  the hold undone when it lands on a started job anyway).

The daemon runs as root: as the real command (`slurmtopo daemon run
--once`) where that shows what an admin runs, in process with the real
command-line backend where a test must act between two of its reads.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.protocol import PREFIX, REJECTED_PREFIX, Shape, make_comment
from slurmtopo.daemon.protocol import request_file_name
from slurmtopo.daemon.spool import prepare_spool, read_events
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.slurm.cli_backend import CliBackend
from tests.integration.users import ALICE, BOB

ROOT = Path(__file__).resolve().parents[2]
QUAD8 = (ROOT / "tests" / "fixtures" / "daemon" / "quad8-inventory.yaml").read_text()

SCRIPT = ("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=4\n"
          "#SBATCH --gpus-per-node=4\n#SBATCH --output=/dev/null\nsleep 120\n")
TP4 = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4)
#: a whole node: once it runs, its node has no free GPU left
TP8 = JobRequest(layout=Layout(tp=8), require={"tp": "node"}, gpus_per_node=8)
SCRIPT8 = SCRIPT.replace("=4\n", "=8\n")


@pytest.fixture(scope="module")
def inv_path(devcluster):
    path = devcluster.dir / "security-inventory.yaml"
    path.write_text(QUAD8)
    os.chmod(path, 0o644)
    return str(path)


@pytest.fixture
def spool(devcluster):
    """A fresh spool, prepared as the daemon does when it starts (0755,
    requests/ 1733), so that users can put request files there."""
    path = str(devcluster.dir / f"spool-sec-{uuid.uuid4().hex[:8]}")
    prepare_spool(path)
    return path


def submit_as(users, user: str, comment: str, script: str = SCRIPT) -> int:
    """``sbatch --hold --comment=...`` as ``user`` (what `slurmtopo sbatch
    --daemon` does), the script on stdin."""
    p = users.run(user, ["sbatch", "--parsable", "--hold", f"--comment={comment}"],
                  input=script, check=True)
    return int(p.stdout.strip().split(";")[0])


def daemon_once(devcluster, inv_path, spool, timeout: float = 120):
    """`slurmtopo daemon run --once` as root; must not hang."""
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "slurmtopo", "daemon", "run", "--inventory",
                           inv_path, "--spool", spool, "--once"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def status_as(users, user, spool) -> str:
    """`slurmtopo daemon status` as a user: what the user sees (the daemon
    ran its cycles with --once and is gone: exit 3, "not running")."""
    p = users.slurmtopo(user, "daemon", "status", "--spool", spool)
    assert p.returncode == 3, (p.stdout, p.stderr)
    return p.stdout


def releases_in_log(devcluster, job_id) -> int:
    text = (devcluster.dir / "log" / "slurmctld.log").read_text(errors="replace")
    return len(re.findall(rf"release hold on JobId={job_id} by", text))


def holds_in_log(devcluster, job_id) -> int:
    """How many times slurmctld says it held the job (any hold)."""
    text = (devcluster.dir / "log" / "slurmctld.log").read_text(errors="replace")
    return len(re.findall(rf"(?<!release )hold on JobId={job_id} by", text))



# --------------------------------------------------------------------------
# admin decisions


def test_an_admin_hold_on_a_users_job_is_not_lifted(devcluster, users, inv_path, spool):
    a = submit_as(users, ALICE, make_comment(TP4, Shape(1, 4, 4)))
    # alice cannot lift an admin's hold herself; the daemon must not either
    devcluster.run(["scontrol", "hold", str(a)])
    assert devcluster.job(a)["Reason"] == "JobHeldAdmin"
    refused = users.run(ALICE, ["scontrol", "release", str(a)])
    assert refused.returncode != 0 and "denied" in (refused.stderr + refused.stdout).lower()
    for _ in range(2):
        run = daemon_once(devcluster, inv_path, spool)
        assert run.returncode == 0, run.stderr
    info = devcluster.job(a)
    assert info["JobState"] == "PENDING" and info["Reason"] == "JobHeldAdmin", info
    assert releases_in_log(devcluster, a) == 0
    shown = status_as(users, ALICE, spool)
    assert str(a) in shown and "held by an admin (Reason=JobHeldAdmin)" in shown, shown
    # the admin gives the job back to the daemon with a user hold: released
    devcluster.run(["scontrol", "uhold", str(a)])
    assert devcluster.job(a)["Reason"] == "JobHeldUser"
    assert daemon_once(devcluster, inv_path, spool).returncode == 0
    devcluster.wait_state(a, {"RUNNING"})
    assert releases_in_log(devcluster, a) == 1


def test_a_job_the_admin_put_in_a_reservation_is_left_alone(devcluster, users, inv_path,
                                                            spool):
    name = f"r{uuid.uuid4().hex[:6]}"
    devcluster.run(["scontrol", "create", "reservation", f"ReservationName={name}",
                    "StartTime=now", "Duration=10", f"Users=root,{ALICE}", "Nodes=node4"])
    try:
        # every node busy: at first sight the job waits
        block = [devcluster.sbatch("-w", n, "--exclusive", "-o", "/dev/null", wrap="sleep 300")
                 for n in ("node1", "node2", "node3")]
        block.append(devcluster.sbatch("-w", "node4", f"--reservation={name}", "--exclusive",
                                       "-o", "/dev/null", wrap="sleep 300"))
        for j in block:
            devcluster.wait_state(j, {"RUNNING"})
        b = submit_as(users, ALICE, make_comment(TP4, Shape(1, 4, 4)))
        assert daemon_once(devcluster, inv_path, spool).returncode == 0
        assert releases_in_log(devcluster, b) == 0
        # the admin puts it in the reservation; then everything frees up
        devcluster.run(["scontrol", "update", f"JobId={b}", f"Reservation={name}"])
        assert devcluster.job(b)["Reservation"] == name
        devcluster.run(["scancel", *map(str, block)])
        for j in block:
            devcluster.wait_job(j)
        for _ in range(2):
            assert daemon_once(devcluster, inv_path, spool).returncode == 0
        info = devcluster.job(b)
        assert info["JobState"] == "PENDING" and info["Reason"] == "JobHeldUser", info
        assert releases_in_log(devcluster, b) == 0
        shown = status_as(users, ALICE, spool)
        assert f"Reservation (none) -> {name}" in shown and "leaves it alone" in shown, shown
    finally:
        # a reservation with jobs in it cannot be deleted; nodes in one are
        # not idle: end the jobs, then delete it
        devcluster.run(["scancel", "-p", devcluster.partition], check=False)
        deadline = time.monotonic() + 30
        while devcluster.run(["squeue", "-h"], check=False).stdout.strip() \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        devcluster.run(["scontrol", "delete", f"ReservationName={name}"], check=False)


# --------------------------------------------------------------------------
# hostile users


def test_hostile_input_from_bob_does_not_stop_alices_job(devcluster, users, inv_path, spool):
    requests = Path(spool) / "requests"

    def bob_file(body: str, how: str) -> str:
        name = request_file_name(body.strip())
        path = str(requests / f"{name}.json")
        if how == "file":
            users.run(BOB, ["sh", "-c", 'cat > "$0"', path], input=body, check=True)
        elif how == "fifo":
            users.run(BOB, ["mkfifo", path], check=True)
        else:
            users.run(BOB, ["ln", "-s", how, path], check=True)
        return f"{PREFIX}@{name}"

    hostile = {
        "shape [1]": PREFIX + '{"layout":{"tp":4},"shape":[1]}',
        "5,000 nested [": bob_file("[" * 5000, "file"),
        "a 5,000-digit integer": bob_file('{"layout":{"tp":' + "9" * 5000 + "}}", "file"),
        "a FIFO": bob_file('{"layout":{"tp":4}}', "fifo"),
        "a link to /etc/shadow": bob_file('{"layout":{"tp":2}}', "/etc/shadow"),
    }
    bobs = {what: submit_as(users, BOB, comment) for what, comment in hostile.items()}
    a = submit_as(users, ALICE, make_comment(TP4, Shape(1, 4, 4)))
    t0 = time.monotonic()
    run = daemon_once(devcluster, inv_path, spool)
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - t0 < 60
    assert "Traceback" not in run.stderr, run.stderr
    devcluster.wait_state(a, {"RUNNING"})
    assert releases_in_log(devcluster, a) == 1
    for what, b in bobs.items():
        assert releases_in_log(devcluster, b) == 0, what
        # bob sees why, in his own job's comment
        shown = users.run(BOB, ["scontrol", "show", "job", str(b)], check=True).stdout
        assert f"Comment={REJECTED_PREFIX}" in shown, (what, shown)
    assert "is a FIFO" in devcluster.job(bobs["a FIFO"])["_raw"]
    assert "symbolic link" in devcluster.job(bobs["a link to /etc/shadow"])["_raw"]
    # the admin sees them in the event log, users in the status
    rejected = {e["job"] for e in read_events(spool) if e["event"] == "rejected"}
    assert set(bobs.values()) <= rejected
    shown = status_as(users, BOB, spool)
    assert all(f"job {b} " in shown for b in bobs.values()), shown


# --------------------------------------------------------------------------
# the start race


class StaleView(CliBackend):
    """A backend through which a test acts at one chosen moment of the
    daemon's cycle: ``at`` is "nodes" (between the job and the node
    snapshot), "job" (when the daemon looks the job up again right before
    it acts) or "hold" (right before a hold reaches Slurm)."""

    def __init__(self, at, act, **kw):
        super().__init__(**kw)
        self.at, self.act, self.done = at, act, False

    def _maybe(self, where):
        if where == self.at and not self.done:
            self.done = True
            self.act()

    def nodes(self):
        self._maybe("nodes")
        return super().nodes()

    def job(self, job_id):
        self._maybe("job")
        return super().job(job_id)

    def hold(self, job_id):
        self._maybe("hold")
        return super().hold(job_id)

    def uhold(self, job_id):
        self._maybe("hold")
        return super().uhold(job_id)


def _partition(devcluster, state: str) -> None:
    devcluster.run(["scontrol", "update", f"PartitionName={devcluster.partition}",
                    f"State={state}"])


@pytest.mark.parametrize("at", ["nodes", "job", "hold"])
def test_a_job_that_starts_while_the_view_is_stale_is_never_left_held(devcluster, users,
                                                                      inv_path, spool, at):
    """alice's whole-node job is released by the daemon onto node1 while
    the partition is down (so it waits). In the next cycle the daemon reads
    the jobs, and the job starts before the daemon's next step: between the
    job and the node snapshot ("nodes": the old daemon then saw node1's
    GPUs busy and held it, a running job left at Priority=0 JobHeldAdmin),
    or after the daemon decided to hold it again because a blocker (in a
    second partition) held node1's GPUs ("job": before the daemon's fresh
    look-up; "hold": after it, before the hold lands). The job is never
    left held."""
    inv = load_inventory(inv_path)
    for n in ("node2", "node3", "node4"):
        devcluster.wait_state(devcluster.sbatch("-w", n, "--exclusive", "-o", "/dev/null",
                                                wrap="sleep 300"), {"RUNNING"})
    other = f"blk{uuid.uuid4().hex[:4]}"
    blocker = None
    _partition(devcluster, "DOWN")
    try:
        a = submit_as(users, ALICE, make_comment(TP8, Shape(1, 8, 8)), SCRIPT8)
        d = Daemon(CliBackend(env=devcluster.env), inv, spool)
        assert [x.action for x in d.cycle() if x.job_id == a] == ["release"]
        info = devcluster.job(a)
        assert info["ReqNodeList"] == "node1" and info["JobState"] == "PENDING", info
        if at != "nodes":
            devcluster.run(["scontrol", "create", f"PartitionName={other}", "Nodes=node1",
                            "State=UP"])
            blocker = devcluster.sbatch("-p", other, "-w", "node1", "--gres=gpu:8",
                                        "-o", "/dev/null", wrap="sleep 300")
            devcluster.wait_state(blocker, {"RUNNING"})

        def start_it():
            if blocker is not None:
                devcluster.run(["scancel", str(blocker)])
                devcluster.wait_job(blocker)
            _partition(devcluster, "UP")
            devcluster.wait_state(a, {"RUNNING"}, timeout=60)

        d.backend = StaleView(at, start_it, env=devcluster.env)
        decided = [x.action for x in d.cycle() if x.job_id == a]
        assert d.backend.done, "the test never acted"
    finally:
        if blocker is not None:
            devcluster.run(["scancel", str(blocker)], check=False)
        _partition(devcluster, "UP")
        devcluster.run(["scontrol", "delete", f"PartitionName={other}"], check=False)
    info = devcluster.job(a)
    assert info["JobState"] == "RUNNING", info
    assert info["Priority"] != "0" and not info["Reason"].startswith("JobHeld"), info
    events = [e["event"] for e in read_events(spool, a)]
    if at == "nodes":
        assert "rehold" not in decided and holds_in_log(devcluster, a) == 0, decided
    elif at == "job":
        assert decided[0] == "rehold" and "rehold-skipped" in events, (decided, events)
        assert holds_in_log(devcluster, a) == 0
    else:
        assert decided[0] == "rehold" and "rehold-undone" in events, (decided, events)
        assert holds_in_log(devcluster, a) == 1 and releases_in_log(devcluster, a) == 2
    d.cycle()
    assert d.records[a].phase == "running"
    assert json.load(open(os.path.join(spool, "status.json")))["daemon"]["spool_error"] is None
