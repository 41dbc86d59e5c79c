"""A launcher in the job's command (issue 32): torchrun adopted, checked
against the plan and run once per node; deepspeed, accelerate launch and
torchrun under an explicit srun refused with a command line that works.

The script's run is checked under the fake Slurm of tests/test_binding.py
with a ``/bin/sh`` stand-in for torchrun (tests/test_launchers.py): one
torchrun per node, never per rank, never nested.
"""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.errors import SlurmtopoError
from slurmtopo.plan.launch_detect import (TORCHRUN_FLAGS, TORCHRUN_VALUED, LauncherRefusal, detect,
                                          resolve, suggested_argv, world_of)
from slurmtopo.sbatch.launch import Launch
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
H100 = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")
TOML = str(ROOT / "tests" / "fixtures" / "frameworks" / "train.toml")
DRY = ["sbatch", "--inventory", H100, "--state", "none", "--dry-run"]


def test_the_torchrun_table_is_the_installed_torchs():
    """Every option torch's own parser has is in the table, a flag exactly
    when torch's takes no value (so the script is found where torchrun
    finds it)."""
    run = pytest.importorskip("torch.distributed.run")
    ours = TORCHRUN_FLAGS | TORCHRUN_VALUED
    for action in run.get_args_parser()._actions:
        names = [n for n in action.option_strings if n not in ("-h", "--help")]
        if not names or names == ["--print-completion", "--print_completion"]:
            continue
        canon = names[0]
        assert canon in ours, f"torchrun's {canon} is not in launch_detect's table"
        assert (canon in TORCHRUN_FLAGS) == (action.nargs == 0), canon


@pytest.mark.parametrize("command,family,program,script", [
    (["torchrun", "--nnodes", "2", "--nproc_per_node=8", "train.py", "--lr", "3"],
     "torchrun", ["torchrun"], ["train.py", "--lr", "3"]),
    (["/opt/bin/torchrun", "--standalone", "-m", "pkg.train", "x"],
     "torchrun", ["/opt/bin/torchrun"], ["pkg.train", "x"]),
    (["python3", "-m", "torch.distributed.run", "--nnodes=2", "t.py"],
     "torchrun", ["python3", "-m", "torch.distributed.run"], ["t.py"]),
    (["python", "-u", "-m", "torch.distributed.launch", "--use-env", "t.py"],
     "torchrun", ["python", "-u", "-m", "torch.distributed.launch"], ["t.py"]),
    (["python3.11", "-mtorch.distributed.run", "t.py"],
     "torchrun", ["python3.11", "-mtorch.distributed.run"], ["t.py"]),
    (["deepspeed", "--num_gpus", "8", "--master_port", "1", "train.py", "--deepspeed"],
     "deepspeed", ["deepspeed"], ["train.py", "--deepspeed"]),
    (["accelerate", "launch", "--multi_gpu", "--num-processes", "16", "t.py", "-x"],
     "accelerate", ["accelerate", "launch"], ["t.py", "-x"]),
])
def test_detect(command, family, program, script):
    found = detect(command)
    assert (found.family, list(found.program), list(found.script)) == (family, program, script)


@pytest.mark.parametrize("command", [
    ["python", "train.py"], ["python3", "-m", "torch.distributed.other"], ["train"],
    ["python", "-c", "import torch.distributed.run"], ["accelerate", "config"], [],
    ["/bin/sh", "-c", "python train.py"], ["env", "A=1", "python", "t.py"]])
def test_no_launcher(command):
    assert detect(command) is None
    assert resolve(command, "srun") is None


def test_the_options_are_read_as_torchrun_reads_them():
    found = detect(["torchrun", "--nproc_per_node", "4", "--nnodes=1:4", "-r", "3",
                    "--nproc", "8", "--rdzv-backend", "c10d", "t.py", "--nnodes", "9"])
    # the last value wins; an unambiguous prefix is the option (argparse's
    # abbreviation); the script's own --nnodes is the script's
    assert found.value("--nproc-per-node") == "8"
    assert found.value("--nnodes") == "1:4"
    assert found.script == ("t.py", "--nnodes", "9")
    assert world_of(["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "t.py"]) == 8
    assert world_of(["python3", "-m", "torch.distributed.run", "--nnodes=3",
                     "--nproc-per-node=2", "t.py"]) == 6
    assert world_of(["torchrun", "--nnodes", "1:2", "--nproc-per-node", "4", "t.py"]) is None
    assert world_of(["deepspeed", "--num_nodes", "2", "t.py"]) is None


def test_torchrun_is_adopted_with_its_own_options_kept():
    a = resolve(["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend=c10d",
                 "--rdzv-endpoint", "h:29500", "--max-restarts", "3", "--node_rank", "0",
                 "-m", "pkg.train", "--lr", "3"])
    assert a.program == ("torchrun",)
    assert a.tail == ("--max-restarts", "3", "-m", "pkg.train", "--lr", "3")
    assert a.nnodes == (2, 2) and a.nproc_per_node == 8 and a.world == 16
    assert "it replaced --rdzv-backend=c10d --rdzv-endpoint h:29500 --node_rank 0" in a.notes[0]
    # --launcher torchrun with the command's torchrun: adopted, not nested
    assert resolve(["torchrun", "t.py"], "torchrun") == resolve(["torchrun", "t.py"])
    a = resolve(["torchrun", "--nproc-per-node", "gpu", "t.py"], "torchrun")
    assert a.nproc_per_node is None and a.nnodes is None


@pytest.mark.parametrize("command,launcher,program,message", [
    (["torchrun", "--nnodes", "2", "t.py"], "srun", None, "drop --launcher srun"),
    (["torchrun", "t.py"], "torchrun", "/x/torchrun", "torchrun inside torchrun"),
    (["torchrun", "--nproc-per-node", "cpu", "t.py"], None, None, "one rank per GPU"),
    (["torchrun", "--nnodes", "4:2", "t.py"], None, None, "below the least"),
    (["torchrun", "--nnodes", "0", "t.py"], None, None, "at least 1"),
    (["torchrun", "--nnodes", "2"], None, None, "names no training script"),
    (["deepspeed", "t.py"], None, None, "DeepSpeed reads RANK"),
    (["deepspeed", "t.py"], "torchrun", None, "inside torchrun"),
    (["accelerate", "launch", "t.py"], None, None, "Accelerate reads RANK"),
    (["env", "A=1", "torchrun", "t.py"], None, None, "export the variables (A=1)"),
])
def test_refusals(command, launcher, program, message):
    with pytest.raises(SlurmtopoError) as exc:
        resolve(command, launcher, program)
    assert message in exc.value.render()
    assert "\n" not in exc.value.render()


def test_suggested_argv():
    argv = ["sbatch", "--inventory", "x", "--launcher", "srun", "--launcher=srun",
            "--tp", "2", "--", "deepspeed", "t.py"]
    assert suggested_argv(argv, ("--launcher",), ("--gpus-per-node", "8"), ["python3", "t.py"]) \
        == ["sbatch", "--inventory", "x", "--tp", "2", "--gpus-per-node", "8", "--", "python3",
            "t.py"]
    assert suggested_argv(["plan", "--wrap", "torchrun t.py", "--tp", "2"], ("--wrap",), (),
                          ["torchrun", "t.py"]) == ["plan", "--tp", "2", "--", "torchrun", "t.py"]
    refusal = LauncherRefusal("why", ["python3", "t.py"], drop=("--launcher",))
    assert refusal.render() == "why: use `slurmtopo ... -- python3 t.py`"


#: refused command lines (after the inventory and the dry run), the words of
#: the suggestion after `slurmtopo`, and what the message says
REFUSED = [
    (["--tp", "2", "--world", "16", "--launcher", "srun", "--", "torchrun", "--nnodes", "2",
      "--nproc-per-node", "8", "train.py"],
     ["--tp", "2", "--world", "16", "--", "torchrun", "--nnodes", "2", "--nproc-per-node", "8",
      "train.py"], "a whole torchrun on every rank"),
    (["--tp", "2", "--", "deepspeed", "--num_gpus", "8", "--num_nodes", "2", "train.py",
      "--deepspeed", "--deepspeed_config", "ds.json"],
     ["--tp", "2", "--gpus-per-node", "8", "--", "python3", "train.py", "--deepspeed",
      "--deepspeed_config", "ds.json"], "DeepSpeed reads RANK"),
    (["--tp", "2", "--world", "16", "--", "accelerate", "launch", "--multi_gpu",
      "--num_processes", "16", "--mixed_precision", "bf16", "-m", "pkg.train"],
     ["--tp", "2", "--world", "16", "--", "python3", "-m", "pkg.train"],
     "its own settings (--mixed_precision bf16) go to Accelerator(...)"),
    (["--tp", "2", "--world", "16", "--wrap", "torchrun --nproc-per-node 8 train.py"],
     ["--tp", "2", "--world", "16", "--", "torchrun", "--nproc-per-node", "8", "train.py"],
     "srun runs the line once per rank"),
]


@pytest.mark.parametrize("args,suggested,why", REFUSED)
def test_a_refusal_gives_the_command_that_works(args, suggested, why):
    """One line, exit 2, nothing planned; the command line it gives is the
    user's own with the launcher fixed, and it runs."""
    code, out, err = run_cli(DRY + args)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert why in err
    line = err.split(": use `", 1)[1].rstrip().rstrip("`")
    assert shlex.split(line) == ["slurmtopo", *DRY, *suggested]
    code, out, err = run_cli(shlex.split(line)[1:])
    assert code == 0, err
    assert out.count("torchrun --nnodes") == (1 if "torchrun" in suggested else 0)


def test_the_documented_torchtitan_line_starts_one_torchrun_per_node():
    """docs/frameworks/torchtitan.md (issue 32): the command's torchrun is
    the launcher, once per node, with the plan's numbers; the world size,
    the nodes and the ranks per node are the command's."""
    code, out, err = run_cli(DRY + ["--framework", "torchtitan", "--config", TOML, "--",
                                    "torchrun", "--nnodes", "2", "--nproc-per-node", "4",
                                    "--max-restarts=1", "train.py", "--steps", "3"])
    assert code == 0, err
    assert "#SBATCH --nodes=2" in out and "#SBATCH --gpus-per-node=4" in out
    assert "# launcher: torchrun (one torchrun per node" in out
    assert "the command's own torchrun, its --nnodes and --nproc-per-node checked" in out
    (line,) = [ln for ln in out.splitlines() if ln.lstrip().startswith("torchrun ")]
    assert shlex.split(line) == [
        "torchrun", "--nnodes=$SLURMTOPO_NNODES", "--nproc-per-node=$SLURMTOPO_NPROC_PER_NODE",
        "--node-rank=SLURMTOPO_NODE_RANK", "--master-addr=$MASTER_ADDR",
        "--master-port=$MASTER_PORT", "--max-restarts=1", "train.py", "--steps", "3"]
    assert sum(w.endswith("torchrun") for w in shlex.split(line)) == 1  # never nested
    assert "slurmtopo: the command starts torchrun: slurmtopo runs it once per node" in err


@pytest.mark.parametrize("args,message", [
    (["--tp", "2", "--world", "32", "--", "torchrun", "--nnodes", "2", "--nproc-per-node", "8",
      "t.py"], "starts 2 node(s) x 8 = 16 ranks, the layout has 32"),
    (["--tp", "2", "--gpus-per-node", "4", "--", "torchrun", "--nnodes", "2",
      "--nproc-per-node", "8", "t.py"], "--gpus-per-node 4 and the command's torchrun"),
    (["--tp", "2", "--world", "32", "--", "torchrun", "--nnodes", "1:2", "t.py"],
     "asks for --nnodes 1:2, the plan has 4 node(s)"),
    (["--tp", "2", "--world", "12", "--", "torchrun", "--nproc-per-node", "8", "t.py"],
     "8 rank(s) per node, which does not divide the layout's 12"),
])
def test_the_command_and_the_plan_must_agree(args, message):
    code, out, err = run_cli(DRY + args)
    assert code == 2 and out == "", err
    assert message in err and len(err.splitlines()) == 1, err


def test_megatron_takes_its_world_from_the_command():
    code, out, err = run_cli(DRY + ["--tp", "8", "--", "torchrun", "--nnodes", "2",
                                    "--nproc-per-node", "8", "t.py"])
    assert code == 0, err
    assert "layout: world 16 = tp 8 x cp 1 x pp 1 x dp 2" in out


def test_the_api_adopts_the_commands_torchrun_too():
    """docs/api.md's example: api.prepare with a torchrun command and no
    launcher chosen writes one torchrun per node; a chosen srun refuses."""
    cluster = api.load_cluster(H100)
    request = api.job_request("torchtitan", world=32, dp_replicate=4, dp_shard=-1)
    job = api.prepare(cluster, None, request, ["torchrun", "train.py"], with_costs=False)
    assert job.options.launch.launcher == "torchrun"
    assert "\n    torchrun --nnodes=\"$SLURMTOPO_NNODES\"" in job.script_text
    assert "--no-python" not in job.script_text
    with pytest.raises(LauncherRefusal):
        api.prepare(cluster, None, request, ["torchrun", "train.py"], with_costs=False,
                    options=api.ScriptOptions(launch=Launch(chosen=True)))
    job = api.prepare(cluster, None, api.job_request("megatron", tp=8, world=16),
                      ["torchrun", "--nproc-per-node", "4", "t.py"], with_costs=False)
    assert [len(job.placement.gpus_on(h)) for h in job.placement.hosts] == [4] * 4


def test_the_adopted_torchrun_runs_once_per_node_under_slurm(tmp_path):
    """The batch script under the fake Slurm (tests/test_binding.py), with a
    /bin/sh stand-in for torchrun that records its arguments: two tasks for
    two nodes (not eight), each torchrun with the plan's node rank and
    rendezvous, the user's other option and the script as written."""
    from slurmtopo.binding.replan import fill_placement
    from slurmtopo.job.groups import Layout

    from test_binding import _run_job  # noqa: E402  (tests/ is on sys.path)
    from test_launchers import RECORDER, _records, _script, _task_path

    h100 = api.load_cluster(H100)
    layout = Layout(tp=4, dp=2).resolved()
    alloc = {"gpu01": [4, 5, 6, 7], "gpu02": [1, 3, 5, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    tb = _task_path(tmp_path, torchrun=RECORDER.format(name="torchrun", tail=""))
    script = _script(h100, p, layout, ["torchrun", "--nnodes", "2", "--nproc-per-node", "4",
                                       "--standalone", "--max-restarts", "2", "train.py",
                                       "--lr", "3e-4"])
    proc, _, log = _run_job(tmp_path, script, alloc, False, extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode == 0, proc.stderr
    recs = _records(tmp_path / "out", "torchrun")
    assert sorted(recs) == [0, 1]
    srun = [e for e in log if e["prog"] == "srun" and e["opts"].get("distribution")]
    assert srun[0]["opts"]["ntasks"] == "2"
    for node, d in recs.items():
        assert d["args"] == ["--nnodes=2", "--nproc-per-node=4", f"--node-rank={node}",
                             "--master-addr=gpu01", "--master-port=24242",
                             "--max-restarts", "2", "train.py", "--lr", "3e-4"]


def test_the_documented_refusal_is_printed_as_documented():
    """docs/sbatch.md shows `-- deepspeed ...` refused: that line, run as
    printed (the refusal comes before the inventory is read), prints the
    documented error byte for byte."""
    text = (ROOT / "docs" / "sbatch.md").read_text()
    lines = [ln.strip() for ln in text.splitlines()]
    (i,) = [k for k, ln in enumerate(lines) if ln.startswith("$ slurmtopo sbatch")
            and "-- deepspeed" in ln]
    code, out, err = run_cli(shlex.split(lines[i])[2:])
    assert code == 2 and out == ""
    assert err.rstrip("\n") == lines[i + 1]
