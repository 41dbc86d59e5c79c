"""How the daemon's request readers word what they refuse.

A request is a user's JSON (docs/security.md): every reader of one of its
fields (protocol.py, jobstep.py, jobhazards.py) quotes the offending value
the same way, short and printable, and names unknown keys the same way, so
the one line a user or an admin reads looks alike whichever field it was.
"""
from __future__ import annotations

from typing import Any, Collection, Mapping, Optional

from slurmtopo.show.termsafe import printable


def show(value: Any) -> str:
    """A user's value quoted in an error message: short, one line."""
    return printable(repr(value), 40)


def unknown_fields(value: Mapping, known: Collection[str], what: str) -> Optional[str]:
    """The complaint about keys of ``value`` outside ``known`` (the first
    five, sorted), or None when every key is known."""
    bad = sorted(str(k) for k in value if k not in known)
    if not bad:
        return None
    return f"unknown {what} field(s): " + ", ".join(show(k) for k in bad[:5])
