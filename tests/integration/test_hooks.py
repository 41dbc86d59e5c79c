"""Plain sbatch and srun with slurmtopo's Slurm hooks installed (issue 39,
docs/admin.md "Slurm hooks"): cli_filter/lua plans a job that carries a
#SLURMTOPO directive, TaskProlog gives each task its rank's environment,
job_submit/lua rejects an unreadable directive on the controller.

The hooks are installed on the dev cluster as a site would install them
(`slurmtopo admin install-hooks`, then the slurm.conf lines it prints), with
the users' copy of slurmtopo (Debian's Python, tests/integration/users.py)
so the hooks run as whoever submits. Checked here, on the Slurm under test:

* a plain `sbatch job.sh` with a directive: the plan is `slurmtopo plan`'s
  for the same options, and every rank's host, GPU and environment is the
  rank map's;
* submitit-style `sbatch --wrap` with the directive in the environment, a
  job made by `srun` alone (no batch step: the tasks' TaskProlog binds once
  under the run directory's lock), and `srun torchrun` inside the
  allocation (real torch.distributed ranks over torchrun's static
  rendezvous; a c10d rendezvous is refused);
* a job without a directive: the same job record, script and environment
  (batch step and tasks) as before the hooks were installed;
* hostile directives (another user's file, shell characters, huge numbers),
  from the cli_filter and past it (job_submit), refused with the reason,
  while another user's planned job runs;
* a broken slurmtopo (inventory missing, the command missing, a planning
  call that hangs) never stops a submission.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.integration.ranks import DUMP, INV, cluster, master_addr  # noqa: F401
from tests.integration.users import ALICE, BOB, USER_PYTHON

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RANK = ROOT / "tests" / "integration" / "torch_rank.py"

#: what a batch step writes: its environment (the control job and its twin)
BATCH_DUMP = ("import json, os, sys; json.dump(dict(os.environ), "
              "open(sys.argv[1], 'w'), indent=0, sort_keys=True)")
#: what each task of it writes: the same, to PREFIX<SLURM_PROCID>.json
TASK_DUMP = ("import json, os, sys; json.dump(dict(os.environ), "
             "open(sys.argv[1] + os.environ['SLURM_PROCID'] + '.json', 'w'), indent=0, "
             "sort_keys=True)")
#: per-job variables left out when two jobs' environments are compared
VOLATILE = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "SLURM_JOB_START_TIME",
            "SLURM_JOB_END_TIME", "SLURM_JOB_NAME", "SLURM_STEP_ID", "SLURM_STEPID",
            "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT",
            "SLURM_JOB_UID", "TMPDIR", "OLDPWD", "PYTEST_CURRENT_TEST", "SLURM_JOB_SLUID",
            # Slurm's own: slurmstepd sets it in a task's environment whenever any
            # TaskProlog is configured, before running it (src/slurmd/slurmstepd/
            # task.c, _run_script_and_set_env), whatever the script prints
            "SLURM_SCRIPT_CONTEXT")


class Hooks:
    """The hooks as installed on the cluster, and what the tests need."""

    def __init__(self, cluster, users, base: Path):
        self.cluster, self.users, self.base = cluster, users, base
        self.inventory = base / "inventory.yaml"
        shutil.copy(INV, self.inventory)
        os.chmod(base, 0o755)
        os.chmod(self.inventory, 0o644)
        # slurmtopo as pip installs it for everyone: a console script that
        # imports the users' copy (tests/integration/users.py), whoever runs it
        self.command = base / "slurmtopo"
        self.command.write_text(f"#!{USER_PYTHON}\n"
                                f"import sys\nsys.path.insert(0, {str(users.site)!r})\n"
                                "from slurmtopo.cli import run\nrun()\n")
        os.chmod(self.command, 0o755)
        self.etc = cluster.dir / "etc"
        self.task_prolog = self.etc / "slurmtopo-task-prolog.sh"
        self.conf_lines = self.install()

    def install(self, *extra, inventory=None, command=None):
        """`slurmtopo admin install-hooks` as the admin runs it; returns the
        slurm.conf lines it prints."""
        p = self.users.run("root", [sys.executable, "-m", "slurmtopo", "admin", "install-hooks",
                                    "--inventory", str(inventory or self.inventory),
                                    "--slurm-dir", str(self.etc),
                                    "--command", str(command or self.command),
                                    "--task-prolog", str(self.task_prolog), "--job-submit",
                                    "--force", *extra],
                           cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, check=True)
        return [line for line in p.stdout.splitlines() if line]

    def sbatch(self, user: str, argv, cwd: Path, env=None, input=None):
        return self.users.run(user, ["sbatch", "--parsable", *map(str, argv)], cwd=cwd, env=env,
                              input=input, timeout=60)


def _job_id(p) -> int:
    assert p.returncode == 0, (p.stdout, p.stderr)
    return int(p.stdout.strip().split(";")[0])


@pytest.fixture(scope="module")
def control(cluster, tmp_path_factory):
    """A job without a directive, run before the hooks are installed: what
    the same job must look like with them (test_no_directive_untouched)."""
    work = tmp_path_factory.mktemp("control")
    return _untouched_job(cluster, work, "before")


def _untouched_job(cluster, work: Path, tag: str):
    """The same script each time (its bytes are compared), its output
    directory as its argument."""
    script = work / "plain.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2 --gpus-per-node=2\n"
                      f"{sys.executable} -c {json.dumps(BATCH_DUMP)} \"$1/batch.json\"\n"
                      f"srun {sys.executable} -c {json.dumps(TASK_DUMP)} \"$1/task-\"\n")
    out = work / tag
    out.mkdir()
    p = cluster.run(["sbatch", "--parsable", "-o", str(work / f"{tag}.out"), str(script),
                     str(out)], cwd=str(work))
    job = int(p.stdout.strip().split(";")[0])
    assert cluster.wait_job(job, timeout=90) == "COMPLETED", (work / f"{tag}.out").read_text()
    record = cluster.job(job)
    text = cluster.run(["scontrol", "write", "batch_script", str(job), "-"]).stdout
    return {"job": job, "record": record, "script": text,
            "batch": json.loads((out / "batch.json").read_text()),
            "tasks": [json.loads((out / f"task-{r}.json").read_text()) for r in range(4)],
            "stderr": p.stderr, "work": work}


@pytest.fixture(scope="module")
def hooked(cluster, users, control):
    """The hooks installed as docs/admin.md says; taken out afterwards."""
    base = users.base / "hooks"   # every user can reach it (users.py: 0755 all the way)
    base.mkdir()
    hooks = Hooks(cluster, users, base)
    assert hooks.conf_lines == ["CliFilterPlugins=cli_filter/lua",
                                f"TaskProlog={hooks.task_prolog}", "JobSubmitPlugins=lua"]
    cluster.set_extra_conf(hooks.conf_lines)
    try:
        yield hooks
    finally:
        cluster.set_extra_conf([])
        for name in ("cli_filter.lua", "job_submit.lua", hooks.task_prolog.name):
            for f in hooks.etc.glob(name + "*"):
                f.unlink()


def _workdir(users, user: str, name: str) -> Path:
    return users.private_dir(user, name)


def _ranks(out: Path):
    return {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in out.glob("rank-*.json")}


def check_hook_ranks(cluster, job_id: int, run_dir: Path, out: Path, batch: bool = True):
    """Every rank's environment against the rank map the TaskProlog wrote
    (rankmap.json in the job's run directory), as tests/integration/ranks.py
    checks `slurmtopo sbatch`'s. Returns (placement, rankmap doc, ranks)."""
    from slurmtopo.inventory.hostlist import expand_hostlist
    from slurmtopo.inventory.model import format_cpulist, parse_cpulist
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.plan.rankmap import nccl_env, node_ranks, placement_from_dict

    inv = load_inventory(str(INV))
    doc = json.loads((run_dir / "rankmap.json").read_text())
    placement = placement_from_dict(doc)
    ranks = _ranks(out)
    world = placement.world_size
    assert sorted(ranks) == list(range(world)), sorted(ranks)
    job = cluster.job(job_id)
    alloc = {h: set(parse_cpulist(v)) for h, v in doc["allocation"].items()}
    assert set(alloc) == set(expand_hostlist(job["NodeList"]))
    nr = node_ranks(placement)
    nccl = nccl_env(inv, placement, None)
    for r, got in ranks.items():
        env, slot = got["env"], placement.slots[r]
        gpus = placement.gpus_on(slot.host)
        assert env["SLURMD_NODENAME"] == slot.host, (r, env["SLURMD_NODENAME"], slot.host)
        assert env["RANK"] == env["SLURM_PROCID"] == str(r)
        assert env["LOCAL_RANK"] == env["SLURM_LOCALID"] == str(slot.local_rank)
        assert env["WORLD_SIZE"] == str(world)
        assert env["LOCAL_WORLD_SIZE"] == str(len(gpus))
        assert env["NODE_RANK"] == env["GROUP_RANK"] == env["SLURM_NODEID"] == str(nr[slot.host])
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, gpus))
        assert env["CUDA_VISIBLE_DEVICES"].split(",")[slot.local_rank] == str(slot.gpu)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["SLURMTOPO_GPU"] == str(slot.gpu)
        assert set(gpus) <= alloc[slot.host]
        if env.get("SLURM_STEP_GPUS"):      # what Slurm itself gave the step here
            assert set(gpus) <= set(map(int, env["SLURM_STEP_GPUS"].split(",")))
        assert env["MASTER_ADDR"] == master_addr(placement.slots[0].host)
        assert env["MASTER_PORT"] == str(20000 + job_id % 10000)
        for k, v in nccl.items():
            assert env.get(k) == v, (r, k, env.get(k), v)
        assert {k for k in env if k.startswith("NCCL_")} == set(nccl)
        assert env["SLURMTOPO_NICS"] == ",".join(slot.nics)
        assert env["SLURMTOPO_CPUS"] == format_cpulist(slot.cpus)
        # the plan left the tasks' environment: a job submitted from one of
        # them does not inherit it
        assert "SLURMTOPO_PLAN" not in env
        if batch:   # the batch step left the plan to the job's steps, with its id
            assert env["SLURMTOPO_JOB_PLAN"].startswith(f"{job_id}:")
    return placement, doc, ranks


def _submitted_plan(ranks):
    """The plan the cli_filter hook made at submission (in the job's env)."""
    from slurmtopo.plan.plandoc import plan_from_env_value, planned_placement

    value = ranks[0]["env"]["SLURMTOPO_JOB_PLAN"].split(":", 1)[1]
    return planned_placement(plan_from_env_value(value))


def _slurmtopo_plan(tmp: Path, *args):
    """The rank map `slurmtopo plan` makes for these options, idle cluster."""
    from slurmtopo.plan.rankmap import placement_from_dict
    from tests.integration.helpers import run_slurmtopo

    out = tmp / "reference"
    run_slurmtopo(["plan", "--inventory", INV, "--state", "none", "--output-dir", out, *args],
                  ROOT, dict(os.environ, PYTHONPATH=str(ROOT)))
    return placement_from_dict(json.loads((out / "rankmap.json").read_text()))


def _same_slots(a, b):
    return [(s.host, s.gpu, s.local_rank) for s in a.slots] == \
        [(s.host, s.gpu, s.local_rank) for s in b.slots]


def test_plain_sbatch_with_directive_gets_the_plan(hooked, cluster, users, tmp_path):
    work = _workdir(users, ALICE, "plain")
    out = work / "ranks"
    out.mkdir()
    os.chown(out, users.uid(ALICE), users.group.gr_gid)
    script = work / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=4 --gpus-per-node=4\n"
        f"#SBATCH --output={work}/%j.out\nset -e\n#SLURMTOPO --tp 2 --dp 4\n"
        f"srun /usr/bin/python3 -c {json.dumps(DUMP)} {out}\n")
    p = hooked.sbatch(ALICE, [script], cwd=work)
    job = _job_id(p)
    # one line on stderr: the plan's summary
    assert p.stderr.startswith("slurmtopo: planned 8 rank(s) on 2 node(s)"), p.stderr
    assert cluster.wait_job(job, timeout=120) == "COMPLETED", (work / f"{job}.out").read_text()
    record = cluster.job(job)
    assert record["NumNodes"] == "2" and record["NumTasks"] == "8", record
    assert record.get("Switches", "").startswith("1@"), record   # the plan's leaf count
    placement, doc, ranks = check_hook_ranks(cluster, job, work / ".slurmtopo" / "runs" /
                                             str(job), out)
    # the hook planned what `slurmtopo plan` plans for the same options
    assert _same_slots(_submitted_plan(ranks),
                       _slurmtopo_plan(tmp_path, "--tp", "2", "--dp", "4", "--gpus-per-node",
                                       "4", "--", "true"))
    log = (work / f"{job}.out").read_text()
    assert "slurmtopo: 8 rank(s) on 2 node(s)" in log


def test_wrap_with_env_directive_and_srun_in_the_allocation(hooked, cluster, users):
    """submitit's way: sbatch --wrap, the shape from sbatch's own options,
    the directive in the environment (the script cannot be edited)."""
    work = _workdir(users, ALICE, "wrap")
    out = work / "ranks"
    out.mkdir()
    os.chown(out, users.uid(ALICE), users.group.gr_gid)
    p = hooked.sbatch(ALICE, ["--nodes=2", "--ntasks-per-node=2", "--gpus-per-node=2",
                              f"--output={work}/%j.out", "--wrap",
                              f"srun /usr/bin/python3 -c {json.dumps(DUMP)} {out}"],
                      cwd=work, env={"SLURMTOPO_DIRECTIVE": "--tp 2"})
    job = _job_id(p)
    assert cluster.wait_job(job, timeout=120) == "COMPLETED", (work / f"{job}.out").read_text()
    placement, _, ranks = check_hook_ranks(cluster, job, work / ".slurmtopo" / "runs" / str(job),
                                           out)
    assert placement.world_size == 4 and len(placement.hosts) == 2
    # tp pairs stay on one host: the plan's, not Slurm's block order
    assert _same_slots(_submitted_plan(ranks),
                       _slurmtopo_plan(work.parent / f"ref-{job}", "--tp", "2", "--world", "4",
                                       "--gpus-per-node", "2", "--", "true"))


def test_srun_alone_is_planned_too(hooked, cluster, users):
    """A job made by srun itself (no batch step): every task's TaskProlog
    meets the plan; the first to take the run directory's lock binds, the
    others read its binding."""
    work = _workdir(users, ALICE, "srun")
    out = work / "ranks"
    out.mkdir()
    os.chown(out, users.uid(ALICE), users.group.gr_gid)
    p = users.run(ALICE, ["srun", "--nodes=2", "--ntasks-per-node=2", "--gpus-per-node=2",
                          USER_PYTHON, "-c", DUMP, str(out)], cwd=work,
                  env={"SLURMTOPO_DIRECTIVE": "--tp 2"}, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith("slurmtopo: planned 4 rank(s) on 2 node(s)"), p.stderr
    runs = list((work / ".slurmtopo" / "runs").iterdir())
    assert len(runs) == 1
    job = int(runs[0].name)
    placement, doc, _ = check_hook_ranks(cluster, job, runs[0], out, batch=False)
    assert json.loads((runs[0] / "hook-binding.json").read_text())["binding"]["world"] == 4


def test_srun_torchrun_static_rendezvous(hooked, cluster, users, tmp_path):
    """`srun torchrun` in a plain script: the TaskProlog's variables reach
    torchrun, whose static rendezvous (PET_NODE_RANK ...) gives each worker
    the planned rank; real gloo ranks form the groups where the rank map
    says. A c10d rendezvous, which numbers nodes in join order, is refused."""
    import socket

    torchrun = Path(sys.executable).parent / "torchrun"
    work = tmp_path
    # a port of its own: every dev cluster on this machine numbers its jobs
    # from 1, so the default 20000 + job id may be another test's store
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = work / "ranks"
    out.mkdir()
    knobs = json.dumps({"tp": 2, "dp": 4})
    script = work / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2 --gpus-per-node=4\n"
        f"#SBATCH --output={work}/%j.out\nset -e\n"
        f"#SLURMTOPO --tp 2 --dp 4 --master-port {port}\n"
        "export GLOO_SOCKET_IFNAME=lo\n"
        f"srun --kill-on-bad-exit=1 {torchrun} --nproc-per-node=4 {RANK} {out} megatron "
        f"'{knobs}'\n"
        f"if srun {torchrun} --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:1 "
        f"--nproc-per-node=4 {RANK} {out} megatron '{knobs}' 2>{work}/c10d.err; then\n"
        "  echo c10d-ran\nfi\n")
    import subprocess

    p = subprocess.run(["sbatch", "--parsable", str(script)], cwd=str(work), text=True,
                       capture_output=True, env=dict(cluster.env, PYTHONPATH=str(ROOT)),
                       timeout=60)
    assert p.returncode == 0, p.stderr
    job = int(p.stdout.strip())
    assert "(torchrun: one task per node)" in p.stderr, p.stderr
    assert cluster.wait_job(job, timeout=240) == "COMPLETED", (work / f"{job}.out").read_text()
    assert cluster.job(job)["NumTasks"] == "2"
    from slurmtopo.plan.rankmap import placement_from_dict

    doc = json.loads((work / ".slurmtopo" / "runs" / str(job) / "rankmap.json").read_text())
    slots = placement_from_dict(doc).slots
    files = {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in out.glob("torch-*.json")}
    assert sorted(files) == list(range(8)), (work / f"{job}.out").read_text()
    for r, got in files.items():
        assert (got["host"], got["gpu"]) == (slots[r].host, slots[r].gpu), (r, got)
        assert got["master_addr"] == master_addr(slots[0].host)
        assert got["master_port"] == str(port)
        for kind, seen in got["groups"].items():
            for m in seen["gathered"]:
                assert (m["host"], m["gpu"]) == (slots[m["rank"]].host, slots[m["rank"]].gpu)
    log = (work / f"{job}.out").read_text()
    assert "c10d-ran" not in log
    err = (work / "c10d.err").read_text()
    assert "slurmtopo: error: srun torchrun: --rdzv-backend=c10d numbers the nodes in the " \
           "order they join" in err, err


def test_no_directive_untouched(hooked, cluster, control, tmp_path_factory):
    """The same job without a directive, before and with the hooks: the same
    job record, the same script bytes, the same environment in the batch
    step and in every task (the hooks add nothing, not even a line)."""
    after = _untouched_job(cluster, control["work"], "after")
    assert after["stderr"] == control["stderr"] == ""
    assert after["script"] == control["script"]

    def norm(env, job):
        return {k: v.replace("/after", "/TAG").replace("/before", "/TAG")
                for k, v in env.items() if k not in VOLATILE}

    keys = ("NumNodes", "NumCPUs", "NumTasks", "TRES", "Command", "Comment", "Dependency",
            "Switches", "Reason", "Features", "Partition", "NtasksPerN:B:S:C", "TresPerNode",
            "TresPerJob", "OverSubscribe", "Contiguous", "NodeList", "WorkDir")
    assert norm({k: after["record"].get(k, "-") for k in keys}, after["job"]) == \
        norm({k: control["record"].get(k, "-") for k in keys}, control["job"])
    assert norm(after["batch"], after["job"]) == norm(control["batch"], control["job"])
    for a, b in zip(after["tasks"], control["tasks"]):
        assert norm(a, after["job"]) == norm(b, control["job"])
    for env in (after["batch"], *after["tasks"]):
        assert not {"SLURMTOPO_PLAN", "SLURMTOPO_JOB_PLAN", "SLURMTOPO_RUN_DIR", "RANK",
                    "MASTER_ADDR", "WORLD_SIZE"} & set(env)


def test_hostile_directives_refused_others_unaffected(hooked, cluster, users):
    """Bob's directives: another user's file, shell characters, huge numbers,
    options the site sets. Each is refused with its reason by the cli_filter
    (sbatch exits non-zero, nothing is queued) and, when Bob goes around
    the cli_filter with a slurm.conf of his own, by job_submit on the
    controller. Alice's job, submitted meanwhile, is planned and runs."""
    alice = _workdir(users, ALICE, "victim")
    secret = alice / "train.toml"
    secret.write_text("[parallelism]\ntensor_parallel_degree = 8\n")
    os.chown(secret, users.uid(ALICE), users.group.gr_gid)
    os.chmod(secret, 0o644)
    os.chmod(alice, 0o755)
    bob = _workdir(users, BOB, "attack")
    cases = {
        f"--framework torchtitan --config {secret}": f"{ALICE}'s file",
        "--tp 8;touch /tmp/pwned": "holds ';'",
        "--tp $(id)": "holds '$'",
        "--tp 99999999999999": "out of range",
        "--inventory /tmp/mine.yaml": "is set by the site's hooks configuration",
        "--nodes 64": "is sbatch's own option",
    }
    queued = cluster.run(["squeue", "-h", "-o", "%i"]).stdout
    for directive, why in cases.items():
        p = hooked.sbatch(BOB, ["--wrap", "true"], cwd=bob, env={"SLURMTOPO_DIRECTIVE": directive})
        assert p.returncode != 0, (directive, p.stdout, p.stderr)
        line = next(l for l in p.stderr.splitlines() if l.startswith("slurmtopo: error:"))
        assert why in line, (directive, p.stderr)
    assert cluster.run(["squeue", "-h", "-o", "%i"]).stdout == queued
    assert not Path("/tmp/pwned").exists()
    # around the cli_filter: a slurm.conf without it; job_submit.lua still refuses
    conf = bob / "slurm.conf"
    conf.write_text("".join(line + "\n" for line in cluster.conf.read_text().splitlines()
                            if not line.startswith("CliFilterPlugins")))
    os.chmod(conf, 0o644)
    script = bob / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n#SLURMTOPO --tp 8 --inventory /tmp/mine.yaml\n")
    os.chmod(script, 0o644)
    p = hooked.sbatch(BOB, [script], cwd=bob, env={"SLURM_CONF": str(conf)})
    assert p.returncode != 0, p.stdout
    assert "slurmtopo: script:3: --inventory is not an option a directive takes" in p.stderr, \
        p.stderr
    # meanwhile Alice's job is planned and runs
    good = _workdir(users, ALICE, "meanwhile")
    p = hooked.sbatch(ALICE, ["--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=2",
                              f"--output={good}/%j.out", "--wrap",
                              "srun /bin/sh -c 'echo rank=$RANK'"],
                      cwd=good, env={"SLURMTOPO_DIRECTIVE": "--tp 2"})
    job = _job_id(p)
    assert cluster.wait_job(job, timeout=90) == "COMPLETED"
    assert sorted(l for l in (good / f"{job}.out").read_text().splitlines()
                  if l.startswith("rank=")) == ["rank=0", "rank=1"]


@pytest.mark.parametrize("broken", ["inventory", "command", "hang"])
def test_broken_slurmtopo_never_blocks(hooked, cluster, users, broken):
    """The inventory gone, slurmtopo not installed, a planning call that
    hangs: the job goes in as the user wrote it, with one warning line."""
    work = _workdir(users, ALICE, f"broken-{broken}")
    hang = hooked.base / "hang.sh"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    os.chmod(hang, 0o755)
    kwargs = {"inventory": {"inventory": hooked.base / "gone.yaml"},
              "command": {"command": hooked.base / "no-such-slurmtopo"},
              "hang": {"command": hang}}[broken]
    hooked.install("--plan-timeout", "1", **kwargs)
    try:
        p = hooked.sbatch(ALICE, ["--nodes=1", "--ntasks-per-node=1", f"--output={work}/%j.out",
                                  "--wrap", "env"], cwd=work,
                          env={"SLURMTOPO_DIRECTIVE": "--tp 2"})
        job = _job_id(p)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("slurmtopo: warning: the job goes in "
                                                       "unplanned"), p.stderr
        assert cluster.wait_job(job, timeout=60) == "COMPLETED"
        record = cluster.job(job)
        assert record["NumNodes"] == "1" and record["NumTasks"] == "1", record
        assert "SLURMTOPO_PLAN=" not in (work / f"{job}.out").read_text()
    finally:
        hooked.install()


def test_job_submit_holds_planned_jobs_for_the_daemon(hooked, cluster, users):
    """--hold-for-daemon: job_submit.lua (no subprocess) holds every job the
    cli_filter planned and tags it with the placement daemon's request."""
    from slurmtopo.daemon.protocol import parse_comment

    hooked.install("--hold-for-daemon")
    try:
        work = _workdir(users, ALICE, "daemon")
        p = hooked.sbatch(ALICE, ["--nodes=2", "--ntasks-per-node=2", "--gpus-per-node=2",
                                  f"--output={work}/%j.out", "--wrap", "true"], cwd=work,
                          env={"SLURMTOPO_DIRECTIVE": "--tp 2"})
        job = _job_id(p)
        assert "held for the placement daemon" in p.stderr, p.stderr
        record = cluster.job(job)
        assert record["JobState"] == "PENDING" and record["Reason"] in ("JobHeldUser",
                                                                      "JobHeldAdmin"), record
        spec = parse_comment(record["Comment"])
        assert spec.request.layout.tp == 2
        assert (spec.shape.nodes, spec.shape.tasks_per_node) == (2, 2)
    finally:
        hooked.install()
