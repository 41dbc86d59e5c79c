"""Text someone else chose, made safe to print on a terminal.

A job name, a job comment, a node's reason, a host name in a rank map that
another member of a shared directory wrote: any of them can hold control
characters. ``ESC ] 0 ; ... BEL`` retitles the reader's terminal, other
escape sequences move the cursor, hide or rewrite what was printed, and
bidirectional overrides make text read differently from what it is. A
user on a shared cluster picks the name of their job, and ``slurmtopo daemon
status`` shows it to the admin, so every string that did not come from the
person at the terminal goes through this module before it is printed:

* :func:`printable` for plain output (``click.echo``, tables, logs):
  control characters (C0, DEL, C1) and the invisible or direction-changing
  format characters become ``\\xNN`` / ``\\uNNNN``, so they show instead of
  acting;
* :func:`markup` for rich console markup (``Console.print("...")``): the
  same, and rich's ``[tag]`` syntax escaped as well;
* :class:`PrintableFormatter` for the logging of a long-running command
  (the placement daemon): every message escaped, tracebacks line by line.

One helper for all of them, so that a new output path cannot forget one
kind of escaping. JSON output needs none of this (``json.dumps`` escapes
control characters itself).
"""
from __future__ import annotations

import logging
import re
from typing import Optional

#: C0 controls (tab and newline included: every field printed is one
#: line), DEL and C1 controls, the Arabic letter mark, zero-width and
#: direction marks, the line/paragraph separators, the bidirectional
#: embeddings, overrides and isolates, invisible operators, the BOM, and
#: the other characters that print as nothing and so could hide text: the
#: soft hyphen, the Mongolian vowel separator, the interlinear annotation
#: marks and the tag characters (which spell ASCII invisibly)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                      "\u2060-\u2069\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def _escape(m: "re.Match[str]") -> str:
    code = ord(m.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object, limit: Optional[int] = None) -> str:
    """``text`` (any object, as ``str()``) with every control and format
    character escaped; cut to ``limit`` characters (then ``...``) first
    when given."""
    s = text if isinstance(text, str) else str(text)
    if limit is not None and len(s) > limit:
        s = s[:limit] + "..."
    return _CONTROL.sub(_escape, s)


def markup(text: object, limit: Optional[int] = None) -> str:
    """:func:`printable`, and safe inside rich console markup."""
    # lazy: every command loads termsafe (--help, hooks task-prolog, plan --json), none of
    # them rich (rich.markup: ~9 ms); only the audit's tables ask for markup
    from rich.markup import escape

    return escape(printable(text, limit))


class PrintableFormatter(logging.Formatter):
    """A logging formatter whose messages are :func:`printable` (the
    arguments of a log call are often user strings: job names, reasons);
    a traceback keeps its lines, each escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:
        return "\n".join(printable(line) for line in super().formatException(ei).split("\n"))
