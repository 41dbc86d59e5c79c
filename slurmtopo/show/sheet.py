"""The preview's parts as plain data: styled lines and tables (pure, no rich).

The preview (``slurmtopo.show.preview``) says *what* to show once, here; two
renderers say *how*: ``slurmtopo.show.tablefit`` turns a part into rich
renderables (a terminal: colours), ``slurmtopo.show.plainout`` writes the same
bytes rich would into a file or a pipe without importing rich (a sixth of
a small plan's fixed cost was rich's import and render). Styles are rich
style names; the plain renderer ignores them, as rich does without a
colour system.

The column widths of a table are measured here, once, from its plain
text: both renderers lay the table out with them (rich is handed them as
fixed column widths, so it does not measure the cells again).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, FrozenSet, List, Optional, Sequence, Tuple

#: one run of text in one style ("" for none)
Span = Tuple[str, str]


@dataclass(frozen=True)
class Line:
    """A line of text: its spans, and a style over all of them (rich's
    ``Text.assemble(*spans, style=style)``). ``whole``: a command to copy
    and paste (the advisor's ready ``plan`` lines), printed on one line
    whatever the width: a line broken inside a command would paste as two
    commands."""
    spans: Tuple[Span, ...]
    style: str = ""
    whole: bool = False

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.spans)


def line(text: str, style: str = "", whole: bool = False) -> Line:
    """One run of text in one style (``whole``: never wrapped, :class:`Line`)."""
    return Line(((text, ""),), style, whole)


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"   # "left" or "right"
    style: str = ""


@dataclass
class Sheet:
    """A table: rich's default box with a title and caption
    (``compact=False``: the rank grid), or the cost table's header-rule
    box without edge padding (``compact=True``). Where the terminal is too
    narrow for it, the renderers print its cells as records instead
    (``inline``: the header once, then a row a line, columns aligned and
    split into chunks that fit; else a block per row under ``labels``)."""
    title: str
    columns: List[Column]
    rows: List[Tuple[Line, ...]] = field(default_factory=list)
    caption: str = ""
    row_styles: List[str] = field(default_factory=list)
    #: rows after which a rule is drawn (rich's ``add_section``)
    sections: FrozenSet[int] = frozenset()
    compact: bool = False
    labels: Optional[Sequence[str]] = None
    inline: bool = False

    def add_row(self, *cells: Line, style: str = "") -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(tuple(cells))
        self.row_styles.append(style)

    def record_labels(self) -> List[str]:
        heads = [c.header for c in self.columns]
        if self.labels is not None and len(self.labels) != len(heads):
            raise ValueError(f"{len(self.labels)} labels for {len(heads)} columns")
        return list(self.labels) if self.labels is not None else heads

    def paddings(self) -> List[Tuple[int, int]]:
        """Each column's (left, right) padding as rich pads it: one space
        each side; compact tables collapse padding between columns and
        leave none at the edges."""
        n = len(self.columns)
        if not self.compact:
            return [(1, 1)] * n
        return [(0, 0 if i == n - 1 else 1) for i in range(n)]

    def content_widths(self, cell_len: Callable[[str], int]) -> List[int]:
        """The widest header or cell of each column (terminal cells): the
        one measurement both renderers lay the table out with."""
        widths = [cell_len(c.header) for c in self.columns]
        for row in self.rows:
            for i, cell in enumerate(row):
                w = cell_len(cell.plain)
                if w > widths[i]:
                    widths[i] = w
        return widths

    def layout(self, cell_len: Callable[[str], int]) -> Tuple[List[int], int]:
        """The content widths (:meth:`content_widths`), and the table's
        width with padding and box: it fits a terminal of at least that
        many columns."""
        content = self.content_widths(cell_len)
        pads = self.paddings()
        cols = [max(w + left + right, 1) for w, (left, right) in zip(content, pads)]
        box = len(self.columns) - 1 + 2 if self.columns else 0
        return content, sum(cols) + box

    def chunks(self, width: int, content: Sequence[int]) -> List[List[int]]:
        """For the inline records: the columns after the leading ones (the
        host, and its leaf when shown) in chunks whose lines fit ``width``,
        each printed with the leading columns again (``content``: the
        columns' widths, :meth:`content_widths`)."""
        lead = self.lead_columns()
        base = sum(content[:lead]) + max(lead - 1, 0)
        out: List[List[int]] = []
        cur: List[int] = []
        used = base
        for i in range(lead, len(content)):
            need = content[i] + 1
            if cur and used + need > width:
                out.append(cur)
                cur, used = [], base
            cur.append(i)
            used += need
        if cur or not out:
            out.append(cur)
        return out

    def lead_columns(self) -> int:
        """The columns of names at the left (left-justified), repeated in
        every chunk of the inline records."""
        n = 0
        for c in self.columns:
            if c.justify != "left":
                break
            n += 1
        return max(n, 1)

    def inline_lines(self, width: int, cell_len: Callable[[str], int],
                     content: Sequence[int]) -> List[Line]:
        """The inline records: per chunk of columns, the headers, then a
        line a row, every column padded to its widest cell (numbers to the
        right), so the columns line up at any terminal width."""
        lead = self.lead_columns()
        labels = self.record_labels()
        out: List[Line] = []

        def pad(text: str, i: int) -> str:
            gap = " " * (content[i] - cell_len(text))
            return text + gap if self.columns[i].justify == "left" else gap + text

        for chunk in self.chunks(width, content):
            cols = list(range(lead)) + chunk
            out.append(line(" ".join(pad(labels[i], i) for i in cols), "table.header"))
            for row in self.rows:
                spans: List[Span] = []
                for k, i in enumerate(cols):
                    cell = row[i]
                    text = cell.plain
                    gap = " " * (content[i] - cell_len(text))
                    if k:
                        spans.append((" ", ""))
                    if gap and self.columns[i].justify != "left":
                        spans.append((gap, ""))
                    spans.append((text, _joined(cell)))
                    if gap and self.columns[i].justify == "left":
                        spans.append((gap, ""))
                out.append(Line(tuple(spans)))
        return out

    def block_lines(self) -> List[Line]:
        """A block per row (:func:`block_lines`)."""
        return block_lines(self.record_labels(), [[c.plain for c in row] for row in self.rows])

    def records(self, width: int, cell_len: Callable[[str], int],
                content: Sequence[int]) -> List[Line]:
        """The table as lines, for a terminal too narrow for it: title,
        the rows (inline or as blocks), caption (``content``: the columns'
        widths, :meth:`content_widths`, measured once by the caller)."""
        out: List[Line] = []
        if self.title:
            out.append(line(self.title, "table.title"))
        out.extend(self.inline_lines(width, cell_len, content) if self.inline
                   else self.block_lines())
        if self.caption:
            out.append(line(self.caption, "table.caption"))
        return out


def block_lines(labels: Sequence[str], rows: Sequence[Sequence[str]]) -> List[Line]:
    """A block per row: the first cell as its heading, then the other
    non-empty cells under their labels (``labels[1:]``), aligned."""
    width = max((len(label) for label in labels[1:]), default=0)
    out: List[Line] = []
    for row in rows:
        out.append(line(row[0], "bold"))
        for label, cell in zip(labels[1:], row[1:]):
            value = cell.strip()
            if value:
                out.append(Line((("  ", ""), (label.ljust(width), "dim"), ("  ", ""),
                                 (value, ""))))
    return out


def _joined(cell: Line) -> str:
    """A cell's style as one rich style string (its spans share it)."""
    styles = [s for s in [cell.style] + [st for _, st in cell.spans] if s]
    return " ".join(styles)
