"""``slurmtopo sbatch``: plan a job on the live cluster and submit it.

    slurmtopo sbatch --inventory cluster.yaml --tp 8 --dp 4 -- python train.py --lr 3e-4

Takes the same planning options as ``slurmtopo plan``; the cluster state
defaults to what Slurm says right now (``--state FILE`` plans against a
snapshot instead). The batch script is the one ``slurmtopo plan`` writes
(plan embedded, ``slurmtopo bind`` at start, one srun), submitted with
``sbatch --parsable`` through the Slurm backend (:mod:`slurmtopo.slurm`):
the script goes to sbatch's stdin and the command's words are shell-quoted
inside it, so nothing the user typed is ever run by a shell at submit time.

sbatch's own options mean what they mean to sbatch (``-p -t -J -A -o -e
-q -C -d -w -x``, ``--wrap``; those the plan sets are refused with the
reason: :mod:`slurmtopo.commands.sbatch_options`). Reading Slurm's state and
submitting (with the run directory kept for ``slurmtopo show``) are the
API's (:func:`slurmtopo.api.live_state`, :func:`slurmtopo.api.submit`); this
module parses and prints.

``--dry-run`` prints the preview (grid, cost table, warnings) on stderr and
the script on stdout, submits nothing and writes nothing. ``--daemon`` submits
it held and tagged for the placement daemon
(:func:`slurmtopo.daemon.submit.submit_for_daemon`). A Slurm refusal
(bad partition, too many GPUs) is printed as Slurm's own message on one
line, exit code 4.
"""
from __future__ import annotations

import json
import os
from typing import List

import click

from slurmtopo import api
from slurmtopo.commands.job_options import (LIVE_STATES, LazyBackend, check_color_by,
                                            command_from, job_options, load_job_cluster,
                                            script_options_from, spec_from, state_for,
                                            state_options, with_live_topology)
from slurmtopo.commands.numbers import FiniteFloat
from slurmtopo.commands.preview_print import print_parts
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.rundirs import write_output_files
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.sbatch import sanitize_job_name
from slurmtopo.show.preview import plan_parts


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
         as_json, keep_runs, color_by, cmd, **o):
    cmd = command_from(o, cmd)
    if not cmd:
        raise SlurmtopoError("no command to run: give it after --, e.g. "
                             "`slurmtopo sbatch --inventory inv.yaml --tp 8 -- python train.py`, "
                             "or with --wrap")
    if parsable and as_json:
        raise SlurmtopoError("--parsable and --json each say how to print the job id: "
                             "give one")
    if dry_run and output_dir:
        raise SlurmtopoError("--dry-run writes nothing: drop --output-dir (`slurmtopo plan "
                             "--state live --output-dir DIR` writes the files of this plan)")
    if o.get("job_name") is not None:
        sanitize_job_name(o["job_name"])
    inv, topo_notes = load_job_cluster(o, write_cache=not dry_run)
    backend = LazyBackend(backend_name)
    inv, topo_notes = with_live_topology(inv, topo_notes, state_path, backend, o)
    live = state_for(inv, state_path, backend, o.get("partition"))
    if state_path in LIVE_STATES and not o.get("slurm_version"):
        o = dict(o, slurm_version=api.segment_release(inv, backend.get))
    spec = spec_from(o, parse_wait(wait), cmd)
    job = api.prepare(inv, live.state, spec, cmd,
                      script_options_from(o, os.path.abspath(o["inventory_path"]), run_dir),
                      with_costs=dry_run and not as_json, queue=True, for_daemon=daemon,
                      partition_members=live.partition_members,
                      features=live.features or None)
    check_color_by(color_by, job.placement)
    memory = api.memory_check(job, o.get("memory_check") or "error")  # before it is submitted
    notes: List[str] = [*topo_notes, *job.notes,
                        *api.submission_notes(job, held=daemon, spool=spool)]
    if memory is not None:
        notes.append("warning: " + memory)
    summary = (f"planned {job.placement.world_size} rank(s) on {len(job.placement.hosts)} "
               f"node(s) {fold_hostlist(job.placement.hosts)} against {live.source}")
    if dry_run:
        _print_dry_run(job, inv, color_by, as_json, notes + [summary])
        return
    if output_dir:
        write_output_files(output_dir, [("job.sbatch", job.script_text),
                                        ("rankmap.json", job.documents.rankmap_json)])
    done = api.submit(job, backend.get(), held=daemon, spool=spool, submit_dir=os.getcwd(),
                      keep_days=keep_runs)
    _print_submitted(job, done, parsable, as_json, notes + list(done.notes) + [summary])


def _print_dry_run(job, inv, color_by, as_json, notes: List[str]) -> None:
    """The dry run's output: one JSON object, else the preview and notes on
    stderr and the script on stdout."""
    if as_json:
        click.echo(json.dumps({"job_id": None, "dry_run": True, "script": job.script_text,
                               "directives": job.script.directives(),
                               "hosts": list(job.placement.hosts),
                               "notes": notes}, separators=(",", ":")))
        return
    _preview(job, inv, color_by)
    click.echo(job.script_text, nl=False)
    for n in notes + ["dry run: nothing submitted, nothing written"]:
        click.echo(f"slurmtopo: {n}", err=True)


def _print_submitted(job, done, parsable, as_json, notes: List[str]) -> None:
    """What sbatch prints for a submitted job (its id), the notes on stderr;
    or one JSON object."""
    if as_json:
        click.echo(json.dumps({"job_id": done.job_id, "daemon": done.held,
                               "hosts": list(job.placement.hosts), "run_dir": done.run_dir,
                               "script": done.script_path,
                               "rankmap": job.documents.rankmap,
                               "notes": notes}, separators=(",", ":")))
        return
    for n in notes:
        click.echo(f"slurmtopo: {n}", err=True)
    click.echo(str(done.job_id) if parsable else
               f"Submitted batch job {done.job_id}" + (" (held for the placement daemon)"
                                                        if done.held else ""))


def _preview(job, inv, color_by) -> None:
    """The plan's preview (grid, cost table, warnings) on stderr, so that
    stdout stays the script; the notes follow it, one line each."""
    costs = job.costs
    print_parts(plan_parts(
        job.placement, inv, job.request.layout, costs.plan if costs else None,
        costs.naive if costs else None, job.state, color_by, (), job.script,
        bound=costs.bound if costs else None, idle_bound=costs.idle_bound if costs else None,
        framework=job.spec.framework_groups), stderr=True)


@click.command("sbatch", context_settings={"help_option_names": ["-h", "--help"]})
@job_options
@state_options("live")
@click.option("--dry-run", is_flag=True,
              help="Print the preview (grid, costs, warnings; on stderr) and the batch script "
                   "(on stdout); submit nothing, write nothing.")
@click.option("--color-by", default=None,
              help="With --dry-run: group kind to colour the grid by.")
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
@click.option("--keep-runs", type=FiniteFloat(min=0), default=14, show_default=True,
              metavar="DAYS",
              help="Remove run directories under <submit dir>/.slurmtopo/runs untouched for "
                   "this many days (0: keep all).")
@click.option("--output-dir", default=None, type=click.Path(file_okay=False),
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
