"""`slurmtopo show JOBID` and what `slurmtopo sbatch` keeps for it (run
directory, script), with the Slurm stand-ins of conftest.py."""
from __future__ import annotations

import json
import os
import time

import pytest

from slurmtopo.binding.replan import fill_placement
from slurmtopo.files.rundirs import clean_old, run_dir_for
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.plan.rankmap import dumps_rankmap, rankmap_dict
from tests.slurm.test_commands import INV, onpath, run  # noqa: F401  (fixture)


def _submit(onpath, capsys, job_id, *extra):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", stdout=f"{job_id}\n")
    return run(["sbatch", "--inventory", INV, "--tp", "2", "--dp", "2", "--json", *extra, "--",
                "python", "train.py", "--lr", "3e-4"], capsys)


def test_sbatch_keeps_the_script_and_reports_it(onpath, capsys):
    code, out, err = _submit(onpath, capsys, 77)
    assert code == 0, err
    doc = json.loads(out)
    where = run_dir_for(os.getcwd(), 77)
    assert doc["run_dir"] == where and doc["script"] == os.path.join(where, "job.sbatch")
    script = open(doc["script"]).read()
    assert script == [c for c in onpath.calls() if c["argv"][0] == "sbatch"][-1]["stdin"]
    assert "#SBATCH --job-name=train\n" in script           # from the command
    assert "/.slurmtopo/runs/${SLURM_JOB_ID}" in script
    assert [r["rank"] for r in doc["rankmap"]["ranks"]] == [0, 1, 2, 3]
    assert oct(os.stat(where).st_mode & 0o777) == "0o700"


def test_show_planned_and_actual(onpath, capsys):
    code, out, err = _submit(onpath, capsys, 78)
    assert code == 0, err
    planned = json.loads(out)["rankmap"]
    onpath.on("scontrol -d -o show job 78", stderr="slurm_load_jobs error: Invalid job id "
              "specified\n", rc=1)
    # queued: only the plan
    code, out, err = run(["show", "78", "--backend", "cli", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["state"] is None and doc["actual"] is None
    assert doc["planned"]["ranks"] == planned["ranks"]
    # started elsewhere: bind's rankmap.json in the run directory
    inv = load_inventory(INV)
    from slurmtopo.job.groups import Layout
    layout = Layout(tp=2, dp=2).resolved()
    actual = fill_placement(inv, [("node3", [4, 5]), ("node4", [0, 1])], layout)
    where = run_dir_for(os.getcwd(), 78)
    with open(os.path.join(where, "rankmap.json"), "w") as fh:
        fh.write(dumps_rankmap(rankmap_dict(actual, layout, extra={"replanned": True})))
    code, out, err = run(["show", "78", "--backend", "cli", "--json"], capsys)
    doc = json.loads(out)
    assert doc["replanned"] is True and doc["actual"]["hosts"] == ["node3", "node4"]
    # every moved rank as data, none cut into prose
    assert doc["moved"][0] == {"rank": 0, "from": {"host": doc["planned"]["ranks"][0]["host"],
                                                   "gpu": doc["planned"]["ranks"][0]["gpu"]},
                               "to": {"host": "node3", "gpu": 4}}
    moved = [r for r, a in zip(doc["planned"]["ranks"], doc["actual"]["ranks"])
             if (r["host"], r["gpu"]) != (a["host"], a["gpu"])]
    assert [m["rank"] for m in doc["moved"]] == [r["rank"] for r in moved]
    code, out, err = run(["show", "78", "--backend", "cli"], capsys)
    assert code == 0, err
    assert "Planned at submit time" in out and "Actual, from slurmtopo bind at start" in out
    assert "re-planned on Slurm's allocation" in out and "rank 0:" in out
    assert "Rank placement (4 ranks on 2 nodes)" in out


def test_show_asks_slurm_for_the_script(onpath, capsys):
    """No run directory here (submitted elsewhere): the plan comes from the
    script Slurm holds."""
    code, out, err = _submit(onpath, capsys, 79)
    script = open(json.loads(out)["script"]).read()
    os.remove(json.loads(out)["script"])
    onpath.on("scontrol write batch_script 79 -", stdout=script)
    onpath.on("scontrol -d -o show job 79", stderr="Invalid job id specified\n", rc=1)
    code, out, err = run(["show", "79", "--backend", "cli", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["script"] == "scontrol write batch_script" and len(doc["planned"]["ranks"]) == 4
    assert any(c["argv"][:3] == ["scontrol", "write", "batch_script"] for c in onpath.calls())


def test_show_unknown_job_is_one_line(onpath, capsys):
    onpath.on("scontrol", stderr="Invalid job id specified\n", rc=1)
    code, out, err = run(["show", "4242", "--backend", "cli"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("slurmtopo: error: job 4242: no plan found")


def test_old_run_directories_are_removed(tmp_path):
    root = tmp_path / ".slurmtopo" / "runs"
    for name, age_days in (("10", 30), ("11", 1), ("12", 30), ("notajob", 30)):
        d = root / name
        d.mkdir(parents=True)
        (d / "f").write_text("x")
        t = time.time() - age_days * 86400
        os.utime(d / "f", (t, t))
        os.utime(d, (t, t))
    removed = clean_old(str(tmp_path), 14, keep=("12",))
    assert removed == [str(root / "10")]
    assert sorted(p.name for p in root.iterdir()) == ["11", "12", "notajob"]
    assert clean_old(str(tmp_path), 0) == []


def _job_line(job_id: int, work_dir: str, state: str = "COMPLETED") -> str:
    """``scontrol -d -o show job`` of a finished job (the fields show reads)."""
    return (f"JobId={job_id} JobName=train UserId=me(1000) GroupId=me(1000) Priority=1 "
            f"Account=(null) QOS=normal JobState={state} Reason=None Dependency=(null) "
            f"SubmitTime=2026-01-01T00:00:00 Partition=gpu NodeList=node[1-2] NumNodes=2 "
            f"WorkDir={work_dir} StdOut={work_dir}/slurm-{job_id}.out\n")


def _show_json_from_elsewhere(job_id, tmp_path, monkeypatch, capsys):
    """`slurmtopo show JOBID --json` run from a directory other than the
    submit directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    monkeypatch.chdir(elsewhere)
    code, out, err = run(["show", str(job_id), "--backend", "cli", "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def test_show_finds_the_run_dir_from_slurms_workdir(onpath, capsys, tmp_path, monkeypatch):
    """From another directory, the job's WorkDir says where its run
    directory is: the plan and the actual map are found there."""
    code, out, err = _submit(onpath, capsys, 81)
    assert code == 0, err
    submit_dir = os.getcwd()
    where = run_dir_for(submit_dir, 81)
    planned = json.loads(out)["rankmap"]
    with open(os.path.join(where, "rankmap.json"), "w") as fh:
        fh.write(json.dumps(planned))
    os.chmod(os.path.join(where, "rankmap.json"), 0o600)
    onpath.on("scontrol -d -o show job 81", stdout=_job_line(81, submit_dir))
    doc = _show_json_from_elsewhere(81, tmp_path, monkeypatch, capsys)
    assert doc["state"] == "COMPLETED" and doc["run_dir"] == where
    assert doc["script"] == os.path.join(where, "job.sbatch")
    assert doc["actual"] is not None and doc["actual"]["ranks"] == planned["ranks"]
    code, out, err = run(["show", "81", "--backend", "cli"], capsys)
    assert code == 0 and "not started yet" not in out, out


def test_show_never_follows_a_link_in_the_run_dir(onpath, capsys, tmp_path):
    code, out, err = _submit(onpath, capsys, 82)
    assert code == 0, err
    where = run_dir_for(os.getcwd(), 82)
    secret = tmp_path / "secret.json"
    secret.write_text('{"not": "yours"}')
    os.symlink(secret, os.path.join(where, "rankmap.json"))
    onpath.on("scontrol -d -o show job 82", stdout=_job_line(82, os.getcwd(), "RUNNING"))
    code, out, err = run(["show", "82", "--backend", "cli", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["actual"] is None
    assert any("rankmap.json" in n and "link" in n for n in doc["notes"]), doc["notes"]


def test_show_asks_accounting_for_a_forgotten_jobs_workdir(onpath, capsys, tmp_path,
                                                          monkeypatch):
    """slurmctld no longer knows the job: sacct's WorkDir still finds the
    run directory from elsewhere."""
    code, out, err = _submit(onpath, capsys, 83)
    assert code == 0, err
    submit_dir = os.getcwd()
    onpath.on("scontrol -d -o show job 83", stderr="slurm_load_jobs error: Invalid job id "
              "specified\n", rc=1)
    onpath.on("sacct -j 83", stdout=f"{submit_dir}\n")
    doc = _show_json_from_elsewhere(83, tmp_path, monkeypatch, capsys)
    assert doc["state"] is None and doc["run_dir"] == run_dir_for(submit_dir, 83)
    assert doc["script"] == os.path.join(run_dir_for(submit_dir, 83), "job.sbatch")
    assert ["sacct", "-j", "83", "-X", "-n", "-P", "-o", "WorkDir"] in \
        [c["argv"] for c in onpath.calls()]
    # no accounting (sacct fails): the current directory, as before
    onpath.on("sacct -j 83", stderr="sacct: error: Slurm accounting storage is disabled\n",
              rc=1)
    code, out, err = run(["show", "83", "--backend", "cli", "--json"], capsys)
    assert code != 0 and "no plan found" in err, err


# -- someone else's plan, read by an admin (issue 33) ---------------------


def _hostile_plan(onpath, capsys, job_id, edit):
    """A real plan in job ``job_id``'s run directory, edited by ``edit(doc)``
    (the job's owner controls every byte of it); ``slurmtopo show`` runs in
    a child with 1 GiB of address space and 60 s."""
    import base64
    import zlib

    from slurmtopo.plan.planwrite import dumps_plan
    from slurmtopo.sbatch.script import extract_plan
    from tests.clirun import run_cli_subprocess

    code, out, err = _submit(onpath, capsys, job_id)
    assert code == 0, err
    path = json.loads(out)["script"]
    script = open(path).read()
    plan = extract_plan(script)
    doc = json.loads(plan)
    edit(doc, base64, zlib)
    with open(path, "w") as fh:
        fh.write(script.replace(plan, dumps_plan(doc)))
    return run_cli_subprocess(["show", str(job_id), "--backend", "none", "--run-dir",
                               os.path.dirname(path)], memory_bytes=1 << 30)


def _bomb(doc, base64, zlib):
    """2.5 MB of packed columns that unpack to 1.5 GiB of JSON."""
    inflate = zlib.compressobj(9)
    chunk = b"0," * (1 << 20)
    packed = b"".join(inflate.compress(chunk) for _ in range(768)) + inflate.flush()
    b64 = base64.b64encode(packed).decode()
    doc["ranks"] = {"packed": "zlib+base64",
                    "data": [b64[i:i + 76] for i in range(0, len(b64), 76)]}


def _gpu(doc, base64, zlib):
    doc["ranks"]["gpu"][0] = 30_000_000


def _host(doc, base64, zlib):
    doc["hosts"][0] = "node[1"


def _past_the_node(doc, base64, zlib):
    doc["ranks"]["gpu"][0] = 9          # the embedded node has 8 GPUs


@pytest.mark.parametrize("edit, why", [
    (_bomb, "unpack to more than 64 MiB"),
    (_gpu, "GPU index 30000000"),
    (_host, "holds a character no Slurm node name has"),
    (_past_the_node, "has GPU 9, and its host has 8 GPUs"),
])
def test_show_reads_a_hostile_plan_within_bounds(onpath, capsys, edit, why):
    """An admin's `slurmtopo show` of a user's job: a packed plan that
    unpacked to 1.5 GiB took 3.2 GB; GPU index 30,000,000 was a MemoryError;
    a host name with `[` a traceback. Each is one line now."""
    code, out, err = _hostile_plan(onpath, capsys, 90, edit)
    assert code == 2 and why in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_show_reads_a_deep_rank_map_as_a_note(onpath, capsys):
    code, out, err = _submit(onpath, capsys, 91)
    where = json.loads(out)["run_dir"]
    with open(os.path.join(where, "rankmap.json"), "w") as fh:
        fh.write("[" * 100_000)
    code, out, err = run(["show", "91", "--backend", "none", "--json"], capsys)
    assert code == 0 and "nested deeper" in json.loads(out)["notes"][-1], (out, err)


def test_pruning_skips_jobs_slurm_still_lists(onpath, capsys):
    """A job that runs for weeks has files that look old: pruning removed
    its run directory, which its later `srun` steps and `slurmtopo show`
    need. Run directories of jobs Slurm lists (any state) are kept; when
    Slurm cannot say, nothing is removed, with a note."""
    root = os.path.join(os.getcwd(), ".slurmtopo", "runs")
    for name in ("30", "31"):
        os.makedirs(os.path.join(root, name), mode=0o700)
        t = time.time() - 30 * 86400
        with open(os.path.join(root, name, "f"), "w") as fh:
            fh.write("x")
        os.utime(os.path.join(root, name, "f"), (t, t))
        os.utime(os.path.join(root, name), (t, t))
    onpath.on("squeue -h -t all -o %A -u", stdout="30\n99\n")
    code, out, err = _submit(onpath, capsys, 92)
    assert code == 0, err
    assert sorted(os.listdir(root)) == ["30", "92"]
    assert ["squeue", "-h", "-t", "all", "-o", "%A", "-u", str(os.geteuid())] in \
        [c["argv"] for c in onpath.calls()]
    os.makedirs(os.path.join(root, "31"), mode=0o700)
    os.utime(os.path.join(root, "31"), (time.time() - 30 * 86400,) * 2)
    onpath.on("squeue -h -t all -o %A -u", stderr="squeue: error: slurmctld down\n", rc=1)
    code, out, err = _submit(onpath, capsys, 93)
    assert code == 0 and sorted(os.listdir(root)) == ["30", "31", "92", "93"]
    assert "old run directories not removed" in out + err
