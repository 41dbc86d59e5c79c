"""Microsoft's Philly trace as published: ``cluster_job_log``, a JSON list
of jobs (github.com/msr-fiddle/philly-traces, ``trace-data.tar.gz``).

Each job has ``jobid``, ``submitted_time`` and ``attempts``, each attempt a
``start_time``, an ``end_time`` and a ``detail`` list of the servers it
held, each with its ``gpus``. A job reads as:

* submission: ``submitted_time`` (``2017-10-07 01:11:39``, no zone);
* run time: the sum of its attempts' lengths (a retried job ran that long);
* GPUs and nodes: those of its largest attempt (GPUs summed over
  ``detail``; nodes = servers);
* skipped and counted: no attempt (never ran), an attempt with a missing
  (``None``) time (a logging error, or still running when the snapshot was
  taken), no GPU.

The file is hundreds of MiB of JSON: it is decoded one job at a time from
chunks of text (:func:`read_philly`), never as one document, so memory is
that of one job plus the jobs kept.
"""
from __future__ import annotations

import json
from typing import Iterable, Optional, Tuple

from slurmtopo.simulate.trace import (MAX_JOB_GPUS, MAX_RUN_S, PHILLY, BadRow, JobCollector,
                                      RowLog, Trace, TraceError, TraceJob, instant)
#: the longest one job's JSON may be (a job of the trace is well under 64 KiB)
MAX_JOB_CHARS = 1 << 20
#: most attempts or servers one job may list
MAX_PARTS = 10_000


def read_philly(chunks: Iterable[str], path: str, limit: Optional[int] = None) -> Trace:
    """The jobs of a ``cluster_job_log`` given as chunks of its text."""
    log = RowLog(path)
    jobs = JobCollector(path, limit)
    count = 0
    for line, obj in _objects(chunks, path):
        count += 1
        try:
            job, submit = _job(obj, path, line)
        except BadRow as exc:
            log.skip(str(exc), line)
            continue
        if job is None:
            log.skip("without GPUs", line)
            continue
        jobs.add(submit, job)
    if not count:
        raise TraceError("no job in this Philly job log (an empty JSON list)", path)
    return jobs.finish(PHILLY, count, log)


def _objects(chunks: Iterable[str], path: str) -> Iterable[Tuple[int, object]]:
    """(line, value) of each element of the top-level JSON list, decoded one
    at a time from the chunks; the line is where the element starts."""
    decoder = json.JSONDecoder()
    source = iter(chunks)
    buf, pos, line = "", 0, 1  # line: of buf[pos]
    more = True

    def fill() -> bool:
        nonlocal buf, pos, more
        if not more:
            return False
        chunk = next(source, None)
        if chunk is None:
            more = False
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    def skip_blank() -> Optional[str]:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                line += buf[pos] == "\n"
                pos += 1
            if pos < len(buf):
                return buf[pos]
            if not fill():
                return None

    first = skip_blank()
    if first != "[":
        raise TraceError("not a Philly job log: it does not start with a JSON list '['",
                         path, line)
    pos += 1
    expect_item = True
    while True:
        c = skip_blank()
        if c is None:
            raise TraceError("the JSON list is not closed (a cut file?)", path, line)
        if c == "]":
            pos += 1
            break
        if c == "," and not expect_item:
            pos += 1
            expect_item = True
            continue
        if not expect_item:
            raise TraceError(f"expected ',' or ']' between jobs, found {c!r}", path, line)
        while True:
            try:
                value, end = decoder.raw_decode(buf, pos)
                break
            except RecursionError:
                raise TraceError("a job nested deeper than a Philly job log nests (a list "
                                 "or object inside itself thousands of times)", path,
                                 line) from None
            except json.JSONDecodeError as exc:
                if len(buf) - pos > MAX_JOB_CHARS:
                    raise TraceError(f"one job of more than {MAX_JOB_CHARS:,} characters: not "
                                     "a Philly job log", path, line) from None
                if not fill():
                    at = line + buf.count("\n", pos, exc.pos)
                    raise TraceError(f"bad JSON: {exc.msg}", path, at) from None
            except ValueError:  # Python's limit on an integer's digits (4,300)
                raise TraceError("a number of thousands of digits: not a Philly job log",
                                 path, line) from None
        yield line, value
        line += buf.count("\n", pos, end)
        pos = end
        expect_item = False
    if skip_blank() is not None:
        raise TraceError("text after the end of the JSON list", path, line)


def _job(obj: object, path: str, line: int) -> Tuple[Optional[TraceJob], float]:
    if not isinstance(obj, dict):
        raise BadRow("not a job object")
    submitted = obj.get("submitted_time")
    if not isinstance(submitted, str) or submitted in ("", "None"):
        raise BadRow("no submitted_time")
    submit = instant(submitted, "submitted_time")
    attempts = obj.get("attempts")
    if not isinstance(attempts, list) or len(attempts) > MAX_PARTS:
        raise BadRow("bad attempts")
    if not attempts:
        raise BadRow("no attempt (never ran)")
    run = 0.0
    gpus = nodes = 0
    for att in attempts:
        if not isinstance(att, dict):
            raise BadRow("bad attempts")
        start, end = att.get("start_time"), att.get("end_time")
        if not isinstance(start, str) or not isinstance(end, str) or "None" in (start, end):
            raise BadRow("an attempt without a start or end time (still running?)")
        length = instant(end, "end_time") - instant(start, "start_time")
        if length < 0:
            raise BadRow("an attempt ends before it starts")
        run += length
        detail = att.get("detail") or []
        if not isinstance(detail, list) or len(detail) > MAX_PARTS:
            raise BadRow("bad attempt detail")
        held = 0
        for server in detail:
            held += len(server.get("gpus") or []) if isinstance(server, dict) else 0
        if held > gpus:
            gpus, nodes = held, len(detail)
    if run > MAX_RUN_S:
        raise BadRow("run time out of range")
    if gpus > MAX_JOB_GPUS:
        raise BadRow("GPU count out of range")
    if gpus == 0:
        return None, submit
    raw_id = obj.get("jobid")
    if isinstance(raw_id, int) and not isinstance(raw_id, bool) and raw_id.bit_length() > 64:
        raise BadRow("job id out of range")
    job_id = str(raw_id or line)
    return TraceJob(job_id=job_id[:64], submit=submit, run_time=run, gpus=gpus,
                    nodes=nodes or None, where=f"{path}:{line}"), submit
