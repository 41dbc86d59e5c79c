"""``slurmtopo nccl-topo``: write an NCCL topology file per node type.

    slurmtopo nccl-topo --inventory cluster.yaml --output-dir /shared/slurmtopo/nccl-topo

Each file is what NCCL reads from ``NCCL_TOPO_FILE`` (docs/nccl-topo.md):
the node type's PCI tree, NUMA nodes, GPUs with their NVLinks and NICs.
Every file is read back and any relation that did not survive is printed
as a warning. Files are replaced atomically, all or none, the old one kept
as a backup. The directory is checked as every ``--output-dir`` is
(:func:`slurmtopo.rundirs.write_output_files`): an existing one must be the
user's and writable by nobody else, no link is followed, files go through
its descriptor; they are for every user's jobs, so 0644 in directories
made 0755.
"""
from __future__ import annotations

import os
from typing import List

import click

from slurmtopo.errors import SlurmtopoError
from slurmtopo.model import Hardware


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
    from slurmtopo import __version__, safedir
    from slurmtopo.inventory import fold_hostlist, load_inventory
    from slurmtopo.nccl_topo import render, topo_files
    from slurmtopo.rundirs import open_output_dir

    inv = load_inventory(inventory_path)
    files = topo_files(inv, types, virtualised_only)
    if not files:
        raise SlurmtopoError("no node type to write (none is marked virtualised)"
                             if virtualised_only else "no node type to write", inventory_path)
    rendered = []
    for f in files:  # every file is rendered before any is written
        title = (f"NCCL topology for node type {f.name}, written by slurmtopo {__version__} "
                 f"(slurmtopo nccl-topo); use with NCCL_TOPO_FILE")
        try:
            rendered.append((f, render(f.hardware, title, nvlink=nvlink)))
        except SlurmtopoError as exc:
            raise SlurmtopoError(f"node type {f.name}: {exc.message} (or leave the type out: "
                                 "--type, --virtualised-only)", inventory_path) from None
    with open_output_dir(output_dir, published=True) as where:
        changed = [(f"{f.name}.xml", done.text) for f, done in rendered
                   if not _same(where, f"{f.name}.xml", done.text)]
        backups = safedir.write_files([(where, name, text) for name, text in changed],
                                      mode=safedir.PUBLISHED_FILE, backup=True)
        paths = {f.name: where.child(f"{f.name}.xml") for f, _ in rendered}
    report = []
    for f, done in rendered:
        path, name = paths[f.name], f"{f.name}.xml"
        backup = backups.get(name)
        kept = os.path.join(os.path.dirname(path), backup) if backup else None
        warnings = check_written(f.hardware, done.text, path)
        report.append({"node_type": f.name, "path": path, "nodes": fold_hostlist(f.nodes),
                       "node_count": len(f.nodes), "changed": name in backups,
                       "backup": kept, "notes": list(done.notes), "warnings": warnings})
        if as_json:
            continue
        nodes = f"{len(f.nodes)} node(s): {fold_hostlist(f.nodes)}"
        if name not in backups:
            click.echo(f"unchanged {path} for {nodes}")
        else:
            click.echo(f"wrote {path} for {nodes}"
                       + (f" (previous kept as {kept})" if kept else ""))
        for note in done.notes:
            click.echo(f"slurmtopo nccl-topo: {f.name}: note: {note}", err=True)
        for diff in warnings:
            click.echo(f"slurmtopo nccl-topo: {f.name}: warning: {diff}", err=True)
    if as_json:
        from slurmtopo.commands.cliutil import emit_json

        emit_json({"output_dir": output_dir, "files": report})


def _same(where, name: str, text: str) -> bool:
    from slurmtopo.rundirs import read_file_at

    try:
        return read_file_at(where, name) == text
    except SlurmtopoError:  # not a regular file of the user's: it gets replaced
        return False


def check_written(hw: Hardware, text: str, where: str) -> List[str]:
    """Read ``text`` back and list every relation that differs from ``hw``
    (PHB, which NCCL's format cannot say, comes back as NODE)."""
    from slurmtopo.agent.nccl_xml import parse_nccl_xml
    from slurmtopo.agent.sysfs import canonical_pci

    back = parse_nccl_xml(text, where).node.hardware if any(
        g.pci_bus_id for g in hw.gpus) else None
    if back is None:
        return []
    pos = {canonical_pci(g.pci_bus_id): g.index for g in back.gpus}
    mine = {g.index: pos.get(canonical_pci(g.pci_bus_id)) for g in hw.gpus if g.pci_bus_id}
    nics = {n.name: n for n in back.nics}
    out: List[str] = []
    for a, pa in mine.items():
        for b, pb in mine.items():
            if a < b and pa is not None and pb is not None and hw.links[a][b] != back.links[pa][pb]:
                out.append(f"GPU{a}-GPU{b} is {hw.links[a][b]} but reads back as "
                           f"{back.links[pa][pb]}")
        for n in hw.compute_nics():
            m = nics.get(n.name)
            if m is not None and pa is not None and n.gpu_relation and \
                    n.gpu_relation[a] != m.gpu_relation[pa]:
                out.append(f"GPU{a}-{n.name} is {n.gpu_relation[a]} but reads back as "
                           f"{m.gpu_relation[pa]}")
    return out
