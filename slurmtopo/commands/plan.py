"""``slurmtopo plan``: place a job, preview it, write rank map and script.

    slurmtopo plan --inventory etc/examples/h100-4node-2leaf.yaml \\
        --tp 8 --pp 2 --dp 2 --output-dir /tmp/plan -- python train.py

Writes into ``--output-dir`` (default ``./slurmtopo-plan``): ``rankmap.json``,
``rankmap.csv``, ``env.json`` (the per-rank environment as planned) and,
when a command follows ``--``, ``job.sbatch``. Prints the rich preview, or
with ``--json`` one JSON object (rank map + cost comparison) and nothing else.
"""
from __future__ import annotations

import json
import os
from dataclasses import fields
from typing import Dict, List, Optional, Sequence

import click

from slurmtopo.commands.layout_options import layout_from, layout_options
from slurmtopo.errors import SlurmtopoError

DEFAULT_OUTPUT_DIR = "slurmtopo-plan"


def parse_message_bytes(items: Sequence[str]) -> Dict[str, int]:
    """``dp=1GiB`` items -> {kind: bytes} (units as the cost model reads them)."""
    from slurmtopo.cost import parse_bytes

    out: Dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SlurmtopoError(f"--message-bytes {item!r}: expected KIND=SIZE, e.g. dp=256MiB")
        try:
            out[key.strip()] = parse_bytes(value)
        except ValueError as exc:
            raise SlurmtopoError(f"--message-bytes {item!r}: bad size ({exc})") from None
    return out


def build_request(layout, require: Sequence[str], prefer: Sequence[str],
                  gpus_per_node: Optional[int], exclusive: bool, nodelist: Optional[str],
                  exclude: Optional[str], message_bytes: Dict[str, int]):
    """A JobRequest from CLI values (fields this version lacks are left out)."""
    from slurmtopo.request import JobRequest

    req_c, pref_c = JobRequest.parse_constraints(list(require), list(prefer))
    names = {f.name for f in fields(JobRequest)}
    kw = dict(layout=layout, require=req_c, prefer=pref_c, gpus_per_node=gpus_per_node,
              exclusive=exclusive, nodelist=nodelist, exclude=exclude,
              message_bytes=message_bytes)
    return JobRequest(**{k: v for k, v in kw.items() if k in names})


def launch_from(launcher="srun", torchrun_cmd="torchrun", container_image=None,
                container_mounts=None, container_workdir=None, apptainer_image=None, **_ignored):
    """The Launch for these option values (shared with ``slurmtopo sbatch``)."""
    from slurmtopo.sbatch.launch import Launch

    return Launch(launcher=launcher, torchrun=torchrun_cmd, container_image=container_image,
                  container_mounts=container_mounts, container_workdir=container_workdir,
                  apptainer=apptainer_image)


@click.command("plan", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--inventory", "inventory_path", required=True,
              help="Inventory file or directory of node reports.")
@click.option("--state", "state_path", default=None,
              help="Cluster-state snapshot: busy nodes and GPUs to place around.")
@layout_options
@click.option("--require", multiple=True, metavar="KIND=LEVEL",
              help="Hard constraint, e.g. tp=node (repeatable).")
@click.option("--prefer", multiple=True, metavar="KIND=LEVEL",
              help="Soft preference, e.g. dp=leaf (repeatable).")
@click.option("--gpus-per-node", type=int, default=None,
              help="Use this many GPUs of every node (default: as the plan needs).")
@click.option("--exclusive", is_flag=True, help="Whole nodes only; adds #SBATCH --exclusive.")
@click.option("--nodelist", default=None, help="Only these nodes (hostlist); passed to sbatch.")
@click.option("--exclude", default=None, help="Never these nodes (hostlist); passed to sbatch.")
@click.option("--message-bytes", multiple=True, metavar="KIND=SIZE",
              help="Bytes per collective for the cost model, e.g. dp=1GiB (repeatable).")
@click.option("--job-name", default=None, help="#SBATCH --job-name.")
@click.option("--partition", default=None, help="#SBATCH --partition.")
@click.option("--time", "time_limit", default=None, help="#SBATCH --time.")
@click.option("--account", default=None, help="#SBATCH --account.")
@click.option("--sbatch", "extra_sbatch", multiple=True, metavar="OPTION",
              help="Extra #SBATCH option, e.g. --sbatch=--qos=high (repeatable).")
@click.option("--switch-wait", default=None,
              help="Max wait for the --switches request (Slurm time; default 5:00; 0 = "
                   "no wait limit given).")
@click.option("--topology-request", type=click.Choice(["auto", "tree", "block", "none"]),
              default="auto", show_default=True,
              help="Ask Slurm for --switches (tree), --segment (block) or nothing.")
@click.option("--cgroup-devices", type=click.Choice(["auto", "yes", "no"]), default="auto",
              show_default=True, help="Does a device cgroup renumber GPUs? (start-time step)")
@click.option("--master-port", type=click.IntRange(1, 65535), default=None,
              help="MASTER_PORT (default: 20000 + job id % 10000).")
@click.option("--socket-ifname", default=None,
              help="NCCL_SOCKET_IFNAME (default: the compute NICs' netdevs, else ^lo,docker).")
@click.option("--python", "python", default="python3", show_default=True,
              help="Python with slurmtopo installed, on the first node of the job (it runs "
                   "the start-time step; the other nodes need only /bin/sh).")
@click.option("--launcher", type=click.Choice(["srun", "torchrun"]), default="srun",
              show_default=True,
              help="srun: one task per rank. torchrun: one torchrun per node (--nnodes, "
                   "--nproc-per-node, --node-rank in plan order; the plan must be "
                   "node-contiguous).")
@click.option("--torchrun", "torchrun_cmd", default="torchrun", show_default=True,
              help="The torchrun command on the compute nodes (--launcher torchrun).")
@click.option("--container-image", default=None,
              help="Run the ranks in this container through pyxis/enroot (srun "
                   "--container-image).")
@click.option("--container-mounts", default=None,
              help="pyxis --container-mounts, e.g. /data:/data (needs --container-image).")
@click.option("--container-workdir", default=None,
              help="pyxis --container-workdir (needs --container-image).")
@click.option("--apptainer", "apptainer_image", default=None, metavar="IMAGE",
              help="Run the command as `apptainer exec --nv IMAGE ...`.")
@click.option("--color-by", default=None, help="Group kind to colour the grid by.")
@click.option("--output-dir", "-o", default=DEFAULT_OUTPUT_DIR, show_default=True,
              type=click.Path(file_okay=False), help="Where to write the files.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the rank map and cost comparison as JSON instead of the preview.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(inventory_path, state_path, tp, cp, ep, pp, dp, expert_tp, world, order, convention,
            require, prefer, gpus_per_node, exclusive, nodelist, exclude, message_bytes,
            job_name, partition, time_limit, account, extra_sbatch, switch_wait,
            topology_request, cgroup_devices, master_port, socket_ifname, python, launcher,
            torchrun_cmd, container_image, container_mounts, container_workdir,
            apptainer_image, color_by, output_dir, as_json, cmd):
    """Place a job on the cluster, preview it, write the rank map and script.

    Give the training command after `--`; without one, everything but the
    batch script is written.
    """
    from slurmtopo.inventory import load_inventory
    from slurmtopo.model import ClusterState
    from slurmtopo.rankmap import dumps_rankmap, env_document, rankmap_csv, rankmap_dict
    from slurmtopo.sbatch import SbatchRequest, sanitize_job_name
    from slurmtopo.sbatch.script import DEFAULT_SWITCH_WAIT

    # cheap checks first: a bad job name should not wait for the planner
    if job_name is not None:
        sanitize_job_name(job_name)
    inv = load_inventory(inventory_path)
    state = ClusterState()
    if state_path:
        from slurmtopo.state import load_state
        state = load_state(state_path, inv)
    layout = layout_from(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, expert_tp=expert_tp, world=world,
                         order=order, convention=convention)
    mbytes = parse_message_bytes(message_bytes)
    wait = DEFAULT_SWITCH_WAIT if switch_wait is None else (None if switch_wait in ("0", "")
                                                           else switch_wait)
    req = build_request(layout, require, prefer, gpus_per_node, exclusive, nodelist, exclude,
                        mbytes)

    from slurmtopo.errors import PlacementError
    from slurmtopo.placement import naive_plan, plan

    placement = plan(inv, state, req)
    notes: List[str] = []
    try:
        naive = naive_plan(inv, state, req)
    except PlacementError as exc:
        naive = None
        notes.append(f"no naive placement to compare with: {exc.render()}")
    plan_cost = naive_cost = None
    from slurmtopo.cost import CostParams, evaluate
    params = CostParams.from_inventory(inv)
    plan_cost = evaluate(inv, placement, req, params)
    if naive is not None:
        naive_cost = evaluate(inv, naive, req, params)

    script = None
    if cmd:
        script = SbatchRequest.from_plan(
            inv, placement, layout, cmd, req, job_name=job_name, partition=partition,
            time=time_limit, account=account, exclusive=exclusive, topology=topology_request,
            switch_wait=wait, extra=extra_sbatch, python=python, cgroup_devices=cgroup_devices,
            inventory_path=inventory_path, master_port=master_port, socket_ifname=socket_ifname,
            launch=launch_from(launcher=launcher, torchrun_cmd=torchrun_cmd,
                               container_image=container_image,
                               container_mounts=container_mounts,
                               container_workdir=container_workdir,
                               apptainer_image=apptainer_image))
        script_text = script.render()  # validates before anything is written
        notes.extend(script.notes)
    else:
        notes.append("no command after --: job.sbatch not written "
                     "(e.g. `slurmtopo plan ... -- python train.py`)")

    from slurmtopo.fileio import Output, ensure_dir, write_all

    ensure_dir(output_dir)
    rm = rankmap_dict(placement, layout)
    env_json = dumps_rankmap(env_document(placement, inv,
                                          master_port or "20000 + SLURM_JOB_ID % 10000",
                                          socket_ifname))
    outputs = {"rank map": Output(os.path.join(output_dir, "rankmap.json"), dumps_rankmap(rm)),
               "CSV": Output(os.path.join(output_dir, "rankmap.csv"), rankmap_csv(placement)),
               "per-rank environment": Output(os.path.join(output_dir, "env.json"), env_json)}
    if script is not None:
        outputs["batch script"] = Output(os.path.join(output_dir, "job.sbatch"), script_text,
                                         mode=0o755)
    write_all(list(outputs.values()))  # all four or none: they describe one plan
    files = {what: out.path for what, out in outputs.items()}

    from slurmtopo.preview import render_plan, report_dict

    if as_json:
        out = {"rankmap": rm,
               "cost": {"plan": report_dict(plan_cost), "naive": report_dict(naive_cost)},
               "sbatch": {"directives": script.directives()} if script is not None else None,
               "files": files, "notes": notes}
        click.echo(json.dumps(out, separators=(",", ":")))
        return
    from rich.console import Console

    Console(soft_wrap=False).print(render_plan(
        placement, inv, layout, plan_cost, naive_cost, state, color_by, notes, script,
        files))
