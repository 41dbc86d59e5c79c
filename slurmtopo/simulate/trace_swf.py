"""The Standard Workload Format (SWF) of the Parallel Workloads Archive.

One job per line, 18 numbers separated by blanks, ``-1`` for "not known";
header lines start with ``;`` (``; UnixStartTime: 749458803``). The fields
read (numbered as in the format's definition):

 1. job number                      -> the job's id
 2. submit time (s from the start)  -> its submission
 4. run time (s)                    -> its run time
 5. number of allocated processors  -> its GPUs (8, requested processors,
                                       when 5 is -1)
 9. requested time (s)              -> its time limit, when known

SWF has no GPU field: each processor of the log is read as one GPU (a
128-processor job becomes a 128-GPU job, 16 nodes of 8). A line with fewer
than 5 fields, a value that is not a number, no run time (-1, a job that
never ran) or no processors is skipped and counted.
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Union

from slurmtopo.simulate.trace import (MAX_JOB_GPUS, MAX_SPAN_S, SWF, BadRow, JobCollector,
                                      RowLog, Trace, TraceError, TraceJob, is_number, number,
                                      whole)

#: fields of a standard line
FIELDS = 18
#: longest line read (an SWF line is under 200 characters)
MAX_LINE = 4096


def read_swf(text: Union[str, Iterable[str]], path: str, limit: Optional[int] = None) -> Trace:
    """The jobs of an SWF log (see the module doc)."""
    log = RowLog(path)
    jobs = JobCollector(path, limit)
    count = 0
    for n, line in enumerate(text.splitlines() if isinstance(text, str) else text, 1):
        if len(line) > MAX_LINE:
            raise TraceError(f"a line of {len(line)} characters: not an SWF log", path, n)
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        count += 1
        words = line.split()
        if len(words) < 5:
            if count == 1 and not any(is_number(w) for w in words):
                raise TraceError("not an SWF log: a job line is numbers separated by blanks",
                                 path, n)
            log.skip("with fewer than 5 fields", n)
            continue
        if len(words) > FIELDS:
            log.skip(f"with more than {FIELDS} fields", n)
            continue
        words += ["-1"] * (FIELDS - len(words))
        try:
            job = _job(words, path, n)
        except BadRow as exc:
            if count == 1 and not any(is_number(w) for w in words):
                raise TraceError("not an SWF log: a job line is numbers separated by blanks",
                                 path, n) from None
            log.skip(str(exc), n)
            continue
        jobs.add(job.submit, job)
    if not count:
        raise TraceError("no job lines (only ';' header lines or nothing)", path)
    return jobs.finish(SWF, count, log)


def _job(w: List[str], path: str, line: int) -> TraceJob:
    submit = number(w[1], "submit time", 0.0, MAX_SPAN_S)
    if w[3].strip() == "-1":
        raise BadRow("without a run time (never ran)")
    run = number(w[3], "run time")
    procs = w[4] if w[4].strip() != "-1" else w[7]
    if procs.strip() == "-1":
        raise BadRow("without processors")
    gpus = whole(procs, "processor count", 0, MAX_JOB_GPUS)
    if gpus == 0:
        raise BadRow("without processors")
    limit = None
    if w[8].strip() != "-1":
        limit = number(w[8], "requested time") or None
    job_id = w[0].strip()
    whole(job_id, "job number", 0, 1 << 62)
    return TraceJob(job_id=job_id, submit=submit, run_time=run, gpus=gpus, time_limit=limit,
                    where=f"{path}:{line}")
