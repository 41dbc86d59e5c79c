"""``slurmtopo show JOBID``: the planned and the actual rank map of a job.

    slurmtopo show 4242            # queued, running or finished
    slurmtopo show 4242 --json

The *planned* rank map is the plan embedded in the job's batch script: the
copy ``slurmtopo sbatch`` kept in the job's run directory
(``<submit dir>/.slurmtopo/runs/<jobid>/job.sbatch``, the submit directory
being Slurm's WorkDir of the job while Slurm knows it, else the current
directory; read through :func:`slurmtopo.files.rundirs.read_run_file`, since
others may write the submit directory), else the script
Slurm still holds (``scontrol write batch_script``, through the Slurm
backend). The *actual* one is what ``slurmtopo bind`` wrote at start
(``rankmap.json`` in the run directory); a queued job has none yet. Slurm
is asked for the job's state when it still knows the job.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any, Dict, List, Optional

import click
from rich.console import Console
from rich.text import Text

# through the package, so that a fake backend patched into slurmtopo.slurm reaches it
from slurmtopo import slurm as backends
from slurmtopo.binding.replan import moved_ranks, moved_slots
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.boundedjson import loads
from slurmtopo.files.rundirs import SCRIPT_NAME, read_run_file, run_dir_for
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.plan.plandoc import (check_against_inventory, embedded_inventory_of,
                                    layout_from_doc, planned_placement, read_plan)
from slurmtopo.plan.rankmap import placement_from_dict, rankmap_dict
from slurmtopo.sbatch.script import extract_plan
from slurmtopo.show.preview import grid
from slurmtopo.show.termsafe import printable


#: nesting of a rank map (document, ranks, rank, its lists)
RANKMAP_DEPTH = 8


def _read(run_dir: str, name: str, notes: List[str]) -> Optional[str]:
    """``name`` in the run directory, read safely (:func:`slurmtopo.files.rundirs.
    read_run_file`); a refusal is a note."""
    try:
        return read_run_file(run_dir, name)
    except SlurmtopoError as exc:
        notes.append(f"not read: {exc.render()}")
        return None


def script_run_dir(script: str) -> Optional[str]:
    """The run directory a script fixes (``--run-dir`` at submit time), or
    None when it uses the default under the submit directory."""
    m = re.search(r"^SLURMTOPO_RUN_DIR=\$\{SLURMTOPO_RUN_DIR:-(.*)\}$", script, re.M)
    if not m or "$" in m.group(1):
        return None

    try:
        words = shlex.split(m.group(1))
    except ValueError:
        return None
    return words[0] if len(words) == 1 else None


def gather(job_id: int, run_dir: Optional[str], backend, submit_dir: str) -> Dict[str, Any]:
    """Everything known about the job's rank maps (see module doc)."""
    notes: List[str] = []
    job = None
    if backend is not None:
        try:
            job = backend.job(job_id)
        except SlurmtopoError as exc:
            notes.append(f"Slurm not asked about the job: {exc.render()}")
    work_dir = job.work_dir if job is not None else None
    accounted = getattr(backend, "accounted_work_dir", None)
    if job is None and run_dir is None and accounted is not None:
        try:  # forgotten by slurmctld: accounting may still know it
            work_dir = accounted(job_id)
        except SlurmtopoError as exc:
            notes.append(f"accounting not asked about the job: {exc.render()}")
    if work_dir and os.path.isabs(work_dir):
        submit_dir = work_dir  # Slurm's WorkDir: the submit directory, from anywhere
    where = run_dir or run_dir_for(submit_dir, job_id)
    script = _read(where, SCRIPT_NAME, notes)
    script_from = os.path.join(where, SCRIPT_NAME) if script is not None else None
    if script is None and backend is not None and hasattr(backend, "batch_script"):
        try:
            script = backend.batch_script(job_id)
            script_from = "scontrol write batch_script" if script is not None else None
        except SlurmtopoError as exc:
            notes.append(f"no batch script from Slurm: {exc.render()}")
    if script is not None and run_dir is None:
        fixed = script_run_dir(script)
        if fixed:
            where = fixed
    planned = actual = None
    if script is not None:
        text = extract_plan(script)
        if text is None:
            raise SlurmtopoError(f"job {job_id}: its batch script ({script_from}) carries no "
                                 "slurmtopo plan; was it submitted with slurmtopo?")
        doc = read_plan(text, f"job {job_id} plan")
        placement = planned_placement(doc)
        inv = embedded_inventory_of(doc, f"job {job_id} plan")
        if inv is not None:
            check_against_inventory(placement, inv, f"job {job_id} plan")
        planned = (placement, doc)
    actual_text = _read(where, "rankmap.json", notes)
    if actual_text is not None:
        try:
            adoc = loads(actual_text, RANKMAP_DEPTH)
            actual = (placement_from_dict(adoc, os.path.join(where, "rankmap.json")), adoc)
        except (ValueError, SlurmtopoError) as exc:
            notes.append(f"{where}/rankmap.json unreadable: {exc}")
    if planned is None and actual is None:
        raise SlurmtopoError(f"job {job_id}: no plan found (no {SCRIPT_NAME} or rankmap.json in "
                             f"{where}, and Slurm has no batch script for it); Slurm no longer "
                             "knows its submit directory: run `slurmtopo show` from there or "
                             "give --run-dir")
    return {"job": job, "run_dir": where, "script_from": script_from, "planned": planned,
            "actual": actual, "notes": notes}


def _to_json(job_id: int, g: Dict[str, Any]) -> Dict[str, Any]:
    job = g["job"]
    out: Dict[str, Any] = {
        "job_id": job_id, "state": job.state if job is not None else None,
        "nodes": list(job.nodes) if job is not None else None, "run_dir": g["run_dir"],
        "script": g["script_from"], "planned": None, "actual": None, "notes": g["notes"]}
    if g["planned"] is not None:
        p, doc = g["planned"]
        out["planned"] = rankmap_dict(p, layout_from_doc(doc))
        out["launcher"] = (doc.get("launch") or {}).get("launcher", "srun")
    if g["actual"] is not None:
        a, adoc = g["actual"]
        out["actual"] = adoc
        out["replanned"] = bool(adoc.get("replanned"))
        if g["planned"] is not None:
            # every moved rank, as data (the text view shortens the list)
            out["moved"] = [{"rank": p.rank, "from": {"host": p.host, "gpu": p.gpu},
                             "to": {"host": q.host, "gpu": q.gpu}}
                            for p, q in moved_slots(g["planned"][0], a)]
    return out


@click.command("show", context_settings={"help_option_names": ["-h", "--help"]},
               short_help="Show a job's planned and actual rank map.")
@click.argument("job_id", type=click.IntRange(min=1), metavar="JOBID")
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="The job's run directory (default: <submit dir>/.slurmtopo/runs/JOBID, "
                   "the submit dir being the job's WorkDir while Slurm knows the job, else "
                   "the current directory).")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm", "none"]),
              help="How to ask Slurm for the job's state and script ('none': do not).")
@click.option("--color-by", default=None, help="Group kind to colour the grid by.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: state, planned and actual rank maps, moved ranks.")
def command(job_id, run_dir, backend_name, color_by, as_json):
    """Show the planned and the actual rank map of a queued, running or
    finished job submitted with `slurmtopo sbatch`."""
    backend = None
    if backend_name != "none":
        try:
            backend = backends.get_backend(backend_name)
        except SlurmtopoError:
            backend = None
    g = gather(job_id, run_dir, backend, os.getcwd())
    if as_json:
        click.echo(json.dumps(_to_json(job_id, g), separators=(",", ":")))
        return
    con = Console(soft_wrap=False)
    job = g["job"]
    # Slurm's reason, the run directory, host names and notes may hold what
    # someone else chose: every one escaped, never read as markup (termsafe)
    state = (f"{job.state}" + (f" on {fold_hostlist(job.nodes)}" if job.nodes else "")
             + (f" ({job.reason})" if job.reason and job.state == "PENDING" else "")
             if job is not None else "not known to Slurm (finished long ago?)")
    con.print(Text(printable(f"Job {job_id}: {state}"), style="bold"))
    con.print(Text(printable(f"run directory: {g['run_dir']}")))
    if g["planned"] is not None:
        p, doc = g["planned"]
        con.print(Text(printable(f"Planned at submit time ({g['script_from']}): {p.world_size} "
                                 f"ranks on {fold_hostlist(p.hosts)}"), style="bold"))
        con.print(grid(p, None, color_by))
    if g["actual"] is not None:
        a, adoc = g["actual"]
        how = "re-planned on Slurm's allocation" if adoc.get("replanned") else "as planned"
        con.print(Text(printable(f"Actual, from slurmtopo bind at start ({how}): "
                                 f"{a.world_size} ranks on {fold_hostlist(a.hosts)}"),
                       style="bold"))
        con.print(grid(a, None, color_by))
        if g["planned"] is not None and adoc.get("replanned"):
            for line in moved_ranks(g["planned"][0], a):
                con.print(Text(printable(f"  {line}")))
    else:
        con.print("Actual: not started yet (slurmtopo bind writes rankmap.json when the job "
                  "starts)")
    for n in g["notes"]:
        con.print(Text(printable(f"note: {n}")))
