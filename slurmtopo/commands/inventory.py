"""``slurmtopo inventory compile``: a directory of node reports as one file.

    slurmtopo inventory compile /shared/slurmtopo/reports
    slurmtopo inventory compile /shared/slurmtopo/reports -o /shared/slurmtopo/cluster.json

Without ``-o`` it brings the directory's compiled form up to date (what
``--inventory DIR`` reads; see :mod:`slurmtopo.compiled`); with ``-o`` it
also writes the whole inventory (reports folded into node types, fabric and
all) as one JSON document that ``--inventory FILE`` reads on its own.
"""
from __future__ import annotations

import os

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
    from slurmtopo.compiled import describe, dumps_compiled
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.fileio import atomic_write
    from slurmtopo.inventory import compile_report_dir

    if not os.path.isdir(directory):
        raise SlurmtopoError("not a directory", directory)
    msgs = Messages(as_json)
    doc, inv, log = compile_report_dir(directory)
    for line in log:
        msgs.echo(line)
    summary = describe(doc, inv)
    msgs.echo(summary)
    size = None
    if output:
        text = dumps_compiled(doc)
        atomic_write(output, text, backup=True)
        size = len(text.encode())
        msgs.echo(f"wrote {output} ({len(text):,} bytes)")
    if as_json:
        emit_json({"directory": directory, "nodes": len(inv.nodes),
                   "node_types": sorted(doc.get("node_types") or {}), "summary": summary,
                   "output": output, "written": bool(output), "bytes": size,
                   "messages": msgs.messages})
