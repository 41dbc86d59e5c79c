"""The CSV of the public GPU-cluster traces (Helios, Philly, Alibaba PAI).

One row per job under a header naming its columns (case and surrounding
blanks do not matter; other columns are passed over):

=============  ======================================================  =========
what           column names read                                       needed
=============  ======================================================  =========
GPUs           ``gpu_num``, ``num_gpu``, ``num_gpus``, ``gpus``        yes
nodes          ``node_num``, ``num_nodes``, ``nodes``                  no
run time (s)   ``run_time``, ``duration``, ``runtime``; else           yes
               ``end_time`` - ``start_time`` (``deletion_time`` -
               ``scheduled_time``)
submission     ``submit_time``, ``submitted_time``, ``submit``,        one of
               ``creation_time`` (seconds or ISO 8601); or             the two
               ``interval`` (seconds since the previous row's
               submission)
time limit (s) ``time_limit``, ``timelimit``, ``requested_time``       no
job id         ``job_id``, ``jobid``, ``id``, ``name``                 no
=============  ======================================================  =========

Helios' ``cluster_log.csv`` (``job_id,user,vc,gpu_num,cpu_num,node_num,
state,submit_time,start_time,end_time,duration,queue``), the Philly-derived
CSVs (``job_id,num_gpu,submit_time,...,duration,interval``) and Alibaba's
GPU traces (``num_gpu``, ``creation_time``, ``scheduled_time``,
``deletion_time``) all read as they are. A row with 0 GPUs (a CPU job) or a value that is not a
number is skipped and counted (:class:`~slurmtopo.simulate.trace.RowLog`).
"""
from __future__ import annotations

import csv
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.simulate.trace import (CSV, MAX_JOB_GPUS, BadRow, RowLog, Trace, TraceError,
                                      TraceJob, finish, instant, number, whole)

#: what -> the column names read for it, preferred first
COLUMNS: Dict[str, Tuple[str, ...]] = {
    "gpus": ("gpu_num", "num_gpu", "num_gpus", "gpus"),
    "nodes": ("node_num", "num_nodes", "nodes"),
    "run": ("run_time", "duration", "runtime"),
    "start": ("start_time", "scheduled_time"),
    "end": ("end_time", "deletion_time"),
    "submit": ("submit_time", "submitted_time", "submit", "creation_time"),
    "interval": ("interval",),
    "limit": ("time_limit", "timelimit", "requested_time"),
    "id": ("job_id", "jobid", "id", "name"),
}
#: longest line read (a CSV row of a trace is well under 1 KiB)
MAX_LINE = 64 * 1024


def _header(row: Sequence[str], path: str) -> Dict[str, int]:
    names = [c.strip().lower() for c in row]
    at: Dict[str, int] = {}
    for what, options in COLUMNS.items():
        for name in options:
            if name in names:
                at[what] = names.index(name)
                break
    missing = []
    if "gpus" not in at:
        missing.append("the GPUs of each job (" + " or ".join(COLUMNS["gpus"]) + ")")
    if "run" not in at and not ("start" in at and "end" in at):
        missing.append("its run time (" + " or ".join(COLUMNS["run"]) +
                       ", or start_time and end_time)")
    if "submit" not in at and "interval" not in at:
        missing.append("its submission (" + " or ".join(COLUMNS["submit"]) + ", or interval)")
    if missing:
        shown = ",".join(c.strip() for c in row)[:200]
        raise TraceError(f"this CSV header lacks {'; '.join(missing)}: {shown!r}", path, 1)
    return at


def read_csv(text: str, path: str, limit: Optional[int] = None) -> Trace:
    """The jobs of a CSV trace (see the module doc)."""
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise TraceError(f"a line of {len(line)} characters: not a trace CSV", path, n)
    rows = csv.reader(lines)
    head_line = 0
    header: Optional[List[str]] = None
    try:
        for row in rows:
            head_line = rows.line_num
            if any(c.strip() for c in row):
                header = row
                break
    except csv.Error as exc:
        raise TraceError(f"not a CSV file: {exc}", path, rows.line_num) from None
    if header is None:
        raise TraceError("empty: no CSV header", path)
    at = _header(header, path)
    log = RowLog(path)
    jobs: List[Tuple[float, TraceJob]] = []
    count = 0
    last_submit = 0.0
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except csv.Error as exc:
            raise TraceError(f"not a CSV file: {exc}", path, rows.line_num) from None
        line = rows.line_num
        if not any(c.strip() for c in row):
            continue
        count += 1
        try:
            job, submit = _job(row, at, path, line, last_submit)
        except BadRow as exc:
            log.skip(str(exc), line)
            continue
        last_submit = submit
        if job is None:
            log.skip("without GPUs (CPU jobs)", line)
            continue
        jobs.append((submit, job))
    if not count:
        raise TraceError("no rows under the CSV header", path, head_line)
    return finish(path, CSV, count, jobs, log, limit)


def _cell(row: Sequence[str], at: Dict[str, int], what: str) -> Optional[str]:
    i = at.get(what)
    if i is None or i >= len(row):
        return None
    value = row[i].strip()
    return value if value and value.lower() not in ("nan", "none", "null", "-") else None


def _job(row: Sequence[str], at: Dict[str, int], path: str, line: int,
         last_submit: float) -> Tuple[Optional[TraceJob], float]:
    text = _cell(row, at, "submit")
    if text is not None:
        submit = instant(text, "submit time")
    else:
        gap = _cell(row, at, "interval")
        if gap is None:
            raise BadRow("no submit time")
        submit = last_submit + number(gap, "interval")
    gpus_text = _cell(row, at, "gpus")
    if gpus_text is None:
        raise BadRow("no GPU count")
    gpus = whole(gpus_text, "GPU count", 0, MAX_JOB_GPUS)
    run_text = _cell(row, at, "run")
    if run_text is not None:
        run = number(run_text, "run time")
    else:
        start, end = _cell(row, at, "start"), _cell(row, at, "end")
        if start is None or end is None:
            raise BadRow("no run time")
        run = instant(end, "end time") - instant(start, "start time")
        if run < 0:
            raise BadRow("ends before it starts")
    nodes_text = _cell(row, at, "nodes")
    nodes = whole(nodes_text, "node count", 1, MAX_JOB_GPUS) if nodes_text is not None else None
    limit_text = _cell(row, at, "limit")
    limit = number(limit_text, "time limit") if limit_text is not None else None
    if gpus == 0:
        return None, submit
    job_id = _cell(row, at, "id") or str(line)
    return TraceJob(job_id=job_id[:64], submit=submit, run_time=run, gpus=gpus, nodes=nodes,
                    time_limit=limit or None, where=f"{path}:{line}"), submit
