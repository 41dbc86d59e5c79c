"""The parallel-layout options shared by ``groups``, ``plan`` and ``sbatch``.

One definition, so the three commands read a layout the same way.
"""
from __future__ import annotations

import click

#: option names the decorator adds (the keyword arguments it passes on)
LAYOUT_PARAMS = ("tp", "cp", "ep", "pp", "dp", "expert_tp", "world", "order", "convention")


def layout_options(func):
    """Add --tp --cp --ep --pp --dp --expert-tp --world --order --convention."""
    options = [
        click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel size."),
        click.option("--cp", type=int, default=1, show_default=True, help="Context-parallel size."),
        click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel size."),
        click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel size."),
        click.option("--dp", type=int, default=None,
                     help="Data-parallel size (default: from --world)."),
        click.option("--expert-tp", "expert_tp", type=int, default=None,
                     help="Expert tensor-parallel size (default: --tp)."),
        click.option("--world", type=int, default=None,
                     help="Total ranks (default: tp*cp*pp*dp)."),
        click.option("--order", default=None,
                     help="Rank order. megatron: first name fastest (default tp-cp-ep-dp-pp); "
                          "torch: last name fastest (default pp-dp-ep-cp-tp)."),
        click.option("--convention", type=click.Choice(["megatron", "torch"]), default="megatron",
                     show_default=True, help="How to read --order."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def layout_from(tp=1, cp=1, ep=1, pp=1, dp=None, expert_tp=None, world=None, order=None,
                convention=None, **_ignored):
    """The resolved Layout for these option values (raises LayoutError)."""
    from slurmtopo.groups import DEFAULT_ORDER, Layout

    convention = convention or "megatron"
    return Layout(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, expert_tp=expert_tp,
                  order=DEFAULT_ORDER[convention] if order is None else order,
                  world=world, convention=convention).resolved()
