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

import json
import os
from typing import List, Optional

import click

from slurmtopo.commands.job_options import (job_options, load_job_cluster, request_from,
                                            script_options_from)
from slurmtopo.errors import SlurmtopoError


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


def _live_version(backend) -> Optional[str]:
    """The release the backend's Slurm reports (None: it cannot say)."""
    from slurmtopo.errors import SlurmError

    try:
        text = backend.version() if hasattr(backend, "version") else ""
    except SlurmError:
        return None
    parts = str(text).split(".")
    return text if 2 <= len(parts) <= 3 and all(p.isdigit() for p in parts) else None


def _run(backend_name, state_path, dry_run, daemon, spool, wait, run_dir, output_dir, parsable,
         as_json, keep_runs, cmd, **o):
    from slurmtopo import api
    from slurmtopo.sbatch import sanitize_job_name

    if not cmd:
        raise SlurmtopoError("no command to run: give it after --, e.g. "
                             "`slurmtopo sbatch --inventory inv.yaml --tp 8 -- python train.py`")
    if o.get("job_name") is not None:
        sanitize_job_name(o["job_name"])
    inv, topo_notes = load_job_cluster(o)

    backend = None

    def get_backend():
        nonlocal backend
        if backend is None:
            from slurmtopo.slurm import get_backend as factory
            backend = factory(backend_name)
        return backend

    members = features = None
    if state_path in (None, "live", "slurm"):
        from slurmtopo.slurm.backend import cluster_state_from
        slurm_nodes = get_backend().nodes()
        state = cluster_state_from(slurm_nodes, inv, source=f"slurm:{get_backend().name}")
        state_from = f"live Slurm state ({get_backend().name} backend)"
        features = {n.name: n.features for n in slurm_nodes}
        if o.get("partition"):
            # an unknown partition is Slurm's to refuse, in its own words
            members = [n.name for n in slurm_nodes if o["partition"] in n.partitions] or None
    elif state_path == "none":
        state, state_from = api.load_state_file(inv, None), "no state (every node idle)"
    else:
        state, state_from = api.load_state_file(inv, state_path), state_path

    if state_path in (None, "live", "slurm") and not o.get("slurm_version") and \
            inv.fabric.blocks:
        # the segment options this Slurm has (placement/segments.py)
        o = dict(o, slurm_version=_live_version(get_backend()))
    waits = parse_wait(wait)
    req = request_from(o, waits, cmd)
    job = api.prepare(inv, state, req, cmd,
                      script_options_from(o, os.path.abspath(o["inventory_path"]), run_dir),
                      with_costs=False, queue=True, for_daemon=daemon,
                      partition_members=members,
                      features=features)
    placement, text, layout = job.placement, job.script_text, req.layout
    notes: List[str] = list(topo_notes) + list(job.notes)
    if daemon and any(n.startswith("not now") for n in notes):
        notes.append("the placement daemon releases it when a placement is free")
    if waits and not daemon:
        notes.append("--wait only matters with --daemon (the placement daemon waits; sbatch "
                     "does not)")

    from slurmtopo.hostlist import fold_hostlist
    summary = (f"planned {placement.world_size} rank(s) on {len(placement.hosts)} node(s) "
               f"{fold_hostlist(placement.hosts)} against {state_from}")

    if output_dir:
        _write_files(output_dir, text, placement, layout)

    if dry_run:
        if as_json:
            click.echo(json.dumps({"job_id": None, "dry_run": True, "script": text,
                                   "directives": job.script.directives(),
                                   "hosts": list(placement.hosts),
                                   "notes": notes + [summary]}, separators=(",", ":")))
            return
        click.echo(text, nl=False)
        for n in notes + [summary, "dry run: nothing submitted"]:
            click.echo(f"slurmtopo: {n}", err=True)
        return

    # the run directory's place must be the user's own before the job exists
    # (docs/security.md): a refusal here submits nothing. SLURMTOPO_RUN_DIR
    # travels into the job (sbatch exports the environment) and wins there.
    from slurmtopo.rundirs import check_location
    check_location(run_dir or os.environ.get("SLURMTOPO_RUN_DIR") or None, os.getcwd())
    done = api.submit(job, get_backend(), held=daemon, spool=spool)
    notes.extend(done.notes)
    job_id = done.job_id
    job_dir, script_path = _keep_script(job_id, run_dir, text, keep_runs, notes)
    if as_json:
        from slurmtopo.rankmap import rankmap_dict

        click.echo(json.dumps({"job_id": job_id, "daemon": bool(daemon),
                               "hosts": list(placement.hosts), "run_dir": job_dir,
                               "script": script_path,
                               "rankmap": rankmap_dict(placement, layout),
                               "notes": notes + [summary]}, separators=(",", ":")))
        return
    for n in notes + [summary]:
        click.echo(f"slurmtopo: {n}", err=True)
    click.echo(str(job_id) if parsable else
               f"Submitted batch job {job_id}" + (" (held for the placement daemon)"
                                                   if daemon else ""))


def _keep_script(job_id, run_dir, text, keep_days, notes):
    """Keep the submitted script in the job's run directory (so `slurmtopo
    show` finds the plan after Slurm forgets the job) and remove the run
    directories of old jobs. Returns (run dir, script path or None); a
    failure here is a note, never a failed submission."""
    from slurmtopo.rundirs import clean_old, run_dir_for, save_script

    submit_dir = os.getcwd()
    where = os.path.abspath(run_dir) if run_dir else run_dir_for(submit_dir, job_id)
    path = None
    try:
        path = save_script(where, text)
    except (OSError, SlurmtopoError) as exc:
        notes.append(f"could not keep the script in {where} ({exc}); `slurmtopo show {job_id}` "
                     "will ask Slurm for it")
    try:
        removed = clean_old(submit_dir, keep_days, keep=(str(job_id),))
    except SlurmtopoError as exc:
        removed = []
        notes.append(f"old run directories not removed: {exc.render()}")
    if removed:
        notes.append(f"removed {len(removed)} run director{'y' if len(removed) == 1 else 'ies'} "
                     f"older than {keep_days:g} days from {os.path.dirname(removed[0])}")
    return where, path


def _write_files(output_dir, text, placement, layout) -> None:
    from slurmtopo.fileio import Output, ensure_dir, write_all
    from slurmtopo.rankmap import dumps_rankmap, rankmap_dict

    ensure_dir(output_dir)
    write_all([Output(os.path.join(output_dir, "job.sbatch"), text, mode=0o755),
               Output(os.path.join(output_dir, "rankmap.json"),
                      dumps_rankmap(rankmap_dict(placement, layout)))])


@click.command("sbatch", context_settings={"help_option_names": ["-h", "--help"]})
@job_options
@click.option("--state", "state_path", default=None, metavar="FILE|live|none",
              help="Cluster-state snapshot to plan against (default: live Slurm state; "
                   "'none': every node idle).")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]),
              help="How to talk to Slurm (also $SLURMTOPO_BACKEND).")
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit nothing.")
@click.option("--daemon", is_flag=True,
              help="Submit held, tagged for the placement daemon (it picks the nodes).")
@click.option("--wait", multiple=True, metavar="KIND=SECONDS",
              help="With --daemon: how long the daemon may wait for a --prefer of that kind "
                   "before giving up on it, e.g. dp=600 or dp=10m (repeatable).")
@click.option("--spool", default=None,
              help="The placement daemon's spool directory (for --daemon requests too long "
                   "for a job comment).")
@click.option("--run-dir", default=None,
              help="Where the job's start-time step writes hostfile, env.sh, rankmap.json "
                   "(default: <submit dir>/.slurmtopo/runs/<jobid>).")
@click.option("--keep-runs", type=click.FloatRange(min=0), default=14, show_default=True,
              metavar="DAYS",
              help="Remove run directories under <submit dir>/.slurmtopo/runs untouched for "
                   "this many days (0: keep all).")
@click.option("--output-dir", "-o", default=None, type=click.Path(file_okay=False),
              help="Also write job.sbatch and rankmap.json here.")
@click.option("--parsable", is_flag=True, help="Print only the job id.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (job id, hosts, rank map, run directory, script "
                   "path, notes).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(**kwargs):
    """Plan a job on the live cluster and submit it with sbatch.

    Planning options are those of `slurmtopo plan`; the command follows `--`.
    The cluster state is read from Slurm unless --state names a snapshot.
    Prints `Submitted batch job N` (or N with --parsable).
    """
    _run(**kwargs)
