"""Tables that never cut a number, in rich: a table where the terminal is
wide enough, records where it is not (a block of ``label  value`` lines a
row, or for a grid of short cells a row a line).

Rich fits a table of ``no_wrap`` columns to a narrow terminal by cutting
cells with an ellipsis ("1.2 …"), which turns a step time into a wrong one.
:class:`Fitted` lays the table out against the width it is given and, when
it does not fit, prints the same cells as records, where each line is
short and a value is never cut (at worst a long value wraps between
words, "27.8 ms" staying whole).

:class:`FittedSheet` (the plan preview's tables, ``slurmtopo.show.sheet``)
measures the cells once, by :meth:`Sheet.layout`, to decide, and gives
rich the widths as fixed column widths where every rich version lays a
fixed width out alike (:func:`rich_table`); ``slurmtopo.show.plainout`` lays the same sheet
out without rich, byte for byte the same where there are no colours.
:class:`Fitted` does the same for a rich table built elsewhere (the audit
report's), measured by rich.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Union

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from slurmtopo.show.sheet import Line, Sheet, block_lines


def rich_line(ln: Line) -> Text:
    """A :class:`Line` as rich text (never parsed as markup); a whole one
    neither wrapped nor cut (printed by :func:`print_parts`, which does
    not crop)."""
    if len(ln.spans) == 1 and not ln.spans[0][1]:
        text = Text(ln.spans[0][0], style=ln.style)
    else:
        text = Text.assemble(*ln.spans, style=ln.style)
    if ln.whole:
        text.no_wrap, text.overflow = True, "ignore"
    return text


def rich_table(sheet: Sheet, widths: List[int]) -> Table:
    """The sheet as a rich table, its columns ``widths`` wide."""
    if sheet.compact:
        t = Table(title=sheet.title or None, title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 1), collapse_padding=True, pad_edge=False)
    else:
        t = Table(title=sheet.title or None, title_justify="left")
    if sheet.caption:
        t.caption = sheet.caption
        t.caption_justify = "left"
    for col, w in zip(sheet.columns, widths):
        # fixed widths spare rich its own pass over the cells, but rich
        # before 15 adds the edge padding that pad_edge=False leaves out to
        # a fixed width (rich issue 3892): the compact table is measured by
        # rich, once, as it renders
        t.add_column(col.header, justify=col.justify, no_wrap=True, style=col.style or None,
                     width=None if sheet.compact else w)
    for i, (row, style) in enumerate(zip(sheet.rows, sheet.row_styles)):
        t.add_row(*(rich_line(c) for c in row), style=style or None)
        if i in sheet.sections:
            t.add_section()
    return t


class FittedSheet:
    """``sheet`` as a table where it fits, else as its records."""

    def __init__(self, sheet: Sheet):
        self.sheet = sheet
        sheet.record_labels()  # refuse labels that do not match the columns now
        self.widths, self.width = sheet.layout(cell_len)

    def fits(self, width: int) -> bool:
        """Does the table fit ``width`` columns with every cell whole?"""
        return self.width <= width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.fits(options.max_width):
            yield rich_table(self.sheet, self.widths)
        else:
            yield from self.records(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width).clamp(max_width=options.max_width)

    def records(self, width: int) -> Iterator[Text]:
        """The records at ``width`` columns, as rich text."""
        for ln in self.sheet.records(width, cell_len, self.widths):
            yield rich_line(ln)


def rich_parts(parts: Sequence[Union[Line, Sheet]]) -> Group:
    """Lines and sheets, one after the other, as one rich renderable."""
    return Group(*(rich_line(p) if isinstance(p, Line) else FittedSheet(p) for p in parts))


def print_parts(console: Console, parts: Sequence[Union[Line, Sheet]]) -> None:
    """Print the parts on ``console``, not cropped to its width: every
    other line is laid out within it, a whole :class:`Line` goes past it
    (the terminal folds it on screen; copied, it is one line)."""
    console.print(rich_parts(parts), crop=False)


#: a width no table reaches, to measure one unwrapped
UNBOUNDED = 1 << 16


def _plain(cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


class Fitted:
    """``table`` as is where it fits, else one block per row: the first
    column's cell as the heading, then the other columns' non-empty cells
    under ``labels`` (default: the column headers; give labels where two
    headers are the same word, like the plan's and the naive "time")."""

    def __init__(self, table: Table, labels: Optional[Sequence[str]] = None):
        self.table = table
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
        columns = [[_plain(x) for x in c.cells] for c in t.columns]
        rows = [list(r) for r in zip(*columns)]
        for ln in block_lines(self.labels, rows):
            yield rich_line(ln)
        if t.caption:
            yield Text(_plain(t.caption), style="table.caption")
