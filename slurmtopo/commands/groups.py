"""``slurmtopo groups``: print the parallel groups of a layout."""
from __future__ import annotations

import json

import click

from slurmtopo.commands.layout_options import layout_from, layout_options
from slurmtopo.groups import build_groups

_SHOWN_GROUPS = 3
_SHOWN_RANKS = 8


def _short(group) -> str:
    if len(group) <= _SHOWN_RANKS:
        return "[" + ", ".join(map(str, group)) + "]"
    head = ", ".join(map(str, group[:_SHOWN_RANKS]))
    return f"[{head}, … +{len(group) - _SHOWN_RANKS}]"


@click.command("groups")
@layout_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: kind -> groups.")
def command(world, tp, cp, ep, pp, dp, expert_tp, order, convention, as_json):
    """Show which ranks form each tensor/context/expert/pipeline/data group."""
    layout = layout_from(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, expert_tp=expert_tp, world=world,
                         order=order, convention=convention)
    groups = build_groups(layout)
    if as_json:
        click.echo(json.dumps(dict(groups), separators=(",", ":")))
        return

    from rich.console import Console
    from rich.table import Table

    title = (
        f"world={layout.world} tp={layout.tp} cp={layout.cp} ep={layout.ep} "
        f"pp={layout.pp} dp={layout.dp} expert_tp={layout.expert_tp} "
        f"expert_dp={layout.expert_dp} order={layout.order} ({layout.convention})"
    )
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
