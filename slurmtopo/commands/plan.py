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
from typing import List

import click

from slurmtopo import api
from slurmtopo.commands.job_options import (LIVE_STATES, LazyBackend, check_color_by,
                                            command_from, job_options, load_job_cluster,
                                            script_options_from, spec_from, state_for,
                                            state_options, with_live_topology)
from slurmtopo.commands.preview_print import print_parts
from slurmtopo.cost.step import step_dict
from slurmtopo.files.rundirs import write_output_files
from slurmtopo.sbatch import sanitize_job_name
from slurmtopo.show.preview import bound_warning, plan_parts, report_dict, splits

DEFAULT_OUTPUT_DIR = "slurmtopo-plan"


@click.command("plan", context_settings={"help_option_names": ["-h", "--help"]})
@job_options
@state_options("none")
@click.option("--color-by", default=None, help="Group kind to colour the grid by.")
@click.option("--output-dir", default=DEFAULT_OUTPUT_DIR, show_default=True,
              type=click.Path(file_okay=False), help="Where to write the files.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the rank map and cost comparison as JSON instead of the preview.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(state_path, backend_name, color_by, output_dir, as_json, cmd, **o):
    """Place a job on the cluster, preview it, write the rank map and script.

    Give the training command after `--`; without one, everything but the
    batch script is written.
    """
    cmd = command_from(o, cmd)
    # cheap checks first: a bad job name should not wait for the planner
    if o["job_name"] is not None:
        sanitize_job_name(o["job_name"])
    inv, topo_notes = load_job_cluster(o)
    backend = LazyBackend(backend_name)
    inv, topo_notes = with_live_topology(inv, topo_notes, state_path, backend, o)
    live = state_for(inv, state_path, backend, o.get("partition"))
    state = live.state
    spec = spec_from(o, command=cmd)
    job = api.prepare(inv, state, spec, cmd, script_options_from(o, o["inventory_path"]),
                      queue=state_path in LIVE_STATES,
                      partition_members=live.partition_members,
                      features=live.features or None)
    placement, layout, script = job.placement, job.request.layout, job.script
    framework = spec.framework_groups  # torchtitan's or DeepSpeed's own kind names
    check_color_by(color_by, placement)
    notes: List[str] = list(topo_notes) + list(job.notes)
    # before anything is written: a layout that cannot fit is refused or flagged
    memory = api.memory_check(job, o.get("memory_check") or "warn")
    if not cmd:
        notes.append("no command after --: job.sbatch not written "
                     "(e.g. `slurmtopo plan ... -- python train.py`)")

    docs = job.documents
    outputs = {"rank map": ("rankmap.json", docs.rankmap_json),
               "CSV": ("rankmap.csv", docs.rankmap_csv),
               "per-rank environment": ("env.json", docs.env_json)}
    if script is not None:
        outputs["batch script"] = ("job.sbatch", job.script_text)
    # all four or none (they describe one plan), in a directory only the user can write
    paths = write_output_files(output_dir, list(outputs.values()))
    files = dict(zip(outputs, paths))

    plan_cost, naive_cost = job.costs.plan, job.costs.naive
    bound = job.costs.bound
    if as_json:
        out = {"rankmap": docs.rankmap,
               "cost": {"plan": report_dict(plan_cost), "naive": report_dict(naive_cost),
                        "bound_s": bound.step_time_s if bound is not None else None},
               "sbatch": {"directives": script.directives()} if script is not None else None,
               "files": files, "notes": notes,
               "warnings": [memory] if memory is not None else [],
               # what the preview shows besides the grid and the table
               "splits": splits(placement, inv),
               "far_from_bound": bound_warning(plan_cost, bound, job.costs.idle_bound),
               # the pre-launch hazards found (warnings: an error refused the plan)
               "hazards": [h.as_dict() for h in job.hazards.hazards] if job.hazards else []}
        if plan_cost.step is not None:  # the step every decision priced
            out["step"] = step_dict(plan_cost.step)
        click.echo(json.dumps(out, separators=(",", ":")))
        return
    print_parts(plan_parts(
        placement, inv, layout, plan_cost, naive_cost, state, color_by, notes, script,
        files, bound=bound, idle_bound=job.costs.idle_bound, framework=framework,
        warnings=[memory] if memory is not None else ()))
