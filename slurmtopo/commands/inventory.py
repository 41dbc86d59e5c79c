"""``slurmtopo inventory compile``: a directory of node reports as one file;
``slurmtopo inventory synthetic``: a public trace's cluster, or NVL72 racks.

    slurmtopo inventory compile /shared/slurmtopo/reports
    slurmtopo inventory compile /shared/slurmtopo/reports -o /shared/slurmtopo/cluster.json

Without ``-o`` it brings the directory's compiled form up to date (what
``--inventory DIR`` reads; see :mod:`slurmtopo.inventory.compiled`); with ``-o`` it
also writes the whole inventory (reports folded into node types, fabric and
all) as one JSON document that ``--inventory FILE`` reads on its own
(:func:`slurmtopo.api.compile_inventory`; the command prints what it did).
"""
from __future__ import annotations

import click

from slurmtopo import api
from slurmtopo.commands.cliutil import Messages, emit_json, guard, json_option
from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.commands.numbers import FiniteFloat
from slurmtopo.files.fileio import atomic_write
from slurmtopo.inventory.schema import dump_inventory, inventory_dict
from slurmtopo.simulate.clusters import build


@click.group("inventory", cls=SentenceGroup,
             context_settings={"help_option_names": ["-h", "--help"]})
def command():
    """Compile a directory of node reports into one inventory file, or write a synthetic one."""


@command.command("compile")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Also write the whole inventory to this file (JSON; the previous one is "
                   "kept as a .bak).")
@json_option
@guard
def compile_command(directory, output, as_json):
    """Fold a directory of node reports into one compact inventory."""
    msgs = Messages(as_json)
    done = api.compile_inventory(directory, output, echo=msgs.echo)
    if as_json:
        emit_json({"directory": directory, "nodes": len(done.inventory.nodes),
                   "node_types": list(done.node_types), "summary": done.summary,
                   "output": output, "written": bool(output), "bytes": done.size,
                   "messages": msgs.messages})


@command.command("synthetic")
@click.argument("name", type=click.Choice(
    ["philly", "pai-2020", "alibaba-2023", "helios", "acme-seren", "acme-kalos", "nvl72",
     "fat-tree"]))
@click.option("--machines", default=None, metavar="FILE",
              help="The trace's own machine list (Philly's cluster_machine_list, PAI 2020's "
                   "pai_machine_spec.csv, Alibaba 2023's openb_node_list_gpu_node.csv, a "
                   "Helios cluster's cluster_gpu_number.csv).")
@click.option("--nodes", type=click.IntRange(1, 20000), default=None,
              help="Nodes (fat-tree).")
@click.option("--racks", type=click.IntRange(1, 1111), default=None,
              help="GB200 NVL72 racks of 18 trays (nvl72).")
@click.option("--leaf-size", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Hosts under one leaf switch.")
@click.option("--spines", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Spine switches above every leaf.")
@click.option("--oversubscription", type=FiniteFloat(1.0, 64.0), default=1.0,
              show_default=True, help="The leaves' uplinks, X:1 (1: non-blocking).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the inventory here (the previous file kept as a .bak); default: "
                   "standard output.")
@json_option
@guard
def synthetic_command(name, machines, nodes, racks, leaf_size, spines, oversubscription,
                      output, as_json):
    """An inventory of a public trace's cluster at its published size, or of GB200 NVL72
    racks, to replay traces on (docs/simulate.md)."""
    inv = build(name, machines, nodes, racks, leaf_size, spines, oversubscription)
    if output:
        atomic_write(output, dump_inventory(inv), backup=True)
    if as_json:
        doc = {"cluster": name, "nodes": len(inv), "gpus": inv.gpu_count, "output": output,
               "written": bool(output)}
        if not output:
            doc["inventory"] = inventory_dict(inv)
        emit_json(doc)
    elif output:
        click.echo(f"wrote {output}: {len(inv)} nodes, {inv.gpu_count} GPUs", err=True)
    else:
        click.echo(dump_inventory(inv), nl=False)
