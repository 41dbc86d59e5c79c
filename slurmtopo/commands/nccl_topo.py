"""``slurmtopo nccl-topo``: write an NCCL topology file per node type.

    slurmtopo nccl-topo --inventory cluster.yaml --output-dir /shared/slurmtopo/nccl-topo

Each file is what NCCL reads from ``NCCL_TOPO_FILE`` (docs/nccl-topo.md):
the node type's PCI tree, NUMA nodes, GPUs with their NVLinks and NICs.
Every file is read back and any relation that did not survive is printed
as a warning. Files are replaced atomically, all or none, the old one kept
as a backup. The directory is checked as every ``--output-dir`` is
(:func:`slurmtopo.files.rundirs.write_output_files`): an existing one must be the
user's and writable by nobody else, no link is followed, files go through
its descriptor; they are for every user's jobs, so 0644 in directories
made 0755. The work is :func:`slurmtopo.api.nccl_topology_files`'s; the
command prints what it did.
"""
from __future__ import annotations

import click

from slurmtopo import api
from slurmtopo.commands.cliutil import emit_json
from slurmtopo.inventory.hostlist import fold_hostlist


@click.command("nccl-topo")
@click.option("--inventory", "-i", "inventory_path", metavar="PATH", required=True,
              help="Inventory file or directory of node reports.")
@click.option("--output-dir", "-o", required=True, type=click.Path(file_okay=False),
              help="Where <node type>.xml is written (created if missing).")
@click.option("--type", "types", multiple=True,
              help="Only this node type (repeatable; default: every type in the inventory).")
@click.option("--virtualised-only", is_flag=True,
              help="Only node types marked virtualised (those jobs get NCCL_TOPO_FILE).")
@click.option("--nvlink/--no-nvlink", default=True, show_default=True,
              help="Write the GPUs' NVLinks; without, NCCL reads NVLink from NVML.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (each file: node type, path, nodes, whether it "
                   "changed, backup, notes, warnings) instead of the lines.")
def command(inventory_path, output_dir, types, virtualised_only, nvlink, as_json):
    """Write NCCL topology files (NCCL_TOPO_FILE) for the inventory's node types."""
    files = api.nccl_topology_files(inventory_path, output_dir, types=types,
                                    virtualised_only=virtualised_only, nvlink=nvlink)
    if as_json:
        emit_json({"output_dir": output_dir, "files": [
            {"node_type": f.node_type, "path": f.path, "nodes": fold_hostlist(f.nodes),
             "node_count": len(f.nodes), "changed": f.changed, "backup": f.backup,
             "notes": list(f.notes), "warnings": list(f.warnings)} for f in files]})
        return
    for f in files:
        nodes = f"{len(f.nodes)} node(s): {fold_hostlist(f.nodes)}"
        if not f.changed:
            click.echo(f"unchanged {f.path} for {nodes}")
        else:
            click.echo(f"wrote {f.path} for {nodes}"
                       + (f" (previous kept as {f.backup})" if f.backup else ""))
        for note in f.notes:
            click.echo(f"slurmtopo nccl-topo: {f.node_type}: note: {note}", err=True)
        for diff in f.warnings:
            click.echo(f"slurmtopo nccl-topo: {f.node_type}: warning: {diff}", err=True)
