"""Which reader a trace file goes to (:func:`read_trace`), told from the
file when not given; the readers and what they share are in
:mod:`slurmtopo.simulate.trace` and the modules beside it."""
from __future__ import annotations

import os
from typing import Optional

from slurmtopo.simulate.trace import CSV, FORMATS, SACCT, SWF, Trace, TraceError, is_number


def sniff(path: str, text: str) -> str:
    """The format of a trace file: ``.swf`` or a first line starting with
    ``;`` or holding only numbers is SWF, a ``|``-separated header naming
    ``JobID`` is sacct, anything else CSV."""
    if path.lower().endswith((".swf", ".swf.txt")):
        return SWF
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith(";"):
            return SWF
        if "|" in line and "jobid" in line.lower():
            return SACCT
        if all(is_number(w) for w in line.split()):
            return SWF
        return CSV
    return CSV


def read_trace(path: str, fmt: Optional[str] = None, limit: Optional[int] = None,
               keep_running: bool = False, hosts: bool = True) -> Trace:
    """Read the trace at ``path`` (``fmt``: csv, swf, sacct, or None to
    tell from the file); ``limit``: keep the first that many jobs by
    submit time; ``keep_running``: sacct's jobs still running are kept
    (:func:`~slurmtopo.simulate.trace_sacct.read_sacct`); ``hosts`` False:
    the jobs' ``hosts`` (where sacct says they ran) are not built."""
    from slurmtopo.fileio import read_text

    path = os.fspath(path)
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})")
    if limit is not None and limit < 1:
        raise TraceError(f"--jobs must be at least 1, got {limit}")
    text = read_text(path)
    if "\x00" in text:
        raise TraceError("not a text file (NUL bytes)", path)
    fmt = fmt or sniff(path, text)
    if fmt == SWF:
        from slurmtopo.simulate.trace_swf import read_swf as reader
    elif fmt == SACCT:
        from slurmtopo.simulate.trace_sacct import read_sacct

        return read_sacct(text, path, limit, keep_running, hosts)
    else:
        from slurmtopo.simulate.trace_csv import read_csv as reader
    return reader(text, path, limit)
