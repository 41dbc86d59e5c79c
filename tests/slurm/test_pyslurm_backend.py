"""The pyslurm backend against tests/fakes/fake_pyslurm.py, a faithful fake
of the pyslurm 25.11 API (real pyslurm cannot be built against the 22.05
of the test machines)."""
from __future__ import annotations

import sys

import pytest

from slurmtopo.errors import SlurmError
from slurmtopo.slurm import get_backend
from slurmtopo.slurm import pyslurm_backend as pb
from tests.fakes import fake_pyslurm


@pytest.fixture
def fake(monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"          # pyslurm is imported only with a config
    conf.write_text("ClusterName=fake\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    c = fake_pyslurm.reset()
    c.add_node("gpu1", gres="gpu:a100:8(S:0-1)", gpu_type="a100", state="MIXED", used={0, 1},
               features=("a100", "ib"), alloc_cpus=4, cpus=64)
    c.add_node("gpu2", gres="gpu:a100:8(S:0-1)", gpu_type="a100", state="IDLE+DRAIN",
               reason="fan")
    c.add_node("gpu3", gres="gpu:a100:8(S:0-1)", gpu_type="a100", state="ALLOCATED",
               used=range(8), alloc_cpus=64, cpus=64)
    c.add_job(7, name="train", user="alice", state="RUNNING", reason="None", priority=500,
              nodes="gpu[1,3]", layout={"gpu1": "gpu:a100:2(IDX:0-1)",
                                        "gpu3": "gpu:a100:8(IDX:0-7)"},
              comment="hello", num_nodes=2, gres_per_node="gres:gpu:a100:2")
    c.add_job(8, name="held", state="PENDING", reason="JobHeldUser", priority=0,
              required_nodes="gpu[1-2]", comment="slurmtopo:v1:{}")
    monkeypatch.setitem(sys.modules, "pyslurm", fake_pyslurm)
    return c


def test_fake_matches_pyslurm_gres_dicts():
    """The shapes pyslurm's cstr.to_gres_dict gives (the backend relies on them)."""
    assert fake_pyslurm.to_gres_dict("gpu:a100:8(S:0-1)") == {"gpu:a100": 8}
    assert fake_pyslurm.to_gres_dict("gpu:8(S:0-1)") == {"gpu": 8}
    assert fake_pyslurm.to_gres_dict("gpu:a100:2(IDX:0-1)") == \
        {"gpu:a100": {"count": "2", "indexes": "0-1"}}
    assert fake_pyslurm.to_gres_dict("gpu:2(IDX:4-5)") == {"gpu": {"count": "2", "indexes": "4-5"}}
    assert fake_pyslurm.to_gres_dict("gres:gpu:a100:2") == {"gpu:a100": 2}


def test_available_and_auto(fake, monkeypatch, tmp_path):
    from slurmtopo.slurm.cli_backend import CliBackend

    assert pb.available()
    assert isinstance(get_backend("pyslurm"), pb.PySlurmBackend)
    # auto: pyslurm only where Slurm's commands are missing
    monkeypatch.setenv("PATH", str(tmp_path))
    assert isinstance(get_backend("auto"), pb.PySlurmBackend)
    (tmp_path / "sinfo").write_text("#!/bin/sh\n")
    (tmp_path / "sinfo").chmod(0o755)
    assert isinstance(get_backend("auto"), CliBackend)


def test_too_old_pyslurm_is_not_used(fake, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(fake_pyslurm, "__version__", "22.5.1")
    assert not pb.available()
    from slurmtopo.slurm.cli_backend import CliBackend
    assert isinstance(get_backend("auto"), CliBackend)
    with pytest.raises(SlurmError, match="too old"):
        get_backend("pyslurm")


def test_nodes(fake):
    nodes = {n.name: n for n in pb.PySlurmBackend(fake_pyslurm).nodes()}
    g1 = nodes["gpu1"]
    assert (g1.state, g1.flags, g1.gpus_total, g1.gpus_used) == ("mixed", frozenset(), 8, {0, 1})
    assert g1.features == ("a100", "ib") and g1.partitions == ("gpu",)
    assert (g1.cpus_total, g1.cpus_alloc) == (64, 4)
    assert nodes["gpu2"].flags == {"drain"} and nodes["gpu2"].reason == "fan"
    assert not nodes["gpu2"].usable
    assert nodes["gpu3"].gpus_used == set(range(8))


def test_jobs_and_job(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    jobs = {j.job_id: j for j in b.jobs()}
    j7 = jobs[7]
    assert j7.state == "RUNNING" and j7.reason is None and j7.nodes == ("gpu1", "gpu3")
    assert j7.gpus == {"gpu1": (0, 1), "gpu3": tuple(range(8))}
    assert j7.comment == "hello" and j7.user == "alice" and j7.num_nodes == 2
    assert jobs[8].held and jobs[8].req_nodes == ("gpu1", "gpu2") and jobs[8].gpus == {}
    assert [j.job_id for j in b.jobs({"PENDING"})] == [8]
    assert b.job(7).gpus == j7.gpus
    assert b.job(12345) is None


def test_cluster_state(fake):
    st = pb.PySlurmBackend(fake_pyslurm).cluster_state()
    assert st.nodes["gpu1"].busy_gpus == {0, 1} and st.nodes["gpu1"].usable
    assert not st.nodes["gpu2"].usable and st.nodes["gpu3"].exclusive


def test_submit_reads_sbatch_lines_and_args_win(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    script = ("#!/bin/bash\n#SBATCH --job-name=fromscript\n#SBATCH --nodes=2\n"
              "#SBATCH --gpus-per-node=4\n#SBATCH --comment=script\nsrun true\n")
    jid = b.submit(script, args=["--comment=slurmtopo:v1:{\"a\":1}", "-J", "fromargs"], hold=True)
    rec = fake.jobs[jid]
    assert rec.script == script
    assert rec.name == "fromargs" and rec.comment == 'slurmtopo:v1:{"a":1}'
    assert rec.priority == 0 and rec.reason == "JobHeldUser"
    assert rec.desc["nodes"] == "2" and rec.desc["gpus_per_node"] == "4"
    assert b.job(jid).held


def test_submit_failures_carry_slurms_message(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    with pytest.raises(SlurmError, match="Invalid partition name specified"):
        b.submit("#!/bin/bash\n#SBATCH --partition=nosuch\ntrue\n")
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        b.submit("#!/bin/bash\n#SBATCH --gpus-per-node=9\ntrue\n")
    with pytest.raises(SlurmError, match="cannot pass sbatch option '--exclusive'"):
        b.submit("#!/bin/bash\ntrue\n", args=["--exclusive"])
    assert fake.jobs == {7: fake.jobs[7], 8: fake.jobs[8]}


def test_submit_refuses_directives_pyslurm_would_drop(fake):
    """pyslurm skips #SBATCH options it does not map (--gpus-per-task, which
    its table misspells): refuse rather than run a job with a different
    shape. --segment is skipped too, but the backend passes it itself."""
    b = pb.PySlurmBackend(fake_pyslurm)
    script = ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks=12\n"
              "#SBATCH --gpus-per-task=1\n#SBATCH --segment=2\n# comment\n"
              "srun true\n#SBATCH --not-a-directive-after-the-first-command\n")
    assert pb.unsupported_directives(script) == ["--gpus-per-task", "--segment"]
    with pytest.raises(SlurmError, match=r"ignore #SBATCH --gpus-per-task in"):
        b.submit(script)
    assert len(fake.jobs) == 2


def _script_for(tmp_inv, topology):
    from slurmtopo.job.groups import Layout
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.inventory.model import ClusterState
    from slurmtopo.plan.choice import plan
    from slurmtopo.job.request import JobRequest
    from slurmtopo.sbatch import SbatchRequest
    from tests.slurm.conftest import FIXTURES

    inv = load_inventory(str(FIXTURES / tmp_inv))
    layout = Layout(tp=8, dp=2).resolved()
    req = JobRequest(layout=layout)
    pl = plan(inv, ClusterState(), req)
    return SbatchRequest.from_plan(inv, pl, layout, ["python", "train.py"], req, job_name="llm",
                                   topology=topology).render(), pl


def test_submit_the_script_slurmtopo_writes(fake):
    """Without a topology request the script goes through pyslurm, with the
    ntasks pyslurm needs for a multi-node GPU job (it would give one task and
    never start the job otherwise)."""
    text, pl = _script_for("devcluster-inventory.yaml", "none")
    jid = pb.PySlurmBackend(fake_pyslurm).submit(text)
    desc = fake.jobs[jid].desc
    # (A6000 nodes: the cost model may prefer 4 GPUs of one PCIe switch on 4 nodes)
    n = len(pl.hosts)
    per = str(16 // n)
    assert (desc["nodes"], desc["ntasks_per_node"], desc["gpus_per_node"]) == (str(n), per, per)
    assert desc["ntasks"] == 16 and not fake.jobs[jid].never_starts
    assert fake.jobs[jid].name == "llm"


def test_switches_go_through_sbatch(fake, slurm, monkeypatch):
    """pyslurm 25.11 fails every --switches value: such a script is handed to
    sbatch (the command-line backend), and pyslurm submits nothing."""
    text, pl = _script_for("devcluster-inventory.yaml", "tree")
    leaves = {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2", "node4": "leaf2"}
    assert f"#SBATCH --switches={len({leaves[h] for h in pl.hosts})}@5:00" in text
    with pytest.raises(ValueError, match="Invalid Time Specification"):
        fake_pyslurm.JobSubmitDescription(switches="1@5:00")      # the quirk itself
    slurm.on("sbatch", stdout="4242\n")
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    assert pb.PySlurmBackend(fake_pyslurm).submit(text, hold=True) == 4242
    (call,) = [c for c in slurm.calls() if c["argv"][0] == "sbatch"]
    assert call["argv"] == ["sbatch", "--parsable", "--hold"] and call["stdin"] == text
    assert len(fake.jobs) == 2


@pytest.mark.parametrize("directives, attrs, want", [
    ({"time": "60"}, {}, {"time_limit": 60}),
    ({"time": "1:00:00"}, {}, {}),
    ({}, {"time_limit": "90"}, {"time_limit": 90}),
    ({"segment": "2", "nodes": "4"}, {}, {"segment_size": 2, "ntasks": 4}),
    ({"nodes": "2", "ntasks-per-node": "4"}, {}, {"ntasks": 8}),
    ({"nodes": "2", "ntasks": "3"}, {}, {}),
    ({"nodes": "1"}, {}, {}),
])
def test_submit_fixups(directives, attrs, want):
    assert pb.submit_fixups(directives, attrs) == want


def test_digit_time_and_segment_reach_pyslurm(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    with pytest.raises(TypeError):
        fake_pyslurm.JobSubmitDescription(time_limit="60")          # the quirk itself
    jid = b.submit("#!/bin/bash\n#SBATCH --time=60\n#SBATCH --segment=2\n#SBATCH --nodes=2\n"
                   "#SBATCH --gpus-per-node=4\nsrun true\n")
    desc = fake.jobs[jid].desc
    assert desc["time_limit"] == 60 and desc["segment_size"] == 2 and desc["ntasks"] == 2


def test_busy_gpus_come_from_jobs_without_slurmdbd(fake):
    """Without slurmdbd pyslurm's Node.allocated_gres is empty: the GPUs the
    running jobs hold say which are busy."""
    assert fake_pyslurm.Node.load("gpu1").allocated_gres == {}
    nodes = {n.name: n for n in pb.PySlurmBackend(fake_pyslurm).nodes()}
    assert nodes["gpu1"].gpus_used == {0, 1} and nodes["gpu3"].gpus_used == set(range(8))
    fake.slurmdbd = True
    assert fake_pyslurm.Node.load("gpu1").allocated_gres


def test_no_slurm_conf_no_import(monkeypatch, tmp_path):
    """libslurm ends the process when it finds no configuration: pyslurm is
    never imported then."""
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    monkeypatch.setitem(sys.modules, "pyslurm", None)   # an import would raise ImportError
    assert pb.slurm_conf_path() is None
    assert not pb.available()
    with pytest.raises(SlurmError, match="needs Slurm's configuration"):
        pb.PySlurmBackend()


def test_hold_release_update_cancel(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    b.hold(7)
    assert fake.jobs[7].priority == 0 and fake.jobs[7].reason == "JobHeldAdmin"
    assert not b.job(7).held_by_user
    b.release(7)
    assert fake.jobs[7].priority > 0
    b.uhold(7)                                  # the placement daemon's hold: a user hold
    assert fake.jobs[7].priority == 0 and fake.jobs[7].reason == "JobHeldUser"
    b.release(7)
    b.update_job(8, Comment="new comment", ReqNodeList="gpu1")
    assert fake.jobs[8].comment == "new comment" and fake.jobs[8].required_nodes == "gpu1"
    with pytest.raises(SlurmError, match="cannot update job field 'Bogus'"):
        b.update_job(8, Bogus="1")
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        b.hold(999)
    b.cancel(8)
    assert fake.jobs[8].state == "CANCELLED"
    b.cancel(999)            # pyslurm ignores SIGKILL for a job that is gone


def test_update_node(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    b.update_node("gpu1", State="DRAIN", Reason="slurmtopo agent: GPU 3 lost")
    n = {x.name: x for x in b.nodes()}["gpu1"]
    assert n.flags == {"drain"} and n.reason == "slurmtopo agent: GPU 3 lost"
    with pytest.raises(SlurmError, match="Invalid Node state"):
        b.update_node("gpu1", State="SIDEWAYS")
    with pytest.raises(SlurmError, match="does not exist"):
        b.update_node("nope", State="DRAIN")


def test_rpc_errors_while_loading(fake):
    fake.fail["slurm_load_node"] = fake_pyslurm.RPCError(msg="Unable to contact slurm "
                                                            "controller (connect failure)")
    with pytest.raises(SlurmError, match="loading nodes: Unable to contact slurm controller"):
        pb.PySlurmBackend(fake_pyslurm).nodes()


def test_backend_never_imports_pyslurm_unless_chosen():
    import subprocess

    code = ("import sys, slurmtopo.slurm.pyslurm_backend as pb\n"
            "from slurmtopo.slurm import get_backend\n"
            "get_backend('cli'); get_backend('auto')\n"
            "print('pyslurm' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    assert p.stdout.strip() == "False", p.stderr


def test_gpu_and_shape_options_reach_pyslurm(fake):
    b = pb.PySlurmBackend(fake_pyslurm)
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        b.submit("#!/bin/bash\ntrue\n", args=["--gres=gpu:9"])
    jid = b.submit("#!/bin/bash\ntrue\n", args=["-N", "2", "--ntasks=2", "--gres=gpu:2",
                                                "--constraint=ib"])
    desc = fake.jobs[jid].desc
    assert (desc["nodes"], desc["ntasks"], desc["gres_per_node"], desc["constraints"]) == \
        ("2", "2", "gpu:2", "ib")


def test_accounting_goes_through_sacct(fake, slurm, monkeypatch):
    """``audit --sacct`` and ``show`` of a forgotten job with the pyslurm
    backend: sacct's text, read by the command-line backend (pyslurm's db
    API would need a slurmdbd: see the module doc)."""
    slurm.on("sacct -a -X -P -S 2025-03-03 -E now -o JobID,State",
             stdout="JobID|State\n202|COMPLETED\n")
    slurm.on("sacct -j 202 -X -n -P -o WorkDir", stdout="/home/alice/run\n")
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    backend = pb.PySlurmBackend(fake_pyslurm)
    assert backend.accounting("2025-03-03", "now", ["JobID", "State"]) == \
        "JobID|State\n202|COMPLETED\n"
    assert backend.accounted_work_dir(202) == "/home/alice/run"
    with pytest.raises(SlurmError, match="bad start time"):
        backend.accounting("-x", "now", ["JobID"])


def test_accounting_without_sacct_is_one_line(fake, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    backend = pb.PySlurmBackend(fake_pyslurm)
    for call in (lambda: backend.accounting("2025-03-03", "now", ["JobID"]),
                 lambda: backend.accounted_work_dir(202)):
        with pytest.raises(SlurmError) as exc:
            call()
        assert exc.value.render() == "accounting needs sacct (the cli backend), and sacct " \
                                     "is not on PATH; the pyslurm backend reads no accounting " \
                                     "itself"
