"""``slurmtopo inventory compile``: a directory of node reports as one file.

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

from slurmtopo.commands.cliutil import Messages, emit_json, guard, json_option
from slurmtopo.commands.helpgroup import SentenceGroup


@click.group("inventory", cls=SentenceGroup,
             context_settings={"help_option_names": ["-h", "--help"]})
def command():
    """Compile a directory of node reports into one inventory file."""


@command.command("compile")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Also write the whole inventory to this file (JSON; the previous one is "
                   "kept as a .bak).")
@json_option
@guard
def compile_command(directory, output, as_json):
    """Fold a directory of node reports into one compact inventory."""
    from slurmtopo import api

    msgs = Messages(as_json)
    done = api.compile_inventory(directory, output, echo=msgs.echo)
    if as_json:
        emit_json({"directory": directory, "nodes": len(done.inventory.nodes),
                   "node_types": list(done.node_types), "summary": done.summary,
                   "output": output, "written": bool(output), "bytes": done.size,
                   "messages": msgs.messages})
