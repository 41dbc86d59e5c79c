"""The console a report command prints its tables on (``simulate``,
``audit``): rich, never soft-wrapping, and 132 columns wide into a file or
a pipe so that every column is there whatever ``$COLUMNS`` says (on a
terminal, its width: the tables fall back to one block per row,
slurmtopo.show.tablefit)."""
from __future__ import annotations

from rich.console import Console


def report_console():
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console.width = 132
    return console
