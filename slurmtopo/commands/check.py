"""``slurmtopo check``: one job's contracts, from inside the job.

The batch script of ``slurmtopo plan/sbatch --check`` runs it as the job's
first step, after ``slurmtopo bind``: a probe step started through the
training step's own launch line prints what every task really gets, and
this command compares it, with what Slurm gave the job (segments,
switches, blocks, node order), against the binding in the run directory.
The rules are ``slurmtopo audit --contracts``'s (docs/audit.md, Contracts).

    srun ... /bin/sh -c "$SNIPPET" slurmtopo-task /bin/sh -c PROBE \\
        | slurmtopo check --run-dir "$SLURMTOPO_RUN_DIR" --tasks -
"""
from __future__ import annotations

import os
import sys

import click

# through the package, so that a fake backend patched into slurmtopo.slurm reaches it
from slurmtopo import slurm as backends
from slurmtopo.api import load_cluster
from slurmtopo.audit.contracts import MAX_TASK_LINES, check_jobs, parse_task_lines
from slurmtopo.binding.step import read_bound
from slurmtopo.commands.audit import job_seen, show_contracts, slurm_view
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_text
from slurmtopo.inventory.model import Fabric, Inventory
from slurmtopo.show.termsafe import printable

#: exit code when a contract is broken and --strict was given
VIOLATED = 3


@click.command("check", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="The job's run directory (default $SLURMTOPO_RUN_DIR): slurmtopo bind's "
                   "rankmap.json there is the plan the tasks are checked against.")
@click.option("--tasks", "tasks_path", default=None, metavar="FILE|-",
              help="The probe's output, one line per task ('-': stdin, as the batch script "
                   "pipes it); without it the tasks are not checked.")
@click.option("--inventory", "inventory_path", default=None, metavar="PATH",
              help="The cluster's inventory, for the blocks and leaves nodes belong to "
                   "(default: only Slurm's view is used).")
@click.option("--job", "job_id", default=None, metavar="ID",
              help="The job (default $SLURM_JOB_ID).")
@click.option("--backend", "backend_name", default="cli", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]),
              help="How to talk to Slurm (inside a job, like slurmtopo bind: its command-line "
                   "tools).")
@click.option("--strict", is_flag=True,
              help=f"Exit {VIOLATED} when a contract is broken (the job stops before "
                   "training).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(run_dir, tasks_path, inventory_path, job_id, backend_name, strict, as_json):
    """Check this job's contracts from inside it: what Slurm gave and what its tasks
    really got, against what it asked and what slurmtopo bound."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id or not str(job_id).isdigit():
        raise SlurmtopoError("no job: run inside a job (SLURM_JOB_ID) or give --job ID")
    run_dir = run_dir or os.environ.get("SLURMTOPO_RUN_DIR")
    planned, nodes = _planned(run_dir)
    tasks = None
    if tasks_path is not None:
        if tasks_path == "-":
            text = "".join(line for _, line in zip(range(MAX_TASK_LINES), sys.stdin))
        else:
            text = read_text(tasks_path)
        tasks = parse_task_lines(text)
    inv, note = _inventory(inventory_path)
    backend = backends.get_backend(backend_name)
    seen = job_seen(backend, int(job_id), nodes, probe=False, tasks=tasks, planned=planned,
                    launch_probe=tasks is not None)
    report = check_jobs(inv, slurm_view(backend), [seen])
    if note:
        click.echo(f"slurmtopo check: {note}", err=True)
    if as_json:
        show_contracts(report, f"job {job_id}", True)
    else:
        _log(report, job_id)
    if strict and report.violations:
        sys.exit(VIOLATED)


def _planned(run_dir):
    """(slurmtopo bind's placement, the job's hosts) from the run
    directory's rankmap.json, or (None, ()) without one."""
    if not run_dir:
        return None, ()
    bound = read_bound(os.path.abspath(run_dir))
    if bound is None:
        return None, ()
    placement, data = bound
    alloc = data.get("allocation")
    hosts = tuple(alloc) if isinstance(alloc, dict) else tuple(placement.hosts)
    return placement, hosts


def _inventory(path):
    """The inventory, else an empty one (then only Slurm's view of blocks
    and switches is used) and a note saying why."""
    if path:
        try:
            return load_cluster(path), None
        except (OSError, SlurmtopoError) as exc:
            why = exc.render() if isinstance(exc, SlurmtopoError) else exc.strerror
            return Inventory(nodes={}, fabric=Fabric()), (
                f"inventory {path} unusable here ({why}): blocks and switches as Slurm "
                "shows them")
    return Inventory(nodes={}, fabric=Fabric()), None


def _log(report, job_id) -> None:
    """The job's log lines: one per violation, then the summary."""
    for v in report.shown():
        click.echo(printable(f"slurmtopo check: job {job_id}: {v.kind}: {v.message}"),
                   err=True)
    counts = report.by_kind()
    total = sum(counts.values())
    click.echo(printable(
        f"slurmtopo check: job {job_id}: "
        + (f"{total} contract violation(s): " + ", ".join(f"{k} {n}" for k, n in counts.items()
                                                          if n)
           if total else "every contract holds")), err=True)
    for why in report.unchecked.get(str(job_id), ()):
        click.echo(printable(f"slurmtopo check: job {job_id}: not checked: {why}"), err=True)
