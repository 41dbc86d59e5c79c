"""Which reader a trace file goes to (:func:`read_trace`), told from the
file when not given; the readers and what they share are in
:mod:`slurmtopo.simulate.trace` and the modules beside it."""
from __future__ import annotations

import codecs
import os
from typing import Iterator, Optional

from slurmtopo.files.fileio import open_regular
from slurmtopo.simulate.trace import (CSV, FORMATS, MAX_TRACE_BYTES, PHILLY, SACCT, SWF, Trace,
                                      TraceError, is_number)
from slurmtopo.simulate.trace_csv import MAX_LINE as csv_line, read_csv
from slurmtopo.simulate.trace_philly import read_philly
from slurmtopo.simulate.trace_sacct import MAX_LINE as sacct_line, read_sacct
from slurmtopo.simulate.trace_swf import MAX_LINE as swf_line, read_swf



def sniff(path: str, text: str) -> str:
    """The format of a trace file: ``.swf`` or a first line starting with
    ``;`` or holding only numbers is SWF, a ``|``-separated header naming
    ``JobID`` is sacct, a JSON list (``[``) Philly's job log, anything else
    CSV."""
    if path.lower().endswith((".swf", ".swf.txt")):
        return SWF
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("["):
            return PHILLY
        if line.startswith(";"):
            return SWF
        if "|" in line and "jobid" in line.lower():
            return SACCT
        if all(is_number(w) for w in line.split()):
            return SWF
        return CSV
    return CSV


def read_trace(path: str, fmt: Optional[str] = None, limit: Optional[int] = None,
               keep_running: bool = False, hosts: bool = True, within=None) -> Trace:
    """Read the trace at ``path``, a line (Philly: a job) at a time
    (``fmt``: csv, swf, sacct, philly, or None to
    tell from the file); ``limit``: keep the first that many jobs by
    submit time; ``keep_running``: sacct's jobs still running are kept
    (:func:`~slurmtopo.simulate.trace_sacct.read_sacct`); ``hosts`` False:
    the jobs' ``hosts`` (where sacct says they ran) are not built;
    ``within``: only these hosts are kept (a
    :class:`slurmtopo.inventory.hostlist.HostIndex`; sacct's NodeLists are then never
    expanded)."""
    path = os.fspath(path)
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})")
    if limit is not None and limit < 1:
        raise TraceError(f"--jobs must be at least 1, got {limit}")
    fmt = fmt or sniff(path, _head(path))
    if fmt == CSV:
        return read_csv(trace_lines(path, csv_line, "a trace CSV"), path, limit)
    if fmt == PHILLY:
        return read_philly(trace_chunks(path), path, limit)
    if fmt == SACCT:
        return read_sacct(trace_lines(path, sacct_line, "sacct output"), path, limit,
                          keep_running, hosts, within)

    return read_swf(trace_lines(path, swf_line, "an SWF log"), path, limit)


#: what :func:`sniff` looks at of a file read a line at a time
SNIFF_BYTES = 64 * 1024


def _head(path: str) -> str:
    """The start of ``path`` (for :func:`sniff`): its first chunk, up to
    the last whole line in it."""
    head = next(iter(trace_chunks(path, SNIFF_BYTES)), "")
    return head[:head.rfind("\n") + 1] or head


def trace_chunks(path: str, size: int = SNIFF_BYTES) -> Iterator[str]:
    """The text of a trace in chunks of about ``size`` bytes, for a reader
    that finds its own lines (Philly's JSON): a regular file only
    (:func:`~slurmtopo.files.fileio.open_regular`), UTF-8 (a BOM is dropped), no
    NUL byte, at most :data:`~slurmtopo.simulate.trace.MAX_TRACE_BYTES`;
    each refusal one TraceError naming the line."""
    fd = open_regular(path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    total, lines = 0, 1
    with os.fdopen(fd, "rb") as fh:
        while True:
            try:
                raw = fh.read(size)
            except OSError as exc:
                raise TraceError(f"cannot read: {exc.strerror or exc}", path, lines) from None
            total += len(raw)
            if total > MAX_TRACE_BYTES:
                raise TraceError(f"larger than {MAX_TRACE_BYTES >> 30} GiB: refused (is it the "
                                 "right file?)", path, lines)
            if b"\x00" in raw:
                raise TraceError("not a text file (NUL bytes)", path,
                                 lines + raw.count(b"\n", 0, raw.index(b"\x00")))
            try:
                text = decoder.decode(raw, final=not raw)
            except UnicodeDecodeError:
                raise TraceError("not a text file (invalid UTF-8)", path, lines) from None
            if total == len(raw):
                text = text.lstrip("\ufeff")
            if text:
                yield text
            if not raw:
                return
            lines += raw.count(b"\n")


def trace_lines(path: str, max_line: int, what: str) -> Iterator[str]:
    """The lines of a text trace, one at a time (line ends kept), from
    :func:`trace_chunks`; a line longer than ``max_line`` characters is one
    TraceError saying the file is not ``what``."""
    number, rest = 0, ""
    for chunk in trace_chunks(path):
        parts = (rest + chunk).split("\n")
        rest = parts.pop()
        for part in parts:
            number += 1
            if len(part.rstrip("\r")) > max_line:
                raise TraceError(f"a line of more than {max_line:,} characters: not {what}",
                                 path, number)
            yield part + "\n"
        if len(rest) > max_line + 1:
            raise TraceError(f"a line of more than {max_line:,} characters: not {what}",
                             path, number + 1)
    if rest:
        yield rest
