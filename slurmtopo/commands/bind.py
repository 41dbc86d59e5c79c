"""``slurmtopo bind``: the start-time step of a planned batch job.

Runs on the batch host inside the job (the script ``slurmtopo plan`` wrote
calls it); see :mod:`slurmtopo.binding` for what it decides and docs/sbatch.md
for the whole flow. Logs go to stderr, i.e. into the job's output file.
"""
from __future__ import annotations

import os
import sys

import click

from slurmtopo.errors import SlurmtopoError


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
def command(plan_path, run_dir, cgroup_devices, inventory_path, no_probe, quiet, as_json,
            print_env):
    """Bind a planned job to its real allocation (runs inside the batch job)."""
    from slurmtopo.binding.step import bind, write_run_dir
    from slurmtopo.plandoc import read_plan

    if print_env and as_json:
        raise SlurmtopoError("give --print-env or --json, not both (both use stdout)")

    if plan_path == "-":
        from slurmtopo.fileio import MAX_TEXT_BYTES

        text, where = sys.stdin.read(MAX_TEXT_BYTES + 1), "plan (stdin)"
        if len(text) > MAX_TEXT_BYTES:
            raise SlurmtopoError(f"{where}: larger than {MAX_TEXT_BYTES} bytes: refused")
    else:
        from slurmtopo.fileio import read_text

        text = read_text(plan_path)
        where = plan_path
    doc = read_plan(text, where)
    run_dir = os.path.abspath(run_dir)
    result = bind(doc, os.environ, cgroup_mode=cgroup_devices, inventory_path=inventory_path,
                  probe=not no_probe, run_dir=run_dir)
    written = write_run_dir(result, run_dir, os.environ)
    paths = written.paths
    if written.note:
        result.log.append(f"note: {written.note}")
    lines = result.log if not quiet else [l for l in result.log
                                          if "differs" in l or "keeping" in l or "unusable" in l]
    for line in lines:
        click.echo(f"slurmtopo bind: {line}", err=True)
    if not quiet:
        click.echo(f"slurmtopo bind: wrote {', '.join(os.path.basename(p) for p in paths)} "
                   f"in {run_dir}", err=True)
    if print_env:
        sys.stdout.write(written.env)
        sys.stdout.flush()
    if as_json:
        import json

        from slurmtopo.rankmap import rankmap_dict

        click.echo(json.dumps({
            "job_id": result.allocation.job_id or None, "run_dir": run_dir, "files": paths,
            "replanned": result.replanned, "cgroup_devices": result.constrained,
            "launcher": result.launcher.name, "log": result.log,
            "rankmap": rankmap_dict(result.placement, result.layout)}, separators=(",", ":")))
