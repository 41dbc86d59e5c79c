"""`slurmtopo sbatch` and `slurmtopo state` without Slurm: the Slurm
commands are the stand-ins of conftest.py (recorded 22.05 output)."""
from __future__ import annotations

import json
import re
import sys

import pytest

from slurmtopo.cli import main
from tests.slurm.conftest import FIXTURES

INV = str(FIXTURES / "devcluster-inventory.yaml")


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture
def onpath(slurm, monkeypatch):
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    monkeypatch.delenv("SLURMTOPO_BACKEND", raising=False)
    monkeypatch.chdir(slurm.path.parent)
    return slurm


def _ranks(script: str):
    """(host, gpu) of every rank in the plan embedded in the script."""
    from slurmtopo.plan.plandoc import planned_placement, read_plan

    body = script.split("<<'SLURMTOPO_PLAN_JSON'\n", 1)[1].split("\nSLURMTOPO_PLAN_JSON\n")[0]
    return [(s.host, s.gpu) for s in planned_placement(read_plan(body)).slots]


def test_dry_run_prints_the_script_and_submits_nothing(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--dp", "2", "--dry-run",
                          "--", "python3", "-c", "print(1)", "$(touch MARK)", "`id`"], capsys)
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n#SBATCH ")
    assert "python3 -c 'print(1)' '$(touch MARK)' '`id`'" in out
    assert "dry run: nothing submitted" in err
    # the state is read (22.05: scontrol has no --json, sinfo has), nothing submitted
    assert [c["argv"] for c in onpath.calls()] == [["scontrol", "show", "nodes", "--json"],
                                                   ["sinfo", "--json"]]
    # live state: node1 holds GPUs 0-2, node4 is taken by an exclusive job
    ranks = _ranks(out)
    assert all(g not in (0, 1, 2) for h, g in ranks if h == "node1")
    assert all(h != "node4" for h, _ in ranks)


def test_plan_avoids_gpus_jobs_hold(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_drain.json")
    # 12 ranks: node1 has 5 free, node2 6, node3 drains, node4 is allocated
    code, out, err = run(["sbatch", "--inventory", INV, "--world", "11", "--dry-run", "--",
                          "true"], capsys)
    assert code == 0, err
    ranks = _ranks(out)
    assert len(ranks) == 11
    busy = {"node1": {0, 1, 2}, "node2": {0, 1}}
    assert {h for h, _ in ranks} == {"node1", "node2"}
    assert not any(g in busy[h] for h, g in ranks)


def test_state_file_instead_of_live_state(onpath, capsys, tmp_path):
    state = tmp_path / "state.yaml"
    state.write_text("slurmtopo: state\nnodes:\n  - {name: 'node[1-3]', state: allocated}\n")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "4", "--state", str(state),
                          "--dry-run", "--", "true"], capsys)
    assert code == 0, err
    assert {h for h, _ in _ranks(out)} == {"node4"}
    assert onpath.calls() == []                    # Slurm not asked


def test_submit(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", stdout="4242\n")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--job-name", "t$(x)",
                          "--", "echo", "a b"], capsys)
    assert code == 0, err
    assert out == "Submitted batch job 4242\n"
    call = onpath.calls()[-1]
    assert call["argv"] == ["sbatch", "--parsable"]
    assert "#SBATCH --job-name=t__x_\n" in call["stdin"]      # sanitised for the directive
    assert call["stdin"].rstrip().endswith("echo 'a b'")
    code, out, _ = run(["sbatch", "--inventory", INV, "--tp", "2", "--parsable", "--", "true"],
                       capsys)
    assert out == "4242\n"


def test_submission_failure_is_one_line_with_slurms_words(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", rc=1, stderr="sbatch: error: Batch job submission failed: Requested "
                                     "node configuration is not available\n")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--", "true"], capsys)
    assert code == 4 and out == ""
    assert err.strip().splitlines()[-1] == ("slurmtopo: error: Batch job submission failed: "
                                            "Requested node configuration is not available")
    assert "Traceback" not in err


def test_daemon_submits_held_and_tagged(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", stdout="55\n")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--dp", "2", "--require",
                          "tp=nvlink", "--prefer", "dp=node", "--wait", "dp=10m", "--daemon",
                          "--", "true"], capsys)
    assert code == 0, err
    assert out == "Submitted batch job 55 (held for the placement daemon)\n"
    call = onpath.calls()[-1]
    assert call["argv"][:3] == ["sbatch", "--parsable", "--hold"]
    comment = [a for a in call["argv"] if a.startswith("--comment=")]
    assert len(comment) == 1 and comment[0].startswith("--comment=slurmtopo:v1:")
    assert '"tp":"nvlink"' in comment[0]
    from slurmtopo.daemon.protocol import parse_comment
    spec = parse_comment(comment[0].split("=", 1)[1])
    assert spec.request.wait == {"dp": 600.0} and spec.request.prefer == {"dp": "node"}
    assert not re.search(r"^#SBATCH --switches", call["stdin"], re.M)


def test_daemon_flag_without_the_daemon_package(onpath, capsys, monkeypatch):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    monkeypatch.setitem(sys.modules, "slurmtopo.daemon.submit", None)
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--daemon", "--", "true"],
                         capsys)
    assert code == 2
    assert "--daemon needs the placement daemon (slurmtopo.daemon.submit)" in err
    assert all(c["argv"][0] != "sbatch" for c in onpath.calls())


def test_bad_wait(onpath, capsys):
    code, _out, err = run(["sbatch", "--inventory", INV, "--state", "none", "--wait", "dp",
                           "--dry-run", "--", "true"], capsys)
    assert code == 2 and "expected KIND=SECONDS" in err


def test_no_command(onpath, capsys):
    code, _out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--state", "none"], capsys)
    assert code == 2 and "no command to run" in err


def test_json_output(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", stdout="9\n")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "4", "--json", "--", "true"],
                         capsys)
    doc = json.loads(out)
    assert doc["job_id"] == 9 and len(doc["hosts"]) == 1 and not doc["daemon"]
    assert doc["hosts"][0] != "node4"


def test_state_command_round_trips(onpath, capsys, tmp_path):
    from slurmtopo.inventory.state import load_state

    onpath.on("sinfo --json", file="sinfo_untyped_drain.json")
    code, out, err = run(["state"], capsys)
    assert code == 0, err
    path = tmp_path / "s.yaml"
    path.write_text(out)
    st = load_state(str(path))
    assert st.nodes["node1"].busy_gpus == {0, 1, 2}
    assert st.nodes["node3"].flags == {"drain"}
    assert st.nodes["node4"].exclusive and st.nodes["node4"].state == "allocated"
    code, out, err = run(["state", "--inventory", INV, "--json", "--all", "-o",
                          str(tmp_path / "s.json")], capsys)
    assert code == 0 and "4 node(s)" in err
    assert len(json.loads((tmp_path / "s.json").read_text())["nodes"]) == 4


def test_state_command_slurm_down(onpath, capsys):
    onpath.on("sinfo --json", rc=1, stderr="slurm_load_node error: Unable to contact slurm "
                                           "controller (connect failure)\n")
    code, out, err = run(["state"], capsys)
    assert code == 4
    assert err == ("slurmtopo: error: slurm_load_node error: Unable to contact slurm "
                   "controller (connect failure)\n")


def test_queued_when_nothing_is_free_now(onpath, capsys):
    # 11 free GPUs on the live cluster (node1 holds 0-2, node2 0-1, node3
    # drains, node4 allocated): a 16-rank job cannot start now; it is planned
    # on the nodes that could run it and submitted, Slurm queues it
    onpath.on("sinfo --json", file="sinfo_untyped_drain.json")
    code, out, err = run(["sbatch", "--inventory", INV, "--world", "16", "--dry-run", "--",
                          "true"], capsys)
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n")
    assert "slurmtopo: not now: needs 16 GPUs" in err and "queued" in err
    onpath.on("sbatch", stdout="77\n")
    code, out, err = run(["sbatch", "--inventory", INV, "--world", "16", "--daemon", "--", "true"],
                         capsys)
    assert code == 0, err
    assert out == "Submitted batch job 77 (held for the placement daemon)\n"
    assert "not now" in err and "placement daemon releases it" in err
    # 32 GPUs need the drained node too: still queued, and said so
    code, out, err = run(["sbatch", "--inventory", INV, "--world", "32", "--", "true"], capsys)
    assert code == 0, err
    assert "down or drained now" in err
    # ... but a job bigger than the cluster can never run: refused, in other words
    code, out, err = run(["sbatch", "--inventory", INV, "--world", "64", "--", "true"], capsys)
    assert code == 3 and "\n" not in err.strip()
    assert err.startswith("slurmtopo: error: never: this job cannot run here even with every "
                          "eligible node idle: needs 64 GPUs")


def test_partition_and_constraint_reach_slurm(onpath, capsys):
    """--partition and --constraint become directives; with no features known
    the planner says it cannot filter (tests/test_queue.py checks the
    filtering itself)."""
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    # no node reports features here: the constraint goes to Slurm alone, said so
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "8", "--constraint", "nosuch",
                          "--dry-run", "--", "true"], capsys)
    assert code == 0 and "no node features are known" in err, err
    assert "#SBATCH --constraint=nosuch\n" in out
    # a partition no node is in is Slurm's to refuse, in its own words
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "8", "--partition", "nosuch",
                          "--dry-run", "--", "true"], capsys)
    assert code == 0 and "#SBATCH --partition=nosuch\n" in out, err
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "8", "--partition", "gpu",
                          "--dry-run", "--", "true"], capsys)
    assert code == 0 and "#SBATCH --partition=gpu\n" in out, err


def test_first_class_options_and_refused_extras(onpath, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--qos", "high", "--mem-per-gpu",
                          "80G", "--output", "logs/%x-%j.out", "--error", "logs/%j.err",
                          "--dependency", "afterok:12", "--mail-type", "END,FAIL", "--mail-user",
                          "me@example.org", "--signal", "B:USR1@120", "--requeue",
                          "--reservation", "maint", "--account", "ml", "--dry-run", "--", "true"],
                         capsys)
    assert code == 0, err
    for line in ("--qos=high", "--mem-per-gpu=80G", "--output=logs/%x-%j.out",
                 "--error=logs/%j.err", "--dependency=afterok:12", "--mail-type=END,FAIL",
                 "--mail-user=me@example.org", "--signal=B:USR1@120", "--requeue",
                 "--reservation=maint", "--account=ml"):
        assert f"#SBATCH {line}\n" in out
    for extra, words in (("--nodes=3", "--nodes is set by the plan"),
                         ("--gpus-per-node=9", "use --gpus-per-node instead"),
                         ("--nodelist=node1", "use --nodelist instead"),
                         ("-N 2", "-N (sbatch reads it as --nodes) is set by the plan"),
                         # sbatch's own readings: a bundle, unique prefixes (issue 21)
                         ("-vN3", "-N (sbatch reads it as --nodes) is set by the plan"),
                         ("--ntasks-per-no=1", "reads it as --ntasks-per-node) is set by"),
                         ("--nodel=node4", "use --nodelist instead"),
                         ("--partit=gpu", "use --partition instead")):
        code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", f"--sbatch={extra}",
                              "--dry-run", "--", "true"], capsys)
        assert code == 2 and words in err and out == "", (extra, err)
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--mem", "1G",
                          "--mem-per-gpu", "2G", "--dry-run", "--", "true"], capsys)
    assert code == 2 and "not both" in err
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--output", "a b",
                          "--dry-run", "--", "true"], capsys)
    assert code == 2 and "--output 'a b' is not valid" in err


def test_state_output_that_cannot_be_written(onpath, capsys, tmp_path):
    onpath.on("sinfo --json", file="sinfo_untyped_drain.json")
    (tmp_path / "f").write_text("x")
    for target, why in ((tmp_path / "f" / "s.yaml", f"{tmp_path / 'f'} is not a directory"),
                        (tmp_path / "no" / "s.yaml", f"{tmp_path / 'no'} does not exist")):
        code, out, err = run(["state", "-o", str(target)], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err
        assert lines[0].startswith(f"slurmtopo: error: {target}: ") and why in lines[0]
    assert (tmp_path / "f").read_text() == "x" and not (tmp_path / "no").exists()


def test_unsafe_run_directory_is_refused_before_submitting(onpath, capsys, tmp_path,
                                                           monkeypatch):
    """A `.slurmtopo/runs` that is a link (a group member's, or to the
    user's checkpoints) is refused with one line before sbatch runs, and
    the old-run pruning of a submission with --run-dir elsewhere leaves it
    alone (issue 21)."""
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", stdout="4242\n")
    submit = tmp_path / "shared"
    (submit / ".slurmtopo").mkdir(parents=True)
    ckpt = tmp_path / "ckpt"
    (ckpt / "1000").mkdir(parents=True)
    (submit / ".slurmtopo" / "runs").symlink_to(ckpt)
    monkeypatch.chdir(submit)
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--", "true"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{submit}/.slurmtopo/runs: is a symbolic link (to {ckpt}" in err
    assert "give --run-dir" in err
    assert not any(c["argv"][0] == "sbatch" for c in onpath.calls())
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--keep-runs", "1",
                          "--run-dir", str(tmp_path / "mine"), "--", "true"], capsys)
    assert code == 0 and out == "Submitted batch job 4242\n", err
    assert "old run directories not removed" in err and "symbolic link" in err
    assert (ckpt / "1000").is_dir()
    assert (tmp_path / "mine" / "job.sbatch").is_file()
    # SLURMTOPO_RUN_DIR travels into the job and wins there: it is what is checked
    monkeypatch.setenv("SLURMTOPO_RUN_DIR", str(tmp_path / "env-run"))
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--", "true"], capsys)
    assert code == 0 and out == "Submitted batch job 4242\n", err
    assert (tmp_path / "env-run").is_dir() and (ckpt / "1000").is_dir()


@pytest.mark.parametrize("release,gated", [("slurm 25.11.7", False), ("slurm 24.11.3", True)])
def test_sbatch_asks_the_live_release_for_segment_options(onpath, capsys, tmp_path, release,
                                                          gated):
    """On a block inventory, `slurmtopo sbatch` asks `sinfo --version` which
    segment options the cluster's Slurm has (placement/segments.py): the
    IMEX channel per segment and spread (25.11+) only where it has them."""
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sinfo --version", stdout=release + "\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("SwitchType=switch/nvidia_imex\nNodeName=node[1-4] Gres=gpu:4\n")
    nvl = str(FIXTURES / "devcluster-nvl-inventory.yaml")
    code, out, err = run(["sbatch", "--inventory", nvl, "--tp", "4", "--ep", "2", "--dp", "2",
                          "--state", "none", "--dry-run", "--slurm-conf", str(conf), "--",
                          "python3", "t.py"], capsys)
    assert code == 0, err
    # --state none: no live state, no release asked; the plan assumes a current release
    assert ["sinfo", "--version"] not in [c["argv"] for c in onpath.calls()]
    code, out, err = run(["sbatch", "--inventory", nvl, "--tp", "4", "--ep", "2", "--dp", "4",
                          "--dry-run", "--slurm-conf", str(conf), "--", "python3", "t.py"],
                         capsys)
    assert code == 0, err
    assert ["sinfo", "--version"] in [c["argv"] for c in onpath.calls()]
    assert "#SBATCH --segment=2\n" in out
    assert ("#SBATCH --network=unique-channel-per-segment\n" in out) is not gated
    assert ("#SBATCH --spread-segments\n" in out) is not gated


def test_a_failed_submission_says_how_and_leaves_no_run_directory(onpath, tmp_path, capsys,
                                                                  monkeypatch):
    """Issue 32: `sbatch --state none` off the cluster: Slurm's "Could not
    establish a configuration source" came with "--state none ... plans
    without Slurm" (already given), and left an empty .slurmtopo/runs in
    the submit directory. Now the way out is one that does not submit, and
    nothing slurmtopo made for the job stays."""
    onpath.on("sbatch", rc=1, stderr=(
        "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
        "sbatch: fatal: Could not establish a configuration source\n"))
    submit = tmp_path / "submit"
    (submit / "mine").mkdir(parents=True)
    monkeypatch.chdir(submit)
    code, out, err = run(["sbatch", "--inventory", INV, "--state", "none", "--tp", "2", "--",
                          "true"], capsys)
    assert code == 4 and out == ""
    assert err.startswith("slurmtopo: error: sbatch: no Slurm configuration found (set "
                          "SLURM_CONF, or run on a node of the cluster; `slurmtopo plan ... -- "
                          "CMD` writes the batch script without submitting it, --dry-run "
                          "prints it): ")
    assert "--state none" not in err
    assert sorted(p.name for p in submit.iterdir()) == ["mine"]
    # an existing runs root (with an earlier job's) is left as it was
    (submit / ".slurmtopo" / "runs" / "41").mkdir(parents=True)
    code, out, err = run(["sbatch", "--inventory", INV, "--state", "none", "--tp", "2", "--",
                          "true"], capsys)
    assert code == 4
    assert [p.name for p in (submit / ".slurmtopo" / "runs").iterdir()] == ["41"]
