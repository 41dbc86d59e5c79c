"""The CSV of the public GPU-cluster traces (Helios, Philly, Alibaba PAI).

One row per job under a header naming its columns (case and surrounding
blanks do not matter; other columns are passed over):

=============  ======================================================  =========
what           column names read                                       needed
=============  ======================================================  =========
GPUs           ``gpu_num``, ``num_gpu``, ``num_gpus``, ``gpus``; or    yes
               per instance (``gpu_request``, or ``plan_gpu`` in
               percent) times ``worker_num``/``inst_num``
nodes          ``node_num``, ``num_nodes``, ``nodes``                  no
run time (s)   ``run_time``, ``duration``, ``runtime``; else           yes
               ``end_time`` - ``start_time`` (``deletion_time`` -
               ``scheduled_time``)
submission     ``submit_time``, ``submitted_time``, ``submit``,        one of
               ``creation_time`` (seconds or ISO 8601); or             the
               ``interval`` (seconds since the previous row's          three
               submission); or else the start time
time limit (s) ``time_limit``, ``timelimit``, ``requested_time``       no
job id         ``job_id``, ``jobid``, ``id``, ``name``, ``job_name``   no
=============  ======================================================  =========

Helios' ``cluster_log.csv`` (``job_id,user,vc,gpu_num,cpu_num,node_num,
state,submit_time,start_time,end_time,duration,queue``), the Philly-derived
CSVs (``job_id,num_gpu,submit_time,...,duration,interval``) and Alibaba's
GPU traces (``num_gpu``, ``creation_time``, ``scheduled_time``,
``deletion_time``), Alibaba's 2026 spot trace (``gpu_request`` x
``worker_num``) all read as they are, and so does PAI v2020's task table,
published without a header row: a first row of its shape is data under
:data:`PAI_V2020_TASK`. A row with 0 GPUs (a CPU job) or a value that is not
a number is skipped and counted (:class:`~slurmtopo.simulate.trace.RowLog`).
"""
from __future__ import annotations

import csv
import math
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from slurmtopo.simulate.trace import (CSV, MAX_JOB_GPUS, BadRow, JobCollector, RowLog, Trace,
                                      TraceError, TraceJob, instant, is_number, number, whole)

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
    "id": ("job_id", "jobid", "id", "name", "job_name"),
    # GPUs per instance (worker) of a job, times its instances
    "per_instance": ("gpu_request",),
    "percent_per_instance": ("plan_gpu",),
    "instances": ("worker_num", "inst_num"),
}
#: the columns of Alibaba PAI's ``pai_task_table.csv`` (cluster-trace-gpu-v2020),
#: published without a header row (it is in ``pai_task_table.header``)
PAI_V2020_TASK = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                  "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
#: longest line read (a CSV row of a trace is well under 1 KiB)
MAX_LINE = 64 * 1024


def _columns(row: Sequence[str]) -> Dict[str, int]:
    names = [c.strip().lower() for c in row]
    at: Dict[str, int] = {}
    for what, options in COLUMNS.items():
        for name in options:
            if name in names:
                at[what] = names.index(name)
                break
    return at


def _header(row: Sequence[str], path: str, line: int) -> Dict[str, int]:
    at = _columns(row)
    missing = []
    if not ({"gpus", "per_instance", "percent_per_instance"} & set(at)):
        missing.append("the GPUs of each job (" + " or ".join(
            COLUMNS["gpus"] + COLUMNS["per_instance"] + COLUMNS["percent_per_instance"]) + ")")
    if "run" not in at and not ("start" in at and "end" in at):
        missing.append("its run time (" + " or ".join(COLUMNS["run"]) +
                       ", or start_time and end_time)")
    if "submit" not in at and "interval" not in at and "start" not in at:
        missing.append("its submission (" + " or ".join(COLUMNS["submit"]) +
                       ", or interval, or start_time)")
    if missing:
        shown = ",".join(c.strip() for c in row)[:200]
        hint = ""
        if not at:
            hint = (" (no column name known at all: a file without a header row? Give it "
                    "one, e.g. the .header file of an Alibaba PAI table)")
        raise TraceError(f"this CSV header lacks {'; '.join(missing)}: {shown!r}{hint}",
                         path, line)
    return at


def _is_pai_v2020_task(row: Sequence[str]) -> bool:
    """A data row of PAI's header-less task table: 10 fields, the instance
    count, times and GPU percent numbers (or empty, for a task not started
    or without GPUs)."""
    if len(row) != len(PAI_V2020_TASK) or _columns(row):
        return False
    def num(i: int, empty: bool) -> bool:
        v = row[i].strip()
        return (empty and not v) or is_number(v)
    return num(2, False) and num(4, True) and num(5, True) and num(8, True)


def read_csv(lines: Union[str, Iterable[str]], path: str, limit: Optional[int] = None) -> Trace:
    """The jobs of a CSV trace (see the module doc): its text, or its lines
    one at a time (:func:`~slurmtopo.simulate.trace_read.trace_lines`),
    held only as long as their row is read."""
    rows = csv.reader(_bounded(lines.splitlines(True) if isinstance(lines, str) else lines,
                               path))
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
    first_row: Optional[List[str]] = None
    if _is_pai_v2020_task(header):
        first_row, header = header, list(PAI_V2020_TASK)
    at = _header(header, path, head_line)
    log = RowLog(path)
    jobs = JobCollector(path, limit)
    count = 0
    last_submit = 0.0
    while True:
        if first_row is not None:
            row, line, first_row = first_row, head_line, None
        else:
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
        jobs.add(submit, job)
    if not count:
        raise TraceError("no rows under the CSV header", path, head_line)
    return jobs.finish(CSV, count, log)


def _bounded(lines: Iterable[str], path: str) -> Iterator[str]:
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise TraceError(f"a line of {len(line)} characters: not a trace CSV", path, n)
        yield line


def _gpus(row: Sequence[str], at: Dict[str, int]) -> int:
    """A row's GPUs: the job's count, or GPUs per instance times instances
    (``gpu_request`` x ``worker_num``; PAI's ``plan_gpu`` is a percentage of
    one GPU per instance, ``50`` a half, taken as one whole GPU: GPU sharing
    is not modelled). An empty per-instance cell is a CPU job (0)."""
    if "gpus" in at:
        text = _cell(row, at, "gpus")
        if text is None:
            raise BadRow("no GPU count")
        return whole(text, "GPU count", 0, MAX_JOB_GPUS)
    instances_text = _cell(row, at, "instances")
    instances = (whole(instances_text, "instance count", 0, MAX_JOB_GPUS)
                 if instances_text is not None else 1)
    if "per_instance" in at:
        text = _cell(row, at, "per_instance")
        each = whole(text, "GPU count", 0, MAX_JOB_GPUS) if text is not None else 0
    else:
        text = _cell(row, at, "percent_per_instance")
        each = math.ceil(number(text, "GPU percentage", 0, 100.0 * MAX_JOB_GPUS) / 100.0) \
            if text is not None else 0
    if each * instances > MAX_JOB_GPUS:
        raise BadRow("GPU count out of range")
    return each * instances


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
    elif "interval" in at:
        gap = _cell(row, at, "interval")
        if gap is None:
            raise BadRow("no submit time")
        submit = last_submit + number(gap, "interval")
    elif "submit" not in at:
        # no submission column (PAI's task table): the start stands for it
        start_text = _cell(row, at, "start")
        if start_text is None:
            raise BadRow("no start time")
        submit = instant(start_text, "start time")
    else:
        raise BadRow("no submit time")
    gpus = _gpus(row, at)
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
