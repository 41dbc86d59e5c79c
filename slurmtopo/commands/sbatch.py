"""``slurmtopo sbatch``: plan a job on the live cluster and submit it.

    slurmtopo sbatch --inventory cluster.yaml --tp 8 --dp 4 -- python train.py --lr 3e-4

Takes the same planning options as ``slurmtopo plan``; the cluster state
defaults to what Slurm says right now (``--state FILE`` plans against a
snapshot instead). The batch script is the one ``slurmtopo plan`` writes
(plan embedded, ``slurmtopo bind`` at start, one srun), submitted with
``sbatch --parsable`` through the Slurm backend (:mod:`slurmtopo.slurm`):
the script goes to sbatch's stdin and the command's words are shell-quoted
inside it, so nothing the user typed is ever run by a shell at submit time.

``--dry-run`` prints the script and submits nothing. ``--daemon`` submits
it held and tagged for the placement daemon
(:func:`slurmtopo.daemon.submit.submit_for_daemon`). A Slurm refusal
(bad partition, too many GPUs) is printed as Slurm's own message on one
line, exit code 4.
"""
from __future__ import annotations

import copy
import json
import os
from typing import List

import click

from slurmtopo.errors import SlurmtopoError, PlacementError

#: options shared with ``slurmtopo plan`` (copied from it, so help and
#: defaults stay the same)
PLAN_OPTIONS = ("inventory_path", "tp", "cp", "ep", "pp", "dp", "expert_tp", "world", "order",
                "convention", "require", "prefer", "gpus_per_node", "exclusive", "nodelist",
                "exclude", "message_bytes", "job_name", "partition", "time_limit", "account",
                "extra_sbatch", "switch_wait", "topology_request", "cgroup_devices",
                "master_port", "socket_ifname", "python", "launcher", "torchrun_cmd",
                "container_image", "container_mounts", "container_workdir", "apptainer_image")


def _plan_params() -> List[click.Parameter]:
    from slurmtopo.commands.plan import command as plan_command

    by_name = {p.name: p for p in plan_command.params}
    return [copy.deepcopy(by_name[n]) for n in PLAN_OPTIONS if n in by_name]


def parse_wait(items) -> dict:
    """``dp=600``, ``tp=10m``, ``pp=1h`` -> {kind: seconds}."""
    out = {}
    scale = {"": 1, "s": 1, "m": 60, "h": 3600}
    for item in items or ():
        kind, sep, value = str(item).partition("=")
        value = value.strip().lower()
        unit = value[-1:] if value[-1:] in ("s", "m", "h") else ""
        try:
            seconds = float(value[:len(value) - len(unit)]) * scale[unit]
        except ValueError:
            seconds = -1.0
        if not sep or not kind.strip() or seconds < 0:
            raise SlurmtopoError(f"--wait {item!r}: expected KIND=SECONDS, e.g. dp=600 or dp=10m")
        out[kind.strip()] = seconds
    return out


def _run(backend_name, state_path, dry_run, daemon, spool, wait, run_dir, output_dir, parsable,
         as_json, cmd, **o):
    from slurmtopo.commands.plan import build_request, launch_from, parse_message_bytes
    from slurmtopo.commands.layout_options import layout_from
    from slurmtopo.inventory import load_inventory
    from slurmtopo.placement import plan
    from slurmtopo.sbatch import SbatchRequest, sanitize_job_name
    from slurmtopo.sbatch.script import DEFAULT_SWITCH_WAIT

    if not cmd:
        raise SlurmtopoError("no command to run: give it after --, e.g. "
                             "`slurmtopo sbatch --inventory inv.yaml --tp 8 -- python train.py`")
    if o.get("job_name") is not None:
        sanitize_job_name(o["job_name"])
    inv = load_inventory(o["inventory_path"])

    backend = None

    def get_backend():
        nonlocal backend
        if backend is None:
            from slurmtopo.slurm import get_backend as factory
            backend = factory(backend_name)
        return backend

    if state_path in (None, "live", "slurm"):
        state = get_backend().cluster_state(inv)
        state_from = f"live Slurm state ({get_backend().name} backend)"
    elif state_path == "none":
        from slurmtopo.model import ClusterState
        state, state_from = ClusterState(), "no state (every node idle)"
    else:
        from slurmtopo.state import load_state
        state, state_from = load_state(state_path, inv), state_path

    layout = layout_from(**o)
    req = build_request(layout, o["require"], o["prefer"], o["gpus_per_node"], o["exclusive"],
                        o["nodelist"], o["exclude"], parse_message_bytes(o["message_bytes"]))
    waits = parse_wait(wait)
    if waits:
        import dataclasses
        req = dataclasses.replace(req, wait=waits)
    busy_note = None
    try:
        placement = plan(inv, state, req)
    except PlacementError as exc:
        if not daemon:
            raise
        # The daemon waits for resources; what must hold now is only that the
        # job fits the cluster at all (nodes that are down stay out).
        from slurmtopo.model import ClusterState, NodeState
        idle = ClusterState(nodes={n: NodeState(n, state=st.state, flags=st.flags)
                                   for n, st in state.nodes.items() if not st.usable})
        placement = plan(inv, idle, req)
        busy_note = (f"no placement is free now ({exc.message}); the script is shaped on the "
                     "idle cluster and the placement daemon will release the job when one is")
    sw = o.get("switch_wait")
    wait = DEFAULT_SWITCH_WAIT if sw is None else (None if sw in ("0", "") else sw)
    script = SbatchRequest.from_plan(
        inv, placement, layout, cmd, req, job_name=o["job_name"], partition=o["partition"],
        time=o["time_limit"], account=o["account"], exclusive=o["exclusive"],
        topology=o["topology_request"], switch_wait=wait, extra=o["extra_sbatch"],
        python=o["python"], cgroup_devices=o["cgroup_devices"],
        inventory_path=os.path.abspath(o["inventory_path"]), master_port=o["master_port"],
        socket_ifname=o["socket_ifname"], run_dir=run_dir, launch=launch_from(**o))
    text = script.render()
    notes: List[str] = list(script.notes)
    if busy_note:
        notes.append(busy_note)
    if waits and not daemon:
        notes.append("--wait only matters with --daemon (the placement daemon waits; sbatch "
                     "does not)")

    from slurmtopo.hostlist import fold_hostlist
    summary = (f"planned {placement.world_size} rank(s) on {len(placement.hosts)} node(s) "
               f"{fold_hostlist(placement.hosts)} against {state_from}")

    if output_dir:
        _write_files(output_dir, text, placement, layout, inv, o)

    if dry_run:
        if as_json:
            click.echo(json.dumps({"job_id": None, "dry_run": True, "script": text,
                                   "directives": script.directives(), "hosts": list(placement.hosts),
                                   "notes": notes + [summary]}, separators=(",", ":")))
            return
        click.echo(text, nl=False)
        for n in notes + [summary, "dry run: nothing submitted"]:
            click.echo(f"slurmtopo: {n}", err=True)
        return

    if daemon:
        try:
            from slurmtopo.daemon.submit import submit_for_daemon
        except ImportError as exc:
            raise SlurmtopoError("--daemon needs the placement daemon (slurmtopo.daemon.submit), "
                                 f"which this installation lacks ({exc}); submit without "
                                 "--daemon") from None
        job_id = submit_for_daemon(get_backend(), req, text, o["inventory_path"], spool=spool,
                                   notes=notes)
    else:
        job_id = get_backend().submit(text)
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "daemon": bool(daemon),
                               "hosts": list(placement.hosts), "notes": notes + [summary]},
                              separators=(",", ":")))
        return
    for n in notes + [summary]:
        click.echo(f"slurmtopo: {n}", err=True)
    click.echo(str(job_id) if parsable else
               f"Submitted batch job {job_id}" + (" (held for the placement daemon)"
                                                   if daemon else ""))


def _write_files(output_dir, text, placement, layout, inv, o) -> None:
    from slurmtopo.fileio import Output, ensure_dir, write_all
    from slurmtopo.rankmap import dumps_rankmap, rankmap_dict

    ensure_dir(output_dir)
    write_all([Output(os.path.join(output_dir, "job.sbatch"), text, mode=0o755),
               Output(os.path.join(output_dir, "rankmap.json"),
                      dumps_rankmap(rankmap_dict(placement, layout)))])


def _callback(**kwargs):
    _run(**kwargs)


command = click.Command(
    "sbatch", callback=_callback, context_settings={"help_option_names": ["-h", "--help"]},
    help="""Plan a job on the live cluster and submit it with sbatch.

Planning options are those of `slurmtopo plan`; the command follows `--`.
The cluster state is read from Slurm unless --state names a snapshot.
Prints `Submitted batch job N` (or N with --parsable).""",
    params=_plan_params() + [
        click.Option(["--state", "state_path"], default=None, metavar="FILE|live|none",
                     help="Cluster-state snapshot to plan against (default: live Slurm state; "
                          "'none': every node idle)."),
        click.Option(["--backend", "backend_name"], default="auto", show_default=True,
                     type=click.Choice(["auto", "cli", "pyslurm"]),
                     help="How to talk to Slurm (also $SLURMTOPO_BACKEND)."),
        click.Option(["--dry-run"], is_flag=True,
                     help="Print the batch script; submit nothing."),
        click.Option(["--daemon"], is_flag=True,
                     help="Submit held, tagged for the placement daemon (it picks the nodes)."),
        click.Option(["--wait"], multiple=True, metavar="KIND=SECONDS",
                     help="With --daemon: how long the daemon may wait for a --prefer of that "
                          "kind before giving up on it, e.g. dp=600 or dp=10m (repeatable)."),
        click.Option(["--spool"], default=None,
                     help="The placement daemon's spool directory (for --daemon requests too "
                          "long for a job comment)."),
        click.Option(["--run-dir"], default=None,
                     help="Where the job's start-time step writes hostfile, env.sh, "
                          "rankmap.json (default: <submit dir>/slurmtopo-run-<jobid>)."),
        click.Option(["--output-dir", "-o"], default=None, type=click.Path(file_okay=False),
                     help="Also write job.sbatch and rankmap.json here."),
        click.Option(["--parsable"], is_flag=True, help="Print only the job id."),
        click.Option(["--json", "as_json"], is_flag=True,
                     help="Print one JSON object (job id, hosts, notes)."),
        click.Argument(["cmd"], nargs=-1, type=click.UNPROCESSED),
    ])
