"""`--json` on the commands that print: one JSON object on stdout, the
messages inside it, the exit code unchanged."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from slurmtopo import api
from slurmtopo.cli import cli

ROOT = Path(__file__).resolve().parents[1]
INV = ROOT / "etc" / "examples" / "devcluster.yaml"


def _run(args, env=None):
    """(exit code as `slurmtopo` would exit, stdout, stderr)."""
    from slurmtopo.errors import SlurmtopoError

    r = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    if isinstance(r.exception, SlurmtopoError):
        return r.exception.exit_code, r.stdout, r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def test_topology_generate_and_check(tmp_path):
    code, out, err = _run(["topology", "generate", "--reports", INV, "--json"])
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["what"] == "topology.conf" and doc["output"] is None
    assert "SwitchName=leaf1 Nodes=node[1-2]" in doc["text"] and doc["problems"] == []
    conf = tmp_path / "topology.conf"
    code, out, err = _run(["topology", "generate", "--reports", INV, "-o", conf, "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["written"] is True and f"wrote {conf}" in doc["messages"]
    code, out, err = _run(["topology", "check", conf, "--json"])
    assert code == 0 and json.loads(out) == {"path": str(conf), "ok": True, "problems": [],
                                             "summary": "3 switches, 2 level(s), 4 nodes"}


def test_gres_generate_and_check(tmp_path):
    gres = tmp_path / "gres.conf"
    code, out, err = _run(["gres", "generate", "--reports", INV, "-o", gres, "--json"])
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["changed"] and doc["written"]
    code, out, err = _run(["gres", "generate", "--reports", INV, "-o", gres, "--json"])
    assert json.loads(out)["changed"] is False
    code, out, err = _run(["gres", "check", gres, "--json"])
    assert code == 0 and json.loads(out)["summary"] == "8 line(s), 4 node(s)"


def test_agent_gres(tmp_path):
    code, out, err = _run(["agent", "gres", "--report", INV, "--node-name", "node2", "--json"])
    doc = json.loads(out)
    assert code == 0 and [n["node"] for n in doc["nodes"]] == ["node2"]
    assert len(doc["nodes"][0]["lines"]) == 8
    assert doc["nodes"][0]["lines"][0].startswith("Name=gpu Type=nvidia_rtx_a6000 File=/dev/nvidia0")


def test_collect_from_dir(tmp_path):
    src = tmp_path / "reports"
    src.mkdir()
    shutil.copy(ROOT / "docs" / "agent.md", tmp_path / "unused")  # not a report: ignored
    report = (ROOT / "docs" / "agent.md").read_text().split("```yaml\n", 1)[1].split("```")[0]
    (src / "gpu07.yaml").write_text(report)
    code, out, err = _run(["collect", "--from-dir", src, "--nodes", "gpu[07-08]",
                           "-o", tmp_path / "out", "--json"])
    doc = json.loads(out)
    assert code == 1 and doc["collected"] == 1 and doc["failed"] == 1
    assert [n["node"] for n in doc["nodes"]] == ["gpu07", "gpu08"]
    assert doc["nodes"][0]["ok"] is True and doc["nodes"][1]["ok"] is False


def test_bind(tmp_path):
    from slurmtopo.binding.replan import fill_placement
    from slurmtopo.job.groups import Layout
    from slurmtopo.sbatch import SbatchRequest
    from slurmtopo.sbatch.script import extract_plan

    inv = api.load_cluster(str(INV))
    layout = Layout(tp=2).resolved()
    p = fill_placement(inv, [("node1", [0, 1])], layout)
    script = SbatchRequest.from_plan(inv, p, layout, ["true"], inventory_path=str(INV)).render()
    plan = tmp_path / "plan.json"
    plan.write_text(extract_plan(script))
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1", "SLURMD_NODENAME": "node1",
           "SLURM_JOB_GPUS": "0,1", "PATH": str(tmp_path)}  # no scontrol here
    code, out, err = _run(["bind", "--plan", plan, "--run-dir", tmp_path / "run",
                           "--cgroup-devices", "no", "--no-probe", "--json"], env=env)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["job_id"] == "7" and doc["replanned"] is False and doc["launcher"] == "srun"
    assert [r["gpu"] for r in doc["rankmap"]["ranks"]] == [0, 1]
    assert str(tmp_path / "run" / "env.sh") in doc["files"]
    assert "slurmtopo bind: " in err  # the log still goes to stderr (the job's output)


#: commands that print no result to read (services running until stopped)
#: or print a document already (``agent discover --format json``)
NO_JSON = {"agent discover": "prints the node report itself (--format json)",
           "agent run": "a service: runs until stopped, logging",
           "daemon run": "a service: runs until stopped, logging",
           "hooks plan": "prints its protocol for cli_filter.lua (its own machine format)",
           "hooks task-prolog": "prints TaskProlog's export lines for slurmstepd"}


def test_every_command_that_prints_takes_json():
    """README: "Every command that prints takes --json" (issue 32: nccl-topo
    and inventory compile lacked it)."""
    import click

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                yield from walk(cmd.get_command(ctx, name), path + [name])
        else:
            yield " ".join(path), {o for p in cmd.params for o in getattr(p, "opts", [])}

    without = {name for name, opts in walk(cli, []) if "--json" not in opts}
    assert without == set(NO_JSON)


def test_inventory_compile(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    from slurmtopo.inventory.schema import load_inventory, node_report

    for node in load_inventory(str(INV)):
        (reports / f"{node.name}.yaml").write_text(node_report(node, {"source": "test"}))
    out = tmp_path / "cluster.json"
    code, stdout, err = _run(["inventory", "compile", reports, "-o", out, "--json"])
    assert code == 0 and err == ""
    doc = json.loads(stdout)
    assert doc["nodes"] == 4 and len(doc["node_types"]) == 1 and doc["written"] is True
    assert doc["bytes"] == len(out.read_bytes()) and doc["summary"] in doc["messages"]
    assert f"wrote {out} ({doc['bytes']:,} bytes)" in doc["messages"]


def test_nccl_topo(tmp_path):
    azure = ROOT / "etc" / "examples" / "azure-ndv4-4node.yaml"
    code, out, err = _run(["nccl-topo", "--inventory", azure, "-o", tmp_path / "t", "--json"])
    assert code == 0 and err == ""
    (f,) = json.loads(out)["files"]
    assert f["changed"] is True and f["backup"] is None and f["nodes"] == "nd[01-04]"
    assert Path(f["path"]).read_text().startswith("<")
    code, out, err = _run(["nccl-topo", "--inventory", azure, "-o", tmp_path / "t", "--json"])
    assert json.loads(out)["files"][0]["changed"] is False
