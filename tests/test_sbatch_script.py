"""The batch script renderer: golden files per example, structure, quoting.

Goldens pin the *renderer*: each example gets a fixed reference placement
(ranks in order over the first nodes with every GPU free), so a change in
the planner's heuristics does not churn them. Regenerate after an intended
change with ``SLURMTOPO_REGEN_GOLDEN=1 pytest tests/test_sbatch_script.py``
and review the diff.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

import pytest

from slurmtopo import __version__, api
from slurmtopo.binding.replan import fill_placement
from slurmtopo.plan.plandoc import planned_placement, read_plan
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.model import ClusterState
from slurmtopo.sbatch import SbatchRequest, sanitize_job_name, topology_request
from slurmtopo.sbatch.launch import Launch
from slurmtopo.sbatch.script import PLAN_DELIMITER, comment_text
from slurmtopo.inventory.state import load_state

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"
GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("SLURMTOPO_REGEN_GOLDEN") == "1"

#: example -> (state file, layout, script options)
CASES = {
    "h100-4node-2leaf": (None, dict(tp=8, pp=2, dp=2),
                         dict(job_name="llama-8b", partition="gpu", time="1-00:00:00",
                              exclusive=True)),
    "h100-32node-fattree": ("h100-32node-state.yaml", dict(tp=8, pp=2, dp=2),
                            dict(job_name="fattree", account="ml", switch_wait="10:00")),
    "a6000-4node-pcie": (None, dict(tp=2, pp=2, dp=4), dict(job_name="a6000")),
    "dgx1-v100-pair": (None, dict(tp=4, dp=4), dict(job_name="dgx1", time="30")),
    "gb200-nvl72-rack": (None, dict(tp=4, pp=4, dp=2), dict(job_name="nvl72", exclusive=True)),
    "azure-ndv4-4node": (None, dict(tp=8, dp=4), dict(job_name="ndv4", exclusive=True)),
    "devcluster": (None, dict(tp=2, dp=4), dict(job_name="dev", partition="gpu")),
    "torus-32node": (None, dict(tp=8, dp=8), dict(job_name="torus")),
}
COMMAND = ["python", "train.py", "--config", "conf/my run.yaml"]
#: golden -> (example of CASES, launcher and container choices): the other
#: launchers and the containers, rendered on the same reference placement
LAUNCH_CASES = {
    "h100-4node-2leaf.torchrun": ("h100-4node-2leaf", dict(launcher="torchrun")),
    "a6000-4node-pcie.torchrun-module": ("a6000-4node-pcie", dict(
        launcher="torchrun", torchrun="python3 -m torch.distributed.run")),
    "h100-4node-2leaf.pyxis": ("h100-4node-2leaf", dict(
        container_image="nvcr.io#nvidia/pytorch:24.05-py3", container_mounts="/data:/data,/scratch",
        container_workdir="/workspace")),
    "devcluster.apptainer": ("devcluster", dict(apptainer="/images/pytorch 24.05.sif")),
    "devcluster.apptainer-torchrun": ("devcluster", dict(apptainer="/images/pytorch.sif",
                                                         launcher="torchrun")),
}


def reference_placement(inv, state, layout):
    """Ranks in order over the nodes (inventory order) whose GPUs are all free."""
    hg = [(n.name, list(state.free_gpus(n))) for n in inv
          if len(state.free_gpus(n)) == n.hardware.gpu_count]
    need, out = layout.world, []
    for h, gpus in hg:
        if need <= 0:
            break
        out.append((h, gpus[:need]))
        need -= len(gpus[:need])
    return fill_placement(inv, out, layout)


def render_case(name, launch=None):
    state_file, lay, opts = CASES[name]
    inv_path = EXAMPLES / f"{name}.yaml"
    inv = api.load_cluster(str(inv_path))
    state = load_state(EXAMPLES / state_file, inv) if state_file else ClusterState()
    layout = Layout(**lay).resolved()
    p = reference_placement(inv, state, layout)
    req = SbatchRequest.from_plan(inv, p, layout, COMMAND, inventory_path=str(inv_path),
                                  launch=launch, **opts)
    return inv, p, req, req.render()


def normalise(text: str) -> str:
    return text.replace(str(ROOT), "<ROOT>").replace(f"slurmtopo {__version__} ",
                                                     "slurmtopo <VERSION> ")


@pytest.mark.parametrize("name", sorted(CASES) + sorted(LAUNCH_CASES))
def test_golden(name):
    if name in LAUNCH_CASES:
        example, launch = LAUNCH_CASES[name]
        _, _, _, text = render_case(example, Launch(**launch))
    else:
        _, _, _, text = render_case(name)
    text = normalise(text)
    path = GOLDEN / f"{name}.sbatch"
    if REGEN:
        path.write_text(text)
    assert path.exists(), f"missing {path}; run with SLURMTOPO_REGEN_GOLDEN=1"
    assert text == path.read_text(), (f"{path.name} differs; if intended, regenerate with "
                                      "SLURMTOPO_REGEN_GOLDEN=1 and review the diff")


def test_every_example_inventory_has_a_golden():
    inventories = {p.stem for p in EXAMPLES.glob("*.yaml")
                   if "slurmtopo: inventory" in p.read_text()}
    assert inventories <= set(CASES)
    assert {p.stem for p in GOLDEN.glob("*.sbatch")} == set(CASES) | set(LAUNCH_CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_structure(name):
    inv, p, req, text = render_case(name)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    # every directive before the first command, none after
    first_cmd = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    directives = [l for l in lines if l.startswith("#SBATCH")]
    assert lines[1:1 + len(directives)] == directives
    assert all(i < first_cmd for i, l in enumerate(lines) if l.startswith("#SBATCH"))
    per_host = {len(p.ranks_on(h)) for h in p.hosts}
    assert f"#SBATCH --nodes={len(p.hosts)}" in directives
    assert f"#SBATCH --ntasks-per-node={per_host.pop()}" in directives
    assert any(d.startswith("#SBATCH --gpus-per-node=") for d in directives)
    assert ("#SBATCH --exclusive" in directives) == CASES[name][2].get("exclusive", False)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    # the embedded plan is valid and complete
    start = lines.index(next(l for l in lines if l.endswith(f"<<'{PLAN_DELIMITER}'")))
    end = lines.index(PLAN_DELIMITER)
    doc = read_plan("\n".join(lines[start + 1:end]))
    assert doc["version"] == 2
    back = planned_placement(doc)
    assert [(s.host, s.gpu, s.local_rank, s.nics, s.cpus, s.numa_node) for s in back.slots] == \
        [(s.host, s.gpu, s.local_rank, s.nics, s.cpus, s.numa_node) for s in p.slots]
    assert doc["inventory"]["nodes"]
    # the per-rank table is in the comments
    assert any(re.match(r"^#\s+0\s+\S+\s+\d+\s+0\s", l) for l in lines)
    assert lines[-1].endswith("python train.py --config 'conf/my run.yaml'")


def test_topology_requests():
    fat = api.load_cluster(str(EXAMPLES / "h100-32node-fattree.yaml"))
    assert topology_request(fat, ["dgx001", "dgx002"])[0] == ["--switches=1@5:00"]
    assert topology_request(fat, ["dgx001", "dgx009", "dgx017"], wait="1:00")[0] == \
        ["--switches=3@1:00"]
    assert topology_request(fat, ["dgx001"], wait=None)[0] == ["--switches=1"]
    assert topology_request(fat, ["dgx001"], mode="none")[0] == []
    with pytest.raises(SlurmtopoError, match="switch wait"):
        topology_request(fat, ["dgx001"], wait="soon")
    nvl = api.load_cluster(str(EXAMPLES / "gb200-nvl72-rack.yaml"))
    hosts = [f"nvl72r1-t{i:02d}" for i in range(1, 7)]
    assert topology_request(nvl, hosts)[0] == ["--segment=6"]
    assert topology_request(nvl, hosts, mode="tree")[0] == ["--switches=1@5:00"]


def test_segment_splits_blocks_evenly(tmp_path):
    inv_text = (EXAMPLES / "h100-4node-2leaf.yaml").read_text().replace(
        "fabric:\n", "fabric:\n  blocks:\n    - {name: b1, nodes: \"gpu[01-02]\"}\n"
                     "    - {name: b2, nodes: \"gpu[03-04]\"}\n")
    (tmp_path / "inv.yaml").write_text(inv_text)
    inv = api.load_cluster(str(tmp_path / "inv.yaml"))
    assert topology_request(inv, ["gpu01", "gpu02", "gpu03", "gpu04"])[0] == ["--segment=2"]
    opts, why = topology_request(inv, ["gpu01", "gpu02", "gpu03"])
    assert opts == [] and "no segment size" in why[0]


def test_flat_inventory_asks_for_nothing(tmp_path):
    text = (EXAMPLES / "dgx1-v100-pair.yaml").read_text().split("fabric:")[0]
    (tmp_path / "flat.yaml").write_text(text)
    inv = api.load_cluster(str(tmp_path / "flat.yaml"))
    opts, why = topology_request(inv, ["dgx1-1", "dgx1-2"])
    assert opts == [] and "no switches" in why[0]


def test_uneven_ranks_per_node_ask_for_tasks():
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    layout = Layout(tp=2, dp=5).resolved()
    p = fill_placement(inv, [("gpu01", range(8)), ("gpu02", [0, 1])], layout)
    req = SbatchRequest.from_plan(inv, p, layout, ["true"])
    d = req.directives()
    assert "--ntasks=10" in d and "--gpus-per-task=1" in d
    assert not any(x.startswith("--ntasks-per-node") for x in d)
    assert req.notes and "differ" in req.notes[0]


def test_gres_type_and_extra_options():
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    node = inv.nodes["gpu01"]
    hw = dataclasses.replace(node.hardware, gres_type="h100")
    inv.nodes["gpu01"] = dataclasses.replace(node, hardware=hw)
    layout = Layout(tp=4).resolved()
    p = fill_placement(inv, [("gpu01", range(4))], layout)
    req = SbatchRequest.from_plan(inv, p, layout, ["true"], extra=["--qos=high", "--mem=0"],
                                  partition="gpu", account="acct_1")
    d = req.directives()
    assert "--gpus-per-node=h100:4" in d and d[-2:] == ["--qos=high", "--mem=0"]
    assert "--partition=gpu" in d and "--account=acct_1" in d


@pytest.mark.parametrize("field,value", [("partition", "gpu;rm"), ("time", "1 hour"),
                                         ("account", "a b"), ("nodelist", "n1\nn2"),
                                         ("exclude", "$(x)")])
def test_bad_values_are_rejected(field, value):
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    layout = Layout(tp=2).resolved()
    p = fill_placement(inv, [("gpu01", [0, 1])], layout)
    req = SbatchRequest.from_plan(inv, p, layout, ["true"])
    with pytest.raises(SlurmtopoError, match="not valid"):
        dataclasses.replace(req, **{field: value}).render()


def test_extra_option_checks():
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    layout = Layout(tp=2).resolved()
    p = fill_placement(inv, [("gpu01", [0, 1])], layout)
    req = SbatchRequest.from_plan(inv, p, layout, ["true"])
    with pytest.raises(SlurmtopoError, match="newline"):
        dataclasses.replace(req, extra=("--comment=a\nrm -rf /",)).render()
    with pytest.raises(SlurmtopoError, match="start with"):
        dataclasses.replace(req, extra=("qos=high",)).render()
    with pytest.raises(SlurmtopoError, match="no command"):
        dataclasses.replace(req, command=()).render()


def test_sanitize_job_name():
    assert sanitize_job_name("llama-7b_run.2") == ("llama-7b_run.2", None)
    name, note = sanitize_job_name("it's $(rm -rf ~) `x`; y")
    assert re.fullmatch(r"[A-Za-z0-9._+@%:,=-]+", name) and note
    with pytest.raises(SlurmtopoError, match="newline"):
        sanitize_job_name("a\nb")
    with pytest.raises(SlurmtopoError, match="newline"):
        sanitize_job_name("a\rb")


def test_comments_cannot_start_a_line():
    assert comment_text("a\nrm -rf /") == "a\\nrm -rf /"
    assert "\n" not in comment_text("x\r\n\x1b[31m")


def test_inventory_path_with_newline_stays_in_comment(tmp_path):
    d = tmp_path / "odd\ntouch pwned"
    d.mkdir()
    inv_path = d / "inv.yaml"
    inv_path.write_text((EXAMPLES / "h100-4node-2leaf.yaml").read_text())
    inv = api.load_cluster(str(inv_path))
    layout = Layout(tp=2).resolved()
    p = fill_placement(inv, [("gpu01", [0, 1])], layout)
    text = SbatchRequest.from_plan(inv, p, layout, ["true"], inventory_path=str(inv_path)).render()
    assert not any(l.startswith("touch pwned") for l in text.splitlines())
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    doc = read_plan(text.split(f"<<'{PLAN_DELIMITER}'\n", 1)[1].split(f"\n{PLAN_DELIMITER}\n")[0])
    assert doc["inventory_path"] == str(inv_path)


def test_python_and_run_dir_values_are_inert(tmp_path):
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    layout = Layout(tp=2).resolved()
    p = fill_placement(inv, [("gpu01", [0, 1])], layout)
    py = f"/opt/my env/bin/python3$(touch {tmp_path}/p1)"
    rd = f"/scratch/run `touch {tmp_path}/p2`'x\"y"
    text = SbatchRequest.from_plan(inv, p, layout, ["true"], python=py, run_dir=rd).render()
    head = [l for l in text.splitlines()
            if l.startswith(("SLURMTOPO_PYTHON=", "SLURMTOPO_RUN_DIR="))]
    probe = "\n".join(head) + '\nprintf "%s\\n%s\\n" "$SLURMTOPO_PYTHON" "$SLURMTOPO_RUN_DIR"\n'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"]})
    assert out.stdout.splitlines() == [py, rd]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command,name", [
    (["python", "train.py", "--lr", "1"], "train"), (["python3", "-u", "pre_train.py"], "pre_train"),
    (["python", "-m", "pkg.finetune"], "finetune"), (["./run.sh", "x"], "run"),
    (["torchrun", "--nproc-per-node=8", "llama.py"], "llama"), (["hostname"], "hostname"),
    (["python", "-c", "print(1)"], "python"), (["$(rm -rf x)"], "rm_-rf_x")])
def test_default_job_name_from_the_command(command, name):
    from slurmtopo.sbatch.script import default_job_name

    assert default_job_name(command) == name


def _fat_tree(nodes: int):
    """``nodes`` HGX H100 nodes, 32 a leaf switch, the leaves under one
    spine: big enough for a 32,768-rank plan."""
    from slurmtopo.inventory.schema import parse_inventory

    leaves = [{"name": f"leaf{i:03d}", "nodes": f"n[{i * 32 + 1:05d}-{i * 32 + 32:05d}]"}
              for i in range(nodes // 32)]
    return parse_inventory({"slurmtopo": "inventory", "version": 1,
                            "nodes": [{"name": f"n[00001-{nodes:05d}]", "type": "hgx-h100-8"}],
                            "fabric": {"switches": leaves + [
                                {"name": "spine",
                                 "switches": f"leaf[000-{nodes // 32 - 1:03d}]"}]}},
                           "<fat tree>")


def test_script_of_32768_ranks_stays_small():
    """The batch script of a 32,768-rank job is under 1 MB (Slurm refuses
    scripts over max_script_size, 4 MiB by default): the plan is columns,
    packed; the comment table lists 32 ranks and points at rankmap.csv; the
    start-time step reads every rank back as planned."""
    from slurmtopo.sbatch.script import COMMENT_HEAD, MAX_SCRIPT_BYTES

    inv = _fat_tree(4096)
    layout = Layout(tp=8, pp=16, dp=256).resolved()
    p = fill_placement(inv, [(n.name, range(8)) for n in inv], layout)
    req = SbatchRequest.from_plan(inv, p, layout, COMMAND, inventory_path="/x/inv.yaml")
    text = req.render()
    assert len(text.encode()) < 1_000_000 < MAX_SCRIPT_BYTES
    table = [l for l in text.splitlines() if re.match(r"^#\s+\d+\s+n\d{5}\s", l)]
    assert [int(l.split()[1]) for l in table] == list(range(COMMENT_HEAD))
    assert (f"# ... {32768 - COMMENT_HEAD} more ranks on 4092 node(s): every rank is in "
            "rankmap.csv") in text
    doc = read_plan(req.plan_json)
    assert "packed" in doc["ranks"]
    back = planned_placement(doc)
    assert back.slots == p.slots and back.hosts == p.hosts


def test_script_over_max_script_size_is_refused():
    """A script Slurm would refuse is an error before anything is written."""
    h100 = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    layout = Layout(tp=8, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", range(8)), ("gpu02", range(8))], layout)
    req = SbatchRequest.from_plan(h100, p, layout, COMMAND,
                                  inventory_path=str(EXAMPLES / "h100-4node-2leaf.yaml"))
    size = len(req.render().encode())
    with pytest.raises(SlurmtopoError, match=r"over Slurm's max_script_size \(0\.0 MiB"):
        dataclasses.replace(req, max_script_bytes=size - 1).render()
    assert dataclasses.replace(req, max_script_bytes=size).render()


def test_big_embedded_inventory_is_left_out(tmp_path, monkeypatch):
    """An embedded inventory over EMBED_INVENTORY_BYTES is left out when
    the plan names the inventory's path (with a note); the start-time step
    then reads the path, and says so when it cannot."""
    from slurmtopo.binding.step import load_inventory_for_bind
    from slurmtopo.sbatch import script as script_mod

    inv_path = EXAMPLES / "h100-4node-2leaf.yaml"
    h100 = api.load_cluster(str(inv_path))
    layout = Layout(tp=8).resolved()
    p = fill_placement(h100, [("gpu01", range(8))], layout)
    kept = SbatchRequest.from_plan(h100, p, layout, COMMAND, inventory_path=str(inv_path))
    assert read_plan(kept.plan_json)["inventory"] and not kept.notes
    monkeypatch.setattr(script_mod, "EMBED_INVENTORY_BYTES", 100)
    req = SbatchRequest.from_plan(h100, p, layout, COMMAND, inventory_path=str(inv_path))
    doc = read_plan(req.plan_json)
    assert doc["inventory"] is None
    assert any(n.startswith("the inventory is not embedded in the script")
               and str(inv_path) in n for n in req.notes), req.notes
    assert planned_placement(doc).slots == p.slots
    log = []
    assert load_inventory_for_bind(doc, None, log).nodes.keys() == h100.nodes.keys()
    with pytest.raises(SlurmtopoError, match="embeds no inventory and none could be read"):
        load_inventory_for_bind(dict(doc, inventory_path=str(tmp_path / "gone.yaml")), None, [])
    # without a path to read, the copy stays whatever its size
    anon = SbatchRequest.from_plan(h100, p, layout, COMMAND)
    assert read_plan(anon.plan_json)["inventory"]
