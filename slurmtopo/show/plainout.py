"""The preview into a file or a pipe without rich (pure but for
:func:`plain_width`, which looks at the stream and the environment).

Where there is no terminal, rich prints no colours, and importing and
running it was a sixth of a small plan's fixed cost. This module lays
out :mod:`slurmtopo.show.sheet`'s lines and tables as rich 13-15 does for a
console that is not a terminal, byte for byte: words wrapped as rich's
``divide_line`` wraps them (a word longer than the line folded, trailing
spaces kept up to the width), titles padded to the table's width, boxes
drawn with rich's ``HEAVY_HEAD`` and ``SIMPLE_HEAD`` characters
(tests/test_plainout.py renders every example both ways and compares).

Only text whose every character is one terminal cell wide and the same
in every rich version is laid out here (:func:`narrow`); anything else (a
host name in CJK, combining accents) goes through rich, whose cell-width
tables are its own. So does every console rich would treat differently:
a terminal, ``FORCE_COLOR`` or ``TTY_COMPATIBLE`` set (rich 13 and 15
read them differently), an encoding other
than UTF-8 (rich draws ASCII boxes then), Windows, Jupyter.
"""
from __future__ import annotations

import builtins
import os
import re
import sys
from typing import IO, Iterable, List, Optional, Union

from slurmtopo.show.sheet import Line, Sheet

Part = Union[Line, Sheet]

#: characters one cell wide in every rich version: printable ASCII and the
#: symbols the preview itself writes
_NARROW = re.compile("[\x20-\x7e×·…µ—∞]*\\Z")

#: rich's default box (HEAVY_HEAD) and the cost table's (SIMPLE_HEAD):
#: top, head, head rule, mid, row rule, foot rule, foot, bottom
_HEAVY_HEAD = ("┏━┳┓", "┃ ┃┃", "┡━╇┩", "│ ││", "├─┼┤", "├─┼┤", "│ ││", "└─┴┘")
_SIMPLE_HEAD = ("    ", "    ", " ── ", "    ", "    ", "    ", "    ", "    ")

#: rich's fallback width when there is no terminal to ask
DEFAULT_WIDTH = 80


def narrow(text: str) -> bool:
    """Is every character of ``text`` one cell wide, as rich counts?"""
    return _NARROW.match(text) is not None


def cell_len(text: str) -> int:
    """Terminal cells of :func:`narrow` text: its length."""
    return len(text)


def all_narrow(parts: Iterable[Part]) -> bool:
    """Can :func:`render` lay out every string of ``parts``?"""
    for p in parts:
        if isinstance(p, Line):
            if not narrow(p.plain):
                return False
            continue
        texts = [p.title, p.caption] + [c.header for c in p.columns] + list(p.labels or ())
        if not all(narrow(t) for t in texts):
            return False
        if not all(narrow(c.plain) for row in p.rows for c in row):
            return False
    return True


def plain_width(stream: IO[str], environ=None) -> Optional[int]:
    """The width rich would lay ``stream``'s output out at when it would
    print no colour and draw with Unicode boxes; None when rich would do
    anything else (then print through rich). Rich's width without a
    terminal: ``$COLUMNS`` when it is a number, else the size of the
    first of stdin, stdout, stderr that is a terminal, else 80."""
    env = os.environ if environ is None else environ
    if sys.platform == "win32" or hasattr(builtins, "get_ipython"):
        return None
    if "FORCE_COLOR" in env or "TTY_COMPATIBLE" in env:  # rich versions read them differently
        return None
    isatty = getattr(stream, "isatty", None)
    try:
        if isatty is not None and isatty():
            return None
    except ValueError:  # a closed stream: rich calls it no terminal
        pass
    if not (getattr(stream, "encoding", "utf-8") or "utf-8").lower().startswith("utf"):
        return None
    columns = env.get("COLUMNS")
    if columns is not None and columns.isdigit():
        width = int(columns)
    else:
        width = 0
        for fd in (0, 1, 2):
            try:
                width = os.get_terminal_size(fd).columns
            except (AttributeError, ValueError, OSError):
                continue
            break
        width = width or DEFAULT_WIDTH
    return width if width >= 1 else None


def wrap(text: str, width: int, pad: bool = False) -> List[str]:
    """``text`` as rich wraps a ``Text`` at ``width`` cells: between words,
    a word longer than the line folded, trailing spaces past the width
    dropped; ``pad``: each line padded to the width (``justify="left"``)."""
    out: List[str] = []
    for raw in text.split("\n"):
        breaks = _divide(raw, width)
        pieces = [raw[a:b] for a, b in zip([0] + breaks, breaks + [len(raw)])]
        for piece in pieces:
            if len(piece) > width:  # Text.rstrip_end: trailing spaces beyond the width
                spaces = len(piece) - len(piece.rstrip())
                piece = piece[:len(piece) - min(spaces, len(piece) - width)]
            piece = piece[:width]
            if pad:
                piece += " " * (width - len(piece))
            out.append(piece)
    return out


_WORD = re.compile(r"\s*\S+\s*")


def _divide(text: str, width: int) -> List[int]:
    """rich's ``_wrap.divide_line`` with folding, for one-cell characters:
    the offsets at which ``text`` breaks into lines of ``width``."""
    breaks: List[int] = []
    offset = 0
    for m in _WORD.finditer(text):
        start, word = m.start(), m.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:  # fold the word over several lines
            pieces = [word[i:i + width] for i in range(0, len(word), width)]
            for k, piece in enumerate(pieces):
                if start:
                    breaks.append(start)
                if k == len(pieces) - 1:
                    offset = len(piece)
                else:
                    start += len(piece)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    return breaks


def _table(sheet: Sheet, content: List[int], total: int) -> List[str]:
    pads = sheet.paddings()
    box = _SIMPLE_HEAD if sheet.compact else _HEAVY_HEAD
    cols = [max(w + left + right, 1) for w, (left, right) in zip(content, pads)]
    out: List[str] = []
    if sheet.title:
        out.extend(wrap(sheet.title, total, pad=True))

    def rule(chars: str) -> str:
        return chars[0] + chars[2].join(chars[1] * w for w in cols) + chars[3]

    def cells(texts: List[str], chars: str) -> str:
        parts = []
        for text, col, w, (left, right) in zip(texts, sheet.columns, cols, pads):
            inner = w - left - right
            if col.justify == "right":
                text = text.rstrip()
                body = " " * (inner - len(text)) + text
            else:
                body = text + " " * (inner - len(text))
            parts.append(" " * left + body + " " * right)
        return chars[0] + chars[2].join(parts) + chars[3]

    out.append(rule(box[0]))
    out.append(cells([c.header for c in sheet.columns], box[1]))
    out.append(rule(box[2]))
    for i, row in enumerate(sheet.rows):
        last = i == len(sheet.rows) - 1
        out.append(cells([c.plain for c in row], box[6] if last else box[3]))
        if i in sheet.sections and not last:
            out.append(rule(box[4]))
    out.append(rule(box[7]))
    if sheet.caption:
        out.extend(wrap(sheet.caption, total, pad=True))
    return out


def render(parts: Iterable[Part], width: int) -> str:
    """The parts one after the other, as rich prints them into a
    ``width``-column file (:func:`slurmtopo.show.tablefit.print_parts`):
    every line at most ``width`` cells but a whole :class:`Line`, printed
    as it is."""
    lines: List[str] = []
    for p in parts:
        if isinstance(p, Line):
            lines.extend([p.plain] if p.whole else wrap(p.plain, width))
            continue
        content, total = p.layout(cell_len)  # the one measurement of its cells
        if total <= width:
            lines.extend(_table(p, content, total))
        else:
            for ln in p.records(width, cell_len, content):
                lines.extend(wrap(ln.plain, width))
    return "".join(ln + "\n" for ln in lines)
