"""A job trace as ``slurmtopo simulate`` replays it, and what the readers share.

A trace is a list of :class:`TraceJob` (when it was submitted, how long it
ran, how many GPUs it held), read from one of three formats, each by a
module of its own: the CSV of the public GPU-cluster traces
(:mod:`~slurmtopo.simulate.trace_csv`), the Standard Workload Format of the
Parallel Workloads Archive (:mod:`~slurmtopo.simulate.trace_swf`) and
``sacct -P`` output (:mod:`~slurmtopo.simulate.trace_sacct`), and the JSON
job log of Microsoft's Philly trace (:mod:`~slurmtopo.simulate.trace_philly`);
:func:`slurmtopo.simulate.trace_read.read_trace` picks the reader.

Every trace is read a line at a time (a Philly log a job at a time; the
public ones are hundreds of MiB), at most :data:`MAX_TRACE_BYTES`, and only
the jobs kept are held (:class:`JobCollector`).
A file that is not a trace at all (no header, a column missing) is refused
with one located error; a row that cannot be used (a bad number, no GPUs,
a job that never ran) is skipped and counted by reason, with the first
such line, and the counts are part of every report: nothing is dropped
silently.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Dict, List, Optional, Tuple

from slurmtopo.errors import SlurmtopoError

CSV = "csv"
SWF = "swf"
SACCT = "sacct"
PHILLY = "philly"
FORMATS = (CSV, SWF, SACCT, PHILLY)

#: a trace longer than this (10 years of submissions) is a unit mistake
MAX_SPAN_S = 10 * 365 * 86400.0
#: one job's run time or time limit longer than a year is refused likewise
MAX_RUN_S = 365 * 86400.0
#: more GPUs than this in one job is not a job of this planet
MAX_JOB_GPUS = 1 << 20
#: jobs held at once without ``--jobs`` (each is a few hundred bytes; the
#: public traces have up to a few million rows, most of them CPU jobs)
MAX_HELD_JOBS = 2_000_000
#: largest trace read (it is read a line at a time, so this bounds the
#: time, not the memory: the Helios, PAI and Philly traces are 100-700 MiB)
MAX_TRACE_BYTES = 4 << 30


class TraceError(SlurmtopoError):
    """A trace file that cannot be read at all."""


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace. ``submit`` counts seconds from the trace's
    first submission; ``nodes`` and ``time_limit`` are None when the trace
    does not say."""

    job_id: str
    submit: float
    run_time: float
    gpus: int
    nodes: Optional[int] = None
    time_limit: Optional[float] = None
    #: ``file:line`` of its row
    where: str = ""
    #: seconds from submission to start, and the nodes it ran on, where the
    #: trace says (sacct's ``Start`` and ``NodeList``; what ``slurmtopo
    #: audit --sacct`` rebuilds the cluster's past from)
    wait: Optional[float] = None
    hosts: Tuple[str, ...] = ()
    #: still running when the record was taken (sacct's ``End`` ``Unknown``,
    #: kept only when the reader is asked to): ``run_time`` is then 0
    running: bool = False


@dataclass(frozen=True)
class Skipped:
    """Rows left out for one reason: how many, and the first one."""

    reason: str
    count: int
    first: str

    def as_dict(self) -> Dict[str, object]:
        return {"reason": self.reason, "rows": self.count, "first": self.first}


@dataclass(frozen=True)
class Trace:
    jobs: Tuple[TraceJob, ...]
    source: str
    format: str
    #: data rows read (jobs kept + rows skipped)
    rows: int
    skipped: Tuple[Skipped, ...] = ()
    #: jobs of the file left out by ``--jobs`` (the latest submissions)
    beyond_limit: int = 0
    #: the first submission as the file gives it (seconds; an ISO time as
    #: seconds since the epoch, UTC when no zone is given): ``submit`` counts from here
    origin: float = 0.0

    def summary(self) -> str:
        """``1200 jobs from trace.csv (csv); 3 rows skipped: 2 no GPUs (trace.csv:17), ...``"""
        text = f"{len(self.jobs)} jobs from {self.source} ({self.format})"
        if self.beyond_limit:
            text += f", the first {len(self.jobs)} of {len(self.jobs) + self.beyond_limit}"
        skipped = sum(s.count for s in self.skipped)
        if skipped:
            text += f"; {skipped} row{'s' * (skipped != 1)} skipped: " + ", ".join(
                f"{s.count} {s.reason} ({s.first})" for s in self.skipped)
        return text


class RowLog:
    """Counts the rows a reader skips, by reason, keeping the first line
    of each (reasons in the order first met)."""

    def __init__(self, path: str):
        self.path = path
        self._seen: Dict[str, List] = {}

    def skip(self, reason: str, line: int) -> None:
        hit = self._seen.get(reason)
        if hit is None:
            self._seen[reason] = [1, f"{self.path}:{line}"]
        else:
            hit[0] += 1

    def skipped(self) -> Tuple[Skipped, ...]:
        return tuple(Skipped(r, c, f) for r, (c, f) in self._seen.items())

    @property
    def count(self) -> int:
        return sum(c for c, _ in self._seen.values())


class BadRow(ValueError):
    """A row that cannot be used; its message is the reason it is counted under."""


def number(text: str, what: str, lo: float = 0.0, hi: float = MAX_RUN_S) -> float:
    """A finite number in [lo, hi], or BadRow naming ``what``."""
    try:
        value = float(text.strip())
    except ValueError:
        raise BadRow(f"bad {what}") from None
    if not math.isfinite(value) or value < lo or value > hi:
        raise BadRow(f"{what} out of range")
    return value


def whole(text: str, what: str, lo: int = 0, hi: int = MAX_JOB_GPUS) -> int:
    """A whole number in [lo, hi] (``8`` or ``8.0``), or BadRow."""
    value = number(text, what, lo, hi)
    if value != int(value):
        raise BadRow(f"bad {what}")
    return int(value)


def instant(text: str, what: str) -> float:
    """A point in time: seconds (``1601510400``, ``12.5``) or an ISO 8601
    date and time (``2020-10-01 00:00:00``, ``2020-10-01T00:00:00+08:00``;
    without a zone it is read as UTC: only differences matter)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None:
        if not math.isfinite(value) or abs(value) > 1e12:
            raise BadRow(f"{what} out of range")
        return value
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRow(f"bad {what}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


class JobCollector:
    """The jobs of a trace as a reader meets them, in bounded memory.

    With a ``limit`` (``--jobs N``) only the N earliest submissions are
    held (a heap), so the first thousand jobs of a trace of millions cost
    a thousand jobs of memory; without one every job is held, at most
    :data:`MAX_HELD_JOBS`. The first and last submission of the whole file
    are tracked either way (the span check, the origin of the clock)."""

    def __init__(self, path: str, limit: Optional[int] = None):
        self.path = path
        self.limit = limit
        self.count = 0
        self._heap: List[Tuple[float, int, TraceJob]] = []  # (-submit, -order, job) with a limit
        self._first: Optional[Tuple[float, int, TraceJob]] = None
        self._last: Optional[Tuple[float, int, TraceJob]] = None

    def add(self, submit: float, job: TraceJob) -> None:
        entry = (submit, self.count, job)
        self.count += 1
        if self._first is None or entry[:2] < self._first[:2]:
            self._first = entry
        if self._last is None or entry[:2] > self._last[:2]:
            self._last = entry
        if self.limit is None:
            if len(self._heap) >= MAX_HELD_JOBS:
                raise TraceError(f"more than {MAX_HELD_JOBS:,} jobs to replay: give --jobs N "
                                 "to replay the first N", self.path)
            self._heap.append((-submit, -entry[1], job))
        elif len(self._heap) < self.limit:
            heapq.heappush(self._heap, (-submit, -entry[1], job))
        elif (-submit, -entry[1]) > self._heap[0][:2]:
            heapq.heapreplace(self._heap, (-submit, -entry[1], job))

    def finish(self, fmt: str, rows: int, log: "RowLog") -> Trace:
        """The :class:`Trace`: jobs sorted by submit time (file order on
        ties), times counted from the first submission."""
        if self._first is None or self._last is None:
            why = ""
            if log.count:
                why = " (" + ", ".join(f"{s.count} {s.reason}, first at {s.first}"
                                       for s in log.skipped()) + ")"
            raise TraceError(f"no job to replay in this trace: {rows} row{'s' * (rows != 1)} "
                             f"read{why}", self.path)
        t0 = self._first[0]
        span = self._last[0] - t0
        if span > MAX_SPAN_S:
            raise TraceError(f"submissions span {span / 86400 / 365:.0f} years (from "
                             f"{self._first[2].where} to {self._last[2].where}): are the times "
                             "in seconds?", self.path)
        kept = sorted((-s, -i, job) for s, i, job in self._heap)
        out = tuple(replace(job, submit=submit - t0) for submit, _, job in kept)
        return Trace(jobs=out, source=self.path, format=fmt, rows=rows, skipped=log.skipped(),
                     beyond_limit=self.count - len(out), origin=t0)


def is_number(word: str) -> bool:
    """A word a trace gives as a number (SWF fields, a header-less line)."""
    try:
        float(word)
        return True
    except ValueError:
        return False
