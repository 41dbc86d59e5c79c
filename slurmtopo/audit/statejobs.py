"""The running jobs of a state snapshot (``slurmtopo audit --state``).

A state snapshot (docs/schema.md) may list, beside its nodes, the jobs
that hold GPUs::

    jobs:
      - {id: "4711", name: train, nodes: "node[1-2]", gpus: "0-7"}   # the same GPUs on each
      - {id: "4712", nodes: "node[3-4]", gpus: {node3: "0-3", node4: "4-7"}}

``slurmtopo state --jobs`` writes them. Every problem is one error at
``file:line``; a job's GPUs are busy whatever the nodes section says.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

from slurmtopo.audit.placements import RunningJob
from slurmtopo.files.yamlio import Reader, as_float, as_str
from slurmtopo.inventory.hostlist import expand_hostlist, fold_hostlist
from slurmtopo.inventory.model import Inventory, format_cpulist, parse_cpulist

JOB_KEYS = {"id", "name", "nodes", "gpus", "start"}
#: a job id as Slurm writes one (``4711``, an array task ``4711_3``, a het
#: component ``4711+1``)
JOB_ID = re.compile(r"[0-9]{1,20}([_+][0-9]{1,10})?")
#: latest start accepted (seconds since the epoch: the year 5138)
MAX_EPOCH = 1e11
#: longest job name kept (Slurm's own limit is lower)
MAX_NAME = 256
#: most jobs a snapshot may list
MAX_JOBS = 100_000


def _ids(value: Any) -> Tuple[int, ...]:
    if isinstance(value, list):
        return tuple(sorted({int(v) for v in value}))
    if isinstance(value, bool) or value is None:
        raise ValueError("not a GPU list")
    return tuple(sorted(parse_cpulist(str(value))))


def parse_jobs(data: Any, path: str, inv: Inventory) -> List[RunningJob]:
    """The ``jobs`` of a state document ``data`` (already parsed)."""
    r = Reader(path)
    if not isinstance(data, dict) or not data.get("jobs"):
        return []
    seq = r.sequence(data["jobs"], "jobs", Reader.line(data, "jobs"))
    if len(seq) > MAX_JOBS:
        raise r.error(f"{len(seq)} jobs: at most {MAX_JOBS}", Reader.line(data, "jobs"))
    out: List[RunningJob] = []
    seen: Dict[str, Any] = {}
    for i, item in enumerate(seq):
        e = r.mapping(item, "job", JOB_KEYS, Reader.line(seq, i))
        line = Reader.line(e) or Reader.line(seq, i)
        job_id = r.need(e, "id", "job", as_str)
        if not JOB_ID.fullmatch(job_id):
            raise r.error(f"job id {job_id[:40]!r} is not a Slurm job id (4711, 4711_3, "
                          "4711+1)", Reader.line(e, "id"))
        name = r.get(e, "name", "job", as_str, "")
        if len(name) > MAX_NAME:
            raise r.error(f"job {job_id}: a name of {len(name)} characters (at most "
                          f"{MAX_NAME})", Reader.line(e, "name"))
        if job_id in seen:
            raise r.error(f"job {job_id!r} is listed twice", line)
        seen[job_id] = line
        hosts = r.need(e, "nodes", f"job {job_id}", expand_hostlist)
        for h in hosts:
            if h not in inv.nodes:
                raise r.error(f"job {job_id}: node {h!r} is not in the inventory",
                              Reader.line(e, "nodes"))
        gpus = e.get("gpus")
        alloc: Dict[str, Tuple[int, ...]] = {}
        if isinstance(gpus, dict):
            for h in gpus:
                if h not in hosts:
                    raise r.error(f"job {job_id}: gpus names {h!r}, which is not one of its "
                                  "nodes", Reader.line(gpus, h))
            for h in hosts:
                if h not in gpus:
                    raise r.error(f"job {job_id}: gpus gives none for node {h!r}",
                                  Reader.line(e, "gpus"))
                alloc[h] = r.get(gpus, h, f"job {job_id}", _ids)
        else:
            ids = r.need(e, "gpus", f"job {job_id}", _ids)
            alloc = {h: ids for h in hosts}
        for h, ids in alloc.items():
            n = inv.nodes[h].hardware.gpu_count
            bad = [g for g in ids if g >= n]
            if bad or not ids:
                raise r.error(f"job {job_id}: node {h!r} has {n} GPUs, gpus names "
                              f"{bad or 'none'}", Reader.line(e, "gpus"))
        start = r.get(e, "start", "job", as_float, None)
        if start is not None and not 0 <= start <= MAX_EPOCH:
            raise r.error(f"job {job_id}: start {start!r} is not seconds since the epoch",
                          Reader.line(e, "start"))
        out.append(RunningJob(job_id=job_id, alloc=alloc, name=name,
                              start=start,
                              where=f"{path}:{line}" if line else path))
    taken: Dict[Tuple[str, int], str] = {}
    for job in out:
        for h, ids in job.alloc.items():
            for g in ids:
                other = taken.setdefault((h, g), job.job_id)
                if other != job.job_id:
                    raise r.error(f"jobs {other} and {job.job_id} both hold GPU {g} of {h}",
                                  seen[job.job_id])
    return out


def jobs_list(jobs: List[RunningJob]) -> List[Dict[str, Any]]:
    """``jobs`` as a state snapshot lists them (what :func:`parse_jobs` reads back)."""
    out = []
    for job in jobs:
        if not job.alloc:
            continue
        e: Dict[str, Any] = {"id": job.job_id}
        if job.name:
            e["name"] = job.name
        e["nodes"] = fold_hostlist(job.alloc)
        ids = set(job.alloc.values())
        if len(ids) == 1:
            e["gpus"] = format_cpulist(next(iter(ids)))
        else:
            e["gpus"] = {h: format_cpulist(g) for h, g in job.alloc.items()}
        if job.start is not None:
            e["start"] = job.start
        out.append(e)
    return out
