"""The command-line backend against stand-in Slurm commands on PATH.

Each stand-in (sinfo, squeue, scontrol, sbatch, scancel) is a small Python
script that logs its argv and stdin and answers from a recorded fixture or
with Slurm's own error text, so these tests run where Slurm is not
installed and still go through real subprocess calls.
"""
from __future__ import annotations

import json
import sys

import pytest

from slurmtopo.errors import SlurmError
from slurmtopo.slurm import get_backend
from slurmtopo.slurm.cli_backend import CliBackend


def test_nodes_jobs_and_one_job(slurm):
    slurm.on("sinfo --json", file="sinfo_typed.json")
    slurm.on("squeue --json", file="squeue_typed.json")
    slurm.on("scontrol -d -o show job 6", file="scontrol_show_job_d_oneliner_typed.txt")
    b = CliBackend(env=slurm.env)
    assert {n.name: sorted(n.gpus_used) for n in b.nodes()} == \
        {"node1": [0, 1, 4], "node2": [0, 1], "node3": [0, 1, 2], "node4": [0, 1, 2, 4, 5]}
    assert [j.job_id for j in b.jobs({"PENDING"})] == [4, 5]
    # `scontrol show job 6` printed every job (as a fixture): only 6 is taken
    assert b.job(6).gpus == {"node2": (0, 1), "node4": (4, 5)}
    argvs = [c["argv"] for c in slurm.calls()]
    # 22.05: scontrol has no --json, so nodes come from sinfo --json and
    # one job from scontrol's text
    assert argvs == [["scontrol", "show", "nodes", "--json"], ["sinfo", "--json"],
                     ["squeue", "--json"], ["scontrol", "--json", "show", "job", "6"],
                     ["scontrol", "-d", "-o", "show", "job", "6"]]
    b.nodes()      # the missing scontrol --json is remembered, not tried again
    assert [c["argv"] for c in slurm.calls()][5:] == [["sinfo", "--json"]]
    b.job(6)       # nor is scontrol's missing --json
    assert [c["argv"][:2] for c in slurm.calls()][6:] == [["scontrol", "-d"]]


def test_unknown_job_is_none(slurm):
    slurm.on("scontrol -d -o show job 99", stderr="slurm_load_jobs error: Invalid job id "
             "specified\n", rc=1)
    assert CliBackend(env=slurm.env).job(99) is None


def test_cluster_state_marks_busy_gpus(slurm):
    slurm.on("sinfo --json", file="sinfo_untyped_busy.json")
    st = CliBackend(env=slurm.env).cluster_state()
    assert st.nodes["node1"].busy_gpus == {0, 1, 2} and st.nodes["node4"].exclusive
    assert st.source == "slurm:cli"


def test_falls_back_to_scontrol_text_without_json(slurm):
    slurm.on("sinfo --json", stderr="sinfo: unrecognized option '--json'\n", rc=1)
    slurm.on("scontrol -d -o show node", file="scontrol_d_show_node_typed.txt")
    slurm.on("squeue --json", stderr="squeue: unrecognized option '--json'\n", rc=1)
    slurm.on("scontrol -d -o show job", file="scontrol_show_job_d_typed.txt")
    b = CliBackend(env=slurm.env)
    assert {n.name: n.state for n in b.nodes()}["node3"] == "down"
    assert len(b.jobs()) == 6
    # the fallback is remembered: --json is not tried again
    b.nodes()
    assert [c["argv"][:2] for c in slurm.calls()].count(["sinfo", "--json"]) == 1


def test_controller_down_is_a_slurm_error_not_a_fallback(slurm):
    slurm.on("sinfo --json", stderr="slurm_load_node error: Unable to contact slurm "
             "controller (connect failure)\n", rc=1)
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        CliBackend(env=slurm.env).nodes()


def test_submit_passes_the_script_on_stdin_and_argv_verbatim(slurm):
    slurm.on("sbatch", stdout="4242\n")
    script = "#!/bin/bash\n#SBATCH --nodes=1\necho '$(touch X)' `id`\n"
    jid = CliBackend(env=slurm.env).submit(script, args=["--comment=a b;$(rm -rf /)",
                                                         "--job-name=`x`"], hold=True)
    assert jid == 4242
    (call,) = slurm.calls()
    assert call["argv"] == ["sbatch", "--parsable", "--hold", "--comment=a b;$(rm -rf /)",
                            "--job-name=`x`"]
    assert call["stdin"] == script


def test_submit_on_a_federated_cluster(slurm):
    slurm.on("sbatch", stdout="77;cluster2\n")
    assert CliBackend(env=slurm.env).submit("#!/bin/bash\ntrue\n") == 77


def test_submit_failure_is_slurms_message(slurm):
    slurm.on("sbatch", stderr="sbatch: error: invalid partition specified: nosuch\n"
                              "sbatch: error: Batch job submission failed: Invalid partition "
                              "name specified\n", rc=1)
    with pytest.raises(SlurmError) as exc:
        CliBackend(env=slurm.env).submit("#!/bin/bash\ntrue\n")
    assert exc.value.render() == ("invalid partition specified: nosuch; Batch job submission "
                                  "failed: Invalid partition name specified")
    assert exc.value.exit_code == 4


def test_update_hold_release_cancel_node(slurm):
    slurm.on("scontrol", stdout="")
    slurm.on("scancel", stdout="")
    b = CliBackend(env=slurm.env)
    b.update_job(12, Comment="slurmtopo:v1:{} a;b", ReqNodeList="node[1-2]", ExcNodeList="")
    b.hold(12)
    b.uhold(12)
    b.release(12)
    b.cancel(12)
    b.update_node("node3", State="DRAIN", Reason="slurmtopo agent: GPU 3 lost; see $(log)")
    assert [c["argv"] for c in slurm.calls()] == [
        ["scontrol", "update", "JobId=12", "Comment=slurmtopo:v1:{} a;b",
         "ReqNodeList=node[1-2]", "ExcNodeList="],
        ["scontrol", "hold", "12"], ["scontrol", "uhold", "12"], ["scontrol", "release", "12"],
        ["scancel", "12"],
        ["scontrol", "update", "NodeName=node3", "State=DRAIN",
         "Reason=slurmtopo agent: GPU 3 lost; see $(log)"]]


def test_update_refuses_multi_line_values_and_odd_names(slurm):
    b = CliBackend(env=slurm.env)
    with pytest.raises(SlurmError, match="one line"):
        b.update_job(1, Comment="a\nb")
    with pytest.raises(SlurmError, match="bad node name"):
        b.update_node("node1 State=DOWN", State="DRAIN")
    with pytest.raises(SlurmError, match="bad Slurm field"):
        b.update_job(1, **{"A B": "x"})
    assert slurm.calls() == []


def test_scontrol_failure_is_reported(slurm):
    slurm.on("scontrol update", stderr="Update of this parameter is not supported: "
             "NoSuchKey=1\nRequest aborted\n", rc=1)
    with pytest.raises(SlurmError, match="not supported: NoSuchKey=1; Request aborted"):
        CliBackend(env=slurm.env).update_job(3, NoSuchKey="1")


def test_missing_slurm_client(tmp_path):
    b = CliBackend(env={"PATH": str(tmp_path)})
    with pytest.raises(SlurmError, match="scontrol not found"):
        b.nodes()


def test_factory(monkeypatch):
    assert isinstance(get_backend("cli"), CliBackend)
    monkeypatch.setenv("SLURMTOPO_BACKEND", "cli")
    assert isinstance(get_backend(), CliBackend)
    monkeypatch.delenv("SLURMTOPO_BACKEND")
    # no pyslurm and no Slurm commands: auto is still the command line (which
    # then says sinfo is missing)
    monkeypatch.setitem(sys.modules, "pyslurm", None)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert isinstance(get_backend("auto"), CliBackend)
    with pytest.raises(SlurmError, match="needs pyslurm"):
        get_backend("pyslurm")
    with pytest.raises(SlurmError, match="unknown Slurm backend"):
        get_backend("rest")


# -- administration and the start-time step: the same runner and errors ----------


def test_reconfigure_and_its_refusal(slurm):
    slurm.on("scontrol reconfigure")
    CliBackend(env=slurm.env).reconfigure()
    assert slurm.calls()[-1]["argv"] == ["scontrol", "reconfigure"]
    slurm.on("scontrol reconfigure", stderr="scontrol: error: Zero Bytes were transmitted",
             rc=1)
    with pytest.raises(SlurmError, match="Zero Bytes were transmitted"):
        CliBackend(env=slurm.env).reconfigure()


def test_node_reason(slurm):
    slurm.on("scontrol show node gpu07", stdout="NodeName=gpu07 Arch=x86_64\n"
             "   State=IDLE+DRAIN ThreadsPerCore=2\n"
             "   Reason=slurmtopo: GPU 5 lost [root@2026-01-01T00:00:00]\n")
    assert CliBackend(env=slurm.env).node_reason("gpu07") == "slurmtopo: GPU 5 lost"
    slurm.on("scontrol show node gpu08", stdout="NodeName=gpu08 Arch=x86_64\n   State=IDLE\n")
    assert CliBackend(env=slurm.env).node_reason("gpu08") is None
    with pytest.raises(SlurmError, match="bad node name"):
        CliBackend(env=slurm.env).node_reason("gpu07 gpu08")


def test_node_addr(slurm):
    slurm.on("scontrol show node node1", stdout="NodeName=node1 Arch=x86_64 CoresPerSocket=4\n"
             "   NodeAddr=127.0.0.1 NodeHostName=localhost Version=25.11.7\n")
    assert CliBackend(env=slurm.env).node_addr("node1") == "127.0.0.1"
    slurm.on("scontrol show node gpu08", stdout="NodeName=gpu08 Arch=x86_64\n   State=IDLE\n")
    assert CliBackend(env=slurm.env).node_addr("gpu08") is None
    with pytest.raises(SlurmError, match="bad node name"):
        CliBackend(env=slurm.env).node_addr("a=b")


def test_job_detail_config_and_step_output(slurm):
    slurm.on("scontrol show job -d 9", stdout="   Nodes=gpu02 CPU_IDs=0 GRES=gpu:2(IDX:0-1)\n")
    slurm.on("scontrol show config", stdout="ConstrainDevices = yes\n")
    b = CliBackend(env=slurm.env)
    assert "IDX:0-1" in b.job_detail(9) and "ConstrainDevices" in b.config_text()
    srun = slurm.path / "srun"
    srun.write_text((slurm.path / "scontrol").read_text())
    srun.chmod(0o755)
    slurm.on("srun --nodes=2 /bin/sh -c probe", stdout="SLURMTOPO_PROBE gpu01 0\n")
    assert b.step_output(["--nodes=2"], ["/bin/sh", "-c", "probe"],
                         env={**slurm.env, "X": "1"}) == "SLURMTOPO_PROBE gpu01 0\n"
    slurm.on("srun", stderr="srun: error: Unable to create step", rc=1)
    with pytest.raises(SlurmError, match="Unable to create step"):
        b.step_output([], ["true"])


@pytest.mark.parametrize("v", ["v25.11", "v26.05"])
def test_newer_slurm_nodes_come_from_scontrol_json(slurm, v):
    """23.02+: `scontrol show nodes --json` (one record per node) is used, and
    24.05+'s grouped sinfo --json is never needed."""
    slurm.on("scontrol show nodes --json", file=f"{v}/scontrol_show_nodes.json")
    slurm.on("squeue --json", file=f"{v}/squeue.json")
    b = CliBackend(env=slurm.env)
    st = b.cluster_state()
    assert st.nodes["node1"].busy_gpus == {0, 1, 2, 4, 5}
    assert not st.nodes["node4"].usable and st.nodes["node3"].usable
    assert b.jobs({"PENDING"})[0].job_id == 3
    assert [c["argv"][:2] for c in slurm.calls()] == [["scontrol", "show"], ["squeue", "--json"]]


#: the lines pyxis adds to `srun --help` (its SPANK options, as its README
#: shows them), after srun's own
PYXIS_HELP = """
Options provided by plugins:
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
      --container-mounts=SRC:DST[:FLAGS][,SRC:DST...]
                              [pyxis] bind mount[s] inside the container
      --container-workdir=PATH
                              [pyxis] working directory inside the container
"""


def test_srun_options_from_srun_help_asked_once(slurm, fixture_text):
    help_text = fixture_text("v25.11/srun_help.txt")  # recorded: no pyxis
    slurm.on("srun --help", stdout=help_text)
    b = CliBackend(env=slurm.env)
    known = b.srun_options()
    assert {"--ntasks", "--distribution", "--kill-on-bad-exit", "--gpus-per-node"} <= known
    assert "--container-image" not in known
    assert b.srun_options() is known
    assert [c["argv"] for c in slurm.calls()] == [["srun", "--help"]]
    slurm.on("srun --help", stdout=help_text + PYXIS_HELP)
    assert {"--container-image", "--container-mounts", "--container-workdir"} <= \
        CliBackend(env=slurm.env).srun_options()


def test_srun_options_unknown_when_srun_cannot_say(slurm, tmp_path):
    # no configuration on this host: srun fails before printing its help
    slurm.on("srun --help", stderr="srun: fatal: Could not establish a configuration source\n",
             rc=1)
    assert CliBackend(env=slurm.env).srun_options() is None
    slurm.on("srun --help", stdout="usage: something else\n")
    assert CliBackend(env=slurm.env).srun_options() is None
    assert CliBackend(env={"PATH": str(tmp_path)}).srun_options() is None  # no srun


@pytest.mark.parametrize("pyxis", [False, True], ids=["no-pyxis", "pyxis"])
def test_submit_refuses_a_container_image_srun_does_not_know(slurm, fixture_text, pyxis):
    """--container-image on a cluster without pyxis: refused on the login
    node with the fix, before sbatch (it used to fail at run time with
    srun's "unrecognized option")."""
    from slurmtopo import api
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest
    from slurmtopo.sbatch.launch import Launch
    from tests.clirun import ROOT

    slurm.on("srun --help", stdout=fixture_text("v25.11/srun_help.txt")
             + (PYXIS_HELP if pyxis else ""))
    slurm.on("sbatch", stdout="42\n")
    inv = load_inventory(f"{ROOT}/etc/examples/devcluster.yaml")
    job = api.prepare(inv, None, JobRequest(layout=Layout(tp=2, dp=2)), ["python", "t.py"],
                      api.ScriptOptions(launch=Launch(container_image="nvcr.io#nvidia/pytorch")),
                      with_costs=False)
    backend = CliBackend(env=slurm.env)
    if pyxis:
        assert api.submit(job, backend).job_id == 42
        return
    with pytest.raises(SlurmtopoError) as exc:
        api.submit(job, backend)
    assert exc.value.render() == (
        "--container-image: this cluster's srun has no such option (its pyxis plugin, which "
        "runs containers through enroot, is not installed: `srun --help` does not list it); "
        "ask the admins for pyxis, or run the image with --apptainer IMAGE instead")
    assert [c["argv"][0] for c in slurm.calls()] == ["srun"]  # sbatch never ran
    # without a container nothing is asked
    plain = api.prepare(inv, None, JobRequest(layout=Layout(tp=2, dp=2)), ["python", "t.py"],
                        with_costs=False)
    assert api.submit(plain, CliBackend(env=slurm.env)).job_id == 42
    assert [c["argv"][0] for c in slurm.calls()] == ["srun", "sbatch"]


# -- a job's name that reads as Slurm's fields (docs/security.md) ----------

TAG = 'slurmtopo:v1:{"layout":{"tp":4}}'


def _admin_held_line(job_id: int, name: str) -> str:
    """``scontrol -d -o show job`` of bob's job, held by an admin, its name
    chosen by bob (JobName comes before UserId, Priority, JobState, Reason)."""
    return (f"JobId={job_id} JobName={name} UserId=bob(1001) GroupId=bob(1001) "
            "MCS_label=N/A Priority=0 Nice=0 Account=(null) QOS=(null) JobState=PENDING "
            "Reason=JobHeldAdmin Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
            "ExitCode=0:0 SubmitTime=2026-11-22T13:35:20 Partition=gpu ReqNodeList=(null) "
            f"ExcNodeList=(null) NodeList= NumNodes=1-1 WorkDir=/home/bob Comment={TAG}\n")


@pytest.mark.parametrize("name", [
    "x Reason=JobHeldUser",
    "x UserId=alice(1000) Priority=0 JobState=PENDING Reason=JobHeldUser",
    "x\nReason=JobHeldUser",
    # the second round's bypass: the newline made the old reader take the
    # record for scontrol's multi-line form, and Command= swallowed the rest
    "x\nUserId=bob(1001) Priority=0 JobState=PENDING Reason=JobHeldUser "
    f"Comment={TAG}\nCommand=",
    "x ReqNodeList=n[",                       # failed every text-mode cycle
    "x Foo=bar",                              # no key of Slurm's at all
    "x Comment=y",                            # a key Slurm prints only sometimes
])
def test_a_job_name_cannot_disguise_an_admin_hold(slurm, name):
    """bob names his job so that its text record says JobHeldUser ahead of
    Slurm's JobHeldAdmin (or breaks the record): the daemon's fresh look-up
    read the first one and released an admin's hold. Such a record is never
    split into fields: the job is unreadable, with the reason, and never
    released; where squeue --json exists (22.05) the look-up asks it
    instead, and JSON says JobHeldAdmin."""
    from slurmtopo.daemon.still_ours import why_not_release

    slurm.on("scontrol -d -o show job 7", stdout=_admin_held_line(7, name))
    job = CliBackend(env=slurm.env).job(7)
    assert job is not None and job.unreadable and job.comment == "" and not job.held
    assert job.maybe_tagged
    assert "cannot be read" in why_not_release(job, TAG, None)
    # the snapshot path (no squeue --json) reads the same text
    slurm.on("squeue --json", stderr="squeue: unrecognized option '--json'\n", rc=1)
    slurm.on("scontrol -d -o show job", stdout=_admin_held_line(7, name))
    (snap,) = CliBackend(env=slurm.env).jobs()
    assert snap.unreadable and snap.comment == "" and snap.job_id == 7
    # 22.05 has squeue --json: the look-up finds the job there
    slurm.on("squeue --json", stdout=json.dumps({"jobs": [{
        "job_id": 7, "name": name, "user_id": 1001, "user_name": "bob",
        "job_state": "PENDING", "state_reason": "JobHeldAdmin", "priority": 0,
        "comment": TAG, "partition": "gpu"}]}))
    job = CliBackend(env=slurm.env).job(7)
    assert not job.unreadable and job.reason == "JobHeldAdmin" and job.name == name
    assert "held by an admin" in why_not_release(job, TAG, None)


def test_a_job_name_cannot_forge_another_record(slurm):
    """A newline and JobId= in bob's job name start a record of its own,
    for alice's job 8. The listing cannot tell the two records of job 8
    apart; each job it cannot read is asked for alone, where Slurm prints
    that job only: alice's job keeps its comment, bob's is unreadable."""
    forged = "x\nJobId=8 JobName=y UserId=alice(1000) Priority=0 JobState=PENDING " \
             f"Reason=JobHeldUser Comment={TAG}"
    slurm.on("squeue --json", stderr="squeue: unrecognized option '--json'\n", rc=1)
    slurm.on("scontrol -d -o show job",
             stdout=_admin_held_line(7, forged) + _admin_held_line(8, "alice-job"))
    slurm.on("scontrol -d -o show job 7", stdout=_admin_held_line(7, forged))
    slurm.on("scontrol -d -o show job 8", stdout=_admin_held_line(8, "alice-job"))
    jobs = {j.job_id: j for j in CliBackend(env=slurm.env).jobs()}
    assert sorted(jobs) == [7, 8]
    assert jobs[8].comment == TAG and not jobs[8].unreadable and jobs[8].name == "alice-job"
    assert jobs[7].unreadable and jobs[7].comment == ""


def test_an_ordinary_name_with_blanks_keeps_its_comment(slurm):
    slurm.on("scontrol -d -o show job 7", stdout=_admin_held_line(7, "a b=c `d`"))
    job = CliBackend(env=slurm.env).job(7)
    assert job.comment == TAG and job.name == "a b=c `d`" and job.reason == "JobHeldAdmin"
