"""``slurmtopo state``: the live cluster state as a state snapshot.

    slurmtopo state                          # YAML on stdout
    slurmtopo state --inventory inv.yaml -o state.yaml

Reads Slurm through the backend (``sinfo --json``: node states and flags,
GPUs in use by index) and writes the ``slurmtopo: state`` document that
``slurmtopo plan --state`` reads, so an admin can see what the planner
sees, keep a snapshot for a bug report, or replay it (``--jobs``: with
the running jobs' nodes and GPUs, for ``slurmtopo audit --state``). With ``--inventory``
only inventory nodes are written and inventory nodes Slurm does not know
are written ``down``.
"""
from __future__ import annotations

import datetime as _dt
import json

import click

# through the package, so that a fake backend patched into slurmtopo.slurm reaches it
from slurmtopo import slurm as backends
from slurmtopo.audit.statejobs import jobs_list
from slurmtopo.commands.audit import running_jobs
from slurmtopo.files.fileio import atomic_write
from slurmtopo.files.yamlio import dump_yaml
from slurmtopo.inventory.model import ClusterState
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.inventory.state import state_dict


@click.command("state", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--inventory", "inventory_path", metavar="PATH", default=None,
              help="Only these nodes (and flag inventory nodes unknown to Slurm).")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--output", "-o", default=None, type=click.Path(dir_okay=False),
              help="Write the snapshot here instead of stdout.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of YAML.")
@click.option("--all", "show_all", is_flag=True,
              help="List idle nodes too (by default a node that is idle with no flag is left "
                   "out: the schema reads an absent node as idle and whole).")
@click.option("--jobs", "with_jobs", is_flag=True,
              help="List the running jobs too, with their nodes and GPUs (what `slurmtopo "
                   "audit --state` reads).")
def command(inventory_path, backend_name, output, as_json, show_all, with_jobs):
    """Dump the live Slurm cluster state as a state snapshot."""
    inv = None
    if inventory_path:
        inv = load_inventory(inventory_path)
    backend = backends.get_backend(backend_name)
    state = backend.cluster_state(inv)
    if not show_all:
        state = ClusterState({n: s for n, s in state.nodes.items()
                              if s.state != "idle" or s.flags or s.busy_gpus or s.exclusive},
                             source=state.source)
    doc = state_dict(state)
    if with_jobs:
        doc["jobs"] = jobs_list(running_jobs(backend))
    doc["taken_at"] = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    doc["source"] = f"slurm ({backend.name} backend)"
    text = json.dumps(doc, indent=1) + "\n" if as_json else dump_yaml(doc)
    if output:
        atomic_write(output, text)
        click.echo(f"wrote {output} ({len(doc['nodes'])} node(s))", err=True)
    else:
        click.echo(text, nl=False)
