"""``slurmtopo groups``: print the parallel groups of a layout."""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from slurmtopo.commands.layout_options import (framework_layout_from, framework_options,
                                               layout_options)
from slurmtopo.job.frameworks import registry

_SHOWN_GROUPS = 3
_SHOWN_RANKS = 8


def _short(group) -> str:
    if len(group) <= _SHOWN_RANKS:
        return "[" + ", ".join(map(str, group)) + "]"
    head = ", ".join(map(str, group[:_SHOWN_RANKS]))
    return f"[{head}, … +{len(group) - _SHOWN_RANKS}]"


@click.command("groups")
@layout_options
@framework_options
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: kind (the framework's name) -> groups.")
def command(as_json, **options):
    """Show which ranks form each group kind, as the chosen framework builds them."""
    resolved = framework_layout_from(**options)
    groups = resolved.groups
    if as_json:
        click.echo(json.dumps(dict(groups), separators=(",", ":")))
        return

    title = registry.get(resolved.framework).title(resolved)
    table = Table(title=title, title_justify="left")
    table.add_column("kind")
    table.add_column("groups", justify="right")
    table.add_column("size", justify="right")
    table.add_column("first groups")
    for kind, lists in groups.items():
        shown = ", ".join(_short(g) for g in lists[:_SHOWN_GROUPS])
        if len(lists) > _SHOWN_GROUPS:
            shown += ", …"
        table.add_row(kind, str(len(lists)), str(len(lists[0])), shown)
    Console(soft_wrap=False).print(table)
