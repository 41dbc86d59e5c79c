"""A user's job in a group-shared submit directory (issue 21), with two real
users of one group on the dev cluster (tests/integration/users.py): alice
submits with `slurmtopo sbatch` from the shared directory (2770, umask 002),
bob is the group member who plants, pre-creates, links and swaps what he
can there. Whatever he does, no code of his runs as alice, her tasks run
what her start-time step decided or nothing, and none of her files outside
the run directories is deleted. docs/security.md says what remains
possible (bob can make her job fail)."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.fakes.small_limits import small_limits_python
from tests.integration.users import ALICE, BOB, USER_PYTHON

ROOT = Path(__file__).resolve().parents[2]
INV = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-inventory.yaml"
#: every rank records what it got (the command alice runs)
TASK = 'echo "$RANK $SLURMD_NODENAME $LOCAL_RANK $CUDA_VISIBLE_DEVICES" > "$0/rank-$RANK"'
#: what bob's planted code does when it runs: leave a file named after the
#: user it ran as
PLANT = "touch {dir}/PLANTED-RAN-$(id -un)-{what}\n"


@pytest.fixture
def shared(users):
    """The shared directory, emptied before each test; the inventory where
    the users can read it."""
    for entry in users.shared.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    inv = users.base / "inventory.yaml"
    if not inv.exists():
        shutil.copy(INV, inv)
        inv.chmod(0o644)
    return users.shared


_count = [0]


class Alice:
    """alice's submissions and what her job left."""

    def __init__(self, devcluster, users):
        self.cluster = devcluster
        self.users = users
        _count[0] += 1
        self.out = users.private_dir(ALICE, f"out{_count[0]}")

    def sbatch(self, *args, env=None, cwd=None):
        return self.users.slurmtopo(
            ALICE, "sbatch", "--inventory", str(self.users.base / "inventory.yaml"),
            "--parsable", f"--sbatch=--output={self.out}/%j.out", *args,
            "--", "/bin/sh", "-c", TASK, str(self.out), env=env, cwd=cwd)

    def submitted(self, *args, env=None) -> int:
        p = self.sbatch(*args, env=env)
        assert p.returncode == 0, p.stderr
        return int(p.stdout.strip())

    def output(self, job: int) -> str:
        f = self.out / f"{job}.out"
        return f.read_text() if f.exists() else "(no output)"

    def ranks(self):
        return {int(f.name.split("-")[1]): f.read_text().split()
                for f in self.out.glob("rank-*")}


@pytest.fixture
def alice(devcluster, users, shared):
    return Alice(devcluster, users)


def _planted(shared: Path):
    return sorted(p.name for p in shared.rglob("PLANTED-RAN-*"))


def _as_bob(users, script: str):
    return users.run(BOB, ["/bin/sh", "-ec", script], check=True)


def _bob_writes(users, path: Path, text: str) -> None:
    """A file of bob's (as if he wrote it, umask 002)."""
    path.write_text(text)
    os.chown(path, users.uid(BOB), users.group.gr_gid)
    os.chmod(path, 0o664)


# --------------------------------------------------------------------------
# 1. code run as another user


def test_planted_package_in_the_shared_directory_never_runs(devcluster, users, shared, alice):
    """bob plants slurmtopo/__init__.py and __main__.py in the shared
    directory. `python -m slurmtopo` from there imports them (the control
    below shows it); alice's job, whose start-time step ran exactly that
    before, now runs without importing them."""
    _as_bob(users, "mkdir slurmtopo")
    code = f"import os\nos.system({PLANT.format(dir=shared, what='init')!r})\n"
    for name in ("__init__.py", "__main__.py"):
        _bob_writes(users, shared / "slurmtopo" / name, code)
    # the control: the planted package is what `python -m slurmtopo` runs here
    users.run(ALICE, [USER_PYTHON, "-m", "slurmtopo", "--version"])
    assert _planted(shared) == ["PLANTED-RAN-stopo-alice-init"]
    (shared / "PLANTED-RAN-stopo-alice-init").unlink()
    job = alice.submitted("--tp", "2")
    assert devcluster.wait_job(job) == "COMPLETED", alice.output(job)
    assert _planted(shared) == [], alice.output(job)
    ranks = alice.ranks()
    assert sorted(ranks) == [0, 1] and [r[2] for r in (ranks[0], ranks[1])] == ["0", "1"]
    assert "slurmtopo bind: wrote" in alice.output(job)


# --------------------------------------------------------------------------
# 2. run directories


def test_group_members_runs_root_is_refused_before_submitting(devcluster, users, shared, alice):
    """bob pre-creates `.slurmtopo/runs` (0777): alice's submission stops
    with one line naming the directory, its owner and the way out, and no
    job is submitted."""
    _as_bob(users, "mkdir -p -m 0777 .slurmtopo/runs && chmod 0777 .slurmtopo")
    p = alice.sbatch("--tp", "2")
    assert p.returncode == 2 and p.stdout == "", p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"slurmtopo: error: {shared}/.slurmtopo: owned by stopo-bob, not by you (stopo-alice)")
    assert "give --run-dir" in lines[0]
    queue = devcluster.run(["squeue", "-h", "-u", ALICE, "-o", "%i"]).stdout
    assert queue.strip() == ""


def test_linked_runs_root_is_refused(devcluster, users, shared, alice):
    """alice's `.slurmtopo` is group-writable (an earlier release under
    umask 002); bob makes `runs` a link to a directory of his."""
    users.run(ALICE, ["mkdir", "-m", "2775", ".slurmtopo"], check=True)
    _as_bob(users, "mkdir -m 0777 bobs && ln -s $PWD/bobs .slurmtopo/runs")
    p = alice.sbatch("--tp", "2")
    assert p.returncode == 2, p.stderr
    assert f"{shared}/.slurmtopo/runs: is a symbolic link (to {shared}/bobs, owned by " \
           "stopo-bob)" in p.stderr
    assert list((shared / "bobs").iterdir()) == []
    assert oct((shared / ".slurmtopo").stat().st_mode & 0o7777) == "0o700"   # hers: private


def test_run_root_taken_after_submission_stops_the_job(devcluster, users, shared, alice):
    """bob moves alice's `.slurmtopo` aside after she submitted and puts his
    own (0777, with an env.sh) in its place before the job starts: the
    start-time step refuses it, the job fails with that one line, and his
    env.sh never runs."""
    job = alice.submitted("--tp", "2", "--sbatch=--hold")
    _as_bob(users, f"mv .slurmtopo .slurmtopo-alice\nmkdir -p -m 0777 .slurmtopo/runs/{job}\n"
            "chmod 0777 .slurmtopo .slurmtopo/runs")
    _bob_writes(users, shared / ".slurmtopo" / "runs" / str(job) / "env.sh",
                PLANT.format(dir=shared, what="env"))
    users.run(ALICE, ["scontrol", "release", str(job)], check=True)
    assert devcluster.wait_job(job) != "COMPLETED"
    out = alice.output(job)
    assert f"{shared}/.slurmtopo: owned by stopo-bob, not by you (stopo-alice)" in out, out
    assert _planted(shared) == [] and alice.ranks() == {}


@pytest.mark.parametrize("big", [False, True], ids=["env", "blocks"])
def test_run_dir_swapped_between_bind_and_the_tasks(devcluster, users, shared, alice, big):
    """The race, made deterministic: alice's Python stand-in pauses after
    `slurmtopo bind` wrote the run directory. bob then moves her
    `.slurmtopo` aside and builds his own run directory at the same path:
    an env.sh and task-env blocks that run his code, and her hostfile's
    lines (guessed right). Earlier releases sourced his env.sh (and his
    blocks). Now the shell takes the environment from bind's stdout and a
    task runs a block only if it is alice's and this binding's: a job whose
    tasks get their environment in the environment runs exactly what bind
    decided; one whose tasks read blocks (limits shrunk to blocks of 3
    ranks) refuses his and fails. His code never runs."""
    ctl = users.private_dir(ALICE, f"ctl{_count[0]}")
    stand_in = small_limits_python(ctl, python=USER_PYTHON, pause=True,
                                   **({} if big else {"block": 256, "env_limit": 96 * 1024}))
    job = alice.submitted("--tp", "2", "--dp", "4", env={"SLURMTOPO_PYTHON": stand_in})
    for _ in range(600):
        if (ctl / "READY").exists() or devcluster.job(job).get("JobState") in (
                "FAILED", "COMPLETED", "CANCELLED"):
            break
        time.sleep(0.1)
    assert (ctl / "READY").exists(), alice.output(job)
    real = shared / ".slurmtopo" / "runs" / str(job)
    assert (real / "task-env").is_dir() == big
    hostfile = (real / "hostfile").read_text()
    _as_bob(users, f"mv .slurmtopo .slurmtopo-alice\nmkdir -p .slurmtopo/runs/{job}/task-env\n"
            "chmod -R 0777 .slurmtopo")
    fake = shared / ".slurmtopo" / "runs" / str(job)
    _bob_writes(users, fake / "env.sh", PLANT.format(dir=shared, what="env"))
    _bob_writes(users, fake / "hostfile", hostfile)
    for k in range(3):
        _bob_writes(users, fake / "task-env" / f"{k}.sh", f"# slurmtopo task-env 0 block {k}\n"
                    + PLANT.format(dir=shared, what="task"))
    (ctl / "GO").touch()
    state = devcluster.wait_job(job, timeout=120)
    out = alice.output(job)
    assert _planted(shared) == [], out
    if big:
        assert state != "COMPLETED"
        assert "is not yours (another user may have replaced it): not running it" in out, out
        assert alice.ranks() == {}
        return
    assert state == "COMPLETED", out
    bound = json.loads((shared / ".slurmtopo-alice" / "runs" / str(job) /
                        "rankmap.json").read_text())
    ranks = alice.ranks()
    assert sorted(ranks) == list(range(8)), out
    for r in bound["ranks"]:
        assert ranks[r["rank"]][:2] == [str(r["rank"]), r["host"]]
        assert ranks[r["rank"]][2] == str(r["local_rank"])


# --------------------------------------------------------------------------
# 3. data loss


def test_pruning_through_a_linked_runs_root_deletes_nothing(devcluster, users, shared, alice):
    """bob links `.slurmtopo/runs` (in alice's group-writable `.slurmtopo`)
    to alice's checkpoints, whose directories are named like job ids and
    are older than the 14 days of pruning. A submission with the default
    run directory is refused; one with --run-dir elsewhere is submitted and
    prunes nothing (a note says why): both checkpoints stay."""
    home = users.private_dir(ALICE, f"home{_count[0]}")
    users.run(ALICE, ["/bin/sh", "-ec", "mkdir -p ckpt/1000 ckpt/2000 && echo w > ckpt/1000/m "
                      "&& echo w > ckpt/2000/m && chmod -R a+rX . && "
                      "touch -d '30 days ago' ckpt/1000/m ckpt/2000/m ckpt/1000 ckpt/2000"],
              cwd=home, check=True)
    users.run(ALICE, ["mkdir", "-m", "2775", ".slurmtopo"], check=True)
    _as_bob(users, f"ln -s {home}/ckpt .slurmtopo/runs")
    p = alice.sbatch("--tp", "2")
    assert p.returncode == 2 and "is a symbolic link" in p.stderr, p.stderr
    p = alice.sbatch("--tp", "2", "--run-dir", str(home / "run"))
    assert p.returncode == 0, p.stderr
    assert "old run directories not removed" in p.stderr and "symbolic link" in p.stderr
    job = int(p.stdout)
    assert devcluster.wait_job(job) == "COMPLETED", alice.output(job)
    assert sorted(p.name for p in (home / "ckpt").iterdir()) == ["1000", "2000"]
    assert (home / "ckpt" / "1000" / "m").read_text() == "w\n"
    assert (home / "run" / "job.sbatch").is_file()


def test_pruning_keeps_the_run_directory_of_a_job_slurm_lists(devcluster, users, shared, alice):
    """Pruning removed the run directory of a job still running once its
    files looked 15 days old; its later `srun` steps and `slurmtopo show`
    need it (issue 33). A job Slurm lists keeps it, whatever its age."""
    first = alice.submitted("--tp", "2", "--sbatch=--hold")
    run_dir = shared / ".slurmtopo" / "runs" / str(first)
    assert (run_dir / "job.sbatch").is_file()
    users.run(ALICE, ["/bin/sh", "-ec", f"touch -d '15 days ago' {run_dir}/* {run_dir}"],
              check=True)
    second = alice.submitted("--tp", "2", "--sbatch=--hold")
    assert (run_dir / "job.sbatch").is_file()
    devcluster.run(["scancel", str(first), str(second)])
