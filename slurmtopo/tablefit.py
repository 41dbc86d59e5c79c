"""Tables that never cut a number: a rich table where the terminal is wide
enough, one block of ``label  value`` lines per row where it is not.

Rich fits a table of ``no_wrap`` columns to a narrow terminal by cutting
cells with an ellipsis ("1.2 …"), which turns a step time into a wrong one.
:class:`Fitted` measures the table against the width it is given and, when
its narrowest rendering does not fit, prints the same cells vertically,
where each line is short and a value is never cut (at worst a long value
wraps between words, "27.8 ms" staying whole).
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


#: a width no table reaches, to measure one unwrapped
UNBOUNDED = 1 << 16


def _plain(cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


class Fitted:
    """``table`` as is where it fits, else one block per row: the first
    column's cell as the heading, then the other columns' non-empty cells
    under ``labels`` (default: the column headers; give labels where two
    headers are the same word, like the plan's and the naive "time")."""

    def __init__(self, table: Table, labels: Optional[Sequence[str]] = None,
                 inline: bool = False):
        self.table = table
        #: a row a line (the headers once, then each row's cells, styles
        #: kept, wrapping between cells) for tables of many short cells
        self.inline = inline
        heads = [_plain(c.header) for c in table.columns]
        if labels is not None and len(labels) != len(heads):
            raise ValueError(f"{len(labels)} labels for {len(heads)} columns")
        self.labels = list(labels) if labels is not None else heads

    def fits(self, console: Console, width: int) -> bool:
        """Does the table fit ``width`` columns with every cell whole? Its
        width unwrapped: rich's minimum is the width at which it starts
        cutting ``no_wrap`` cells, too narrow for that."""
        unbounded = console.options.update_width(UNBOUNDED)  # Measurement.get clamps to it
        return Measurement.get(console, unbounded, self.table).maximum <= width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.fits(console, options.max_width):
            yield self.table
        else:
            yield from self.records()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table).clamp(max_width=options.max_width)

    def records(self) -> Iterator[Text]:
        """The vertical layout: title, a block per row, caption."""
        t = self.table
        if t.title:
            yield Text(_plain(t.title), style="table.title")
        columns = [list(c.cells) for c in t.columns]
        rows = len(columns[0]) if columns else 0
        if self.inline:
            yield Text(" ".join(self.labels), style="table.header")
            for i in range(rows):
                cells = [c[i] if isinstance(c[i], Text) else Text(str(c[i])) for c in columns]
                yield Text(" ").join(x for x in cells if x.plain.strip())
            if t.caption:
                yield Text(_plain(t.caption), style="table.caption")
            return
        width = max((len(label) for label in self.labels[1:]), default=0)
        for i in range(rows):
            yield Text(_plain(columns[0][i]), style="bold")
            for label, cells in zip(self.labels[1:], columns[1:]):
                value = _plain(cells[i]).strip()
                if value:
                    yield Text.assemble("  ", (label.ljust(width), "dim"), "  ", value)
        if t.caption:
            yield Text(_plain(t.caption), style="table.caption")
