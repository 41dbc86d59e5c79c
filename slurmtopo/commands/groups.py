"""``slurmtopo groups``: print the parallel groups of a layout."""
from __future__ import annotations

import json

import click

from slurmtopo.groups import DEFAULT_ORDER, Layout, build_groups

_SHOWN_GROUPS = 3
_SHOWN_RANKS = 8


def _short(group) -> str:
    if len(group) <= _SHOWN_RANKS:
        return "[" + ", ".join(map(str, group)) + "]"
    head = ", ".join(map(str, group[:_SHOWN_RANKS]))
    return f"[{head}, … +{len(group) - _SHOWN_RANKS}]"


@click.command("groups")
@click.option("--world", type=int, default=None, help="Total ranks (default: tp*cp*pp*dp).")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel size.")
@click.option("--cp", type=int, default=1, show_default=True, help="Context-parallel size.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel size.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel size.")
@click.option("--dp", type=int, default=None, help="Data-parallel size (default: from --world).")
@click.option("--expert-tp", "expert_tp", type=int, default=None,
              help="Expert tensor-parallel size (default: --tp).")
@click.option("--order", default=None,
              help="Rank order. megatron: first name fastest (default tp-cp-ep-dp-pp); "
                   "torch: last name fastest (default pp-dp-ep-cp-tp).")
@click.option("--convention", type=click.Choice(["megatron", "torch"]), default="megatron",
              show_default=True, help="How to read --order.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: kind -> groups.")
def command(world, tp, cp, ep, pp, dp, expert_tp, order, convention, as_json):
    """Show which ranks form each tensor/context/expert/pipeline/data group."""
    layout = Layout(
        tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, expert_tp=expert_tp,
        order=DEFAULT_ORDER[convention] if order is None else order,
        world=world, convention=convention,
    ).resolved()
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
