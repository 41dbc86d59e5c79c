"""``slurmtopo bind``: the start-time step of a planned batch job.

Runs on the batch host inside the job (the script ``slurmtopo plan`` wrote
calls it); see :mod:`slurmtopo.binding` for what it decides and docs/sbatch.md
for the whole flow. Logs go to stderr, i.e. into the job's output file.
"""
from __future__ import annotations

import json
import os
import sys

import click

from slurmtopo.binding.step import bind, read_bound, rebind, write_run_dir
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import MAX_TEXT_BYTES, read_text
from slurmtopo.plan.plandoc import read_plan
from slurmtopo.plan.rankmap import rankmap_dict


@click.command("bind")
@click.option("--plan", "plan_path", required=True,
              help="The plan document ('-' = stdin, as the batch script passes it).")
@click.option("--run-dir", required=True, type=click.Path(file_okay=False),
              help="Where to write hostfile, ranktable, rankmap.json and env.sh.")
@click.option("--cgroup-devices", type=click.Choice(["auto", "yes", "no"]), default="auto",
              show_default=True,
              help="Does a device cgroup (ConstrainDevices=yes) renumber GPUs from 0?")
@click.option("--inventory", "inventory_path", metavar="PATH", default=None,
              help="Inventory to use instead of the path recorded in the plan.")
@click.option("--no-probe", is_flag=True,
              help="Never start an srun probe to learn other nodes' GPU indices.")
@click.option("--quiet", "-q", is_flag=True, help="Log only problems.")
@click.option("--json", "as_json", is_flag=True,
              help="Also print one JSON object on stdout: the run directory, files, whether "
                   "it re-planned, the launcher, the rank map that runs.")
@click.option("--print-env", is_flag=True,
              help="Print env.sh's text on stdout, and nothing else there, for the batch "
                   "script to evaluate (so the shell reads no file another user could swap).")
@click.option("--restart", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Restart N of a job with spares (the batch script passes it after its step "
                   "failed): the ranks of lost nodes move to spares of their domain.")
@click.option("--step-exit", type=int, default=None, metavar="CODE",
              help="With --restart: the exit code of the step that failed (for the log).")
def command(plan_path, run_dir, cgroup_devices, inventory_path, no_probe, quiet, as_json,
            print_env, restart, step_exit):
    """Bind a planned job to its real allocation (runs inside the batch job)."""
    if print_env and as_json:
        raise SlurmtopoError("give --print-env or --json, not both (both use stdout)")

    if plan_path == "-":
        text, where = sys.stdin.read(MAX_TEXT_BYTES + 1), "plan (stdin)"
        if len(text) > MAX_TEXT_BYTES:
            raise SlurmtopoError(f"{where}: larger than {MAX_TEXT_BYTES} bytes: refused")
    else:
        text = read_text(plan_path)
        where = plan_path
    doc = read_plan(text, where)
    run_dir = os.path.abspath(run_dir)
    if restart is not None:
        result = _rebind(doc, run_dir, restart, step_exit, cgroup_devices, inventory_path)
    else:
        if step_exit is not None:
            raise SlurmtopoError("--step-exit goes with --restart")
        result = bind(doc, os.environ, cgroup_mode=cgroup_devices,
                      inventory_path=inventory_path, probe=not no_probe, run_dir=run_dir)
    written = write_run_dir(result, run_dir, os.environ)
    paths = written.paths
    if written.note:
        result.log.append(f"note: {written.note}")
    lines = result.log if not quiet else [l for l in result.log
                                          if any(w in l for w in ("differs", "keeping", "unusable", "restart", "lost", "hazard", "requeued"))]
    for line in lines:
        click.echo(f"slurmtopo bind: {line}", err=True)
    if not quiet:
        click.echo(f"slurmtopo bind: wrote {', '.join(os.path.basename(p) for p in paths)} "
                   f"in {run_dir}", err=True)
    if print_env:
        sys.stdout.write(written.env)
        sys.stdout.flush()
    if as_json:
        click.echo(json.dumps({
            "job_id": result.allocation.job_id or None, "run_dir": run_dir, "files": paths,
            "replanned": result.replanned, "cgroup_devices": result.constrained,
            "launcher": result.launcher.name, "log": result.log,
            "rankmap": rankmap_dict(result.placement, result.layout)}, separators=(",", ":")))


def _rebind(doc, run_dir, restart, step_exit, cgroup_devices, inventory_path):
    """The binding of a restart on spares: the placement that ran is the
    run directory's rankmap.json (read back as written: the user's own
    file in the user's own directory)."""
    bound = read_bound(run_dir)
    if bound is None:
        raise SlurmtopoError(f"--restart: {run_dir}/rankmap.json is not there: the step that "
                             "failed was not bound by slurmtopo bind")
    previous = bound[0]
    wait = os.environ.get("SLURMTOPO_LOST_WAIT", "30")
    try:
        seconds = float(wait)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise SlurmtopoError(f"SLURMTOPO_LOST_WAIT={wait!r}: seconds from 0 to 3600")
    return rebind(doc, os.environ, previous, restart, step_exit, cgroup_mode=cgroup_devices,
                  inventory_path=inventory_path, run_dir=run_dir, wait=seconds)
