"""``sacct -P`` output, so that a site can replay its own history.

Made by, for example::

    sacct -a -X -P -S 2025-01-01 -E 2025-02-01 \\
          -o JobID,Submit,Start,End,AllocTRES,NodeList,NNodes,Timelimit,State > jobs.txt

A header line of ``|``-separated field names, then one line per job (or
step). Fields read: ``JobID``, ``Submit``, ``Start``, ``End`` (or
``Elapsed``), ``AllocTRES`` (GPUs from ``gres/gpu=N``, else the typed
``gres/gpu:TYPE=N`` summed; nodes from ``node=N``), and when present
``NNodes`` or ``NodeList`` (nodes), ``Timelimit`` (the time limit). Job
steps (``123.batch``, ``123.0``; absent with ``-X``), jobs that never
started (``Start`` of ``Unknown`` or ``None``), jobs still running (``End``
``Unknown``; kept, marked ``running``, when asked) and jobs without GPUs are
skipped and counted. Times are
Slurm's ``YYYY-MM-DDTHH:MM:SS``, durations ``[D-]HH:MM:SS``.
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple, Union

from slurmtopo.inventory.hostlist import count_hostlist, expand_hostlist, select_hostlist
from slurmtopo.simulate.trace import (MAX_JOB_GPUS, MAX_RUN_S, SACCT, BadRow, JobCollector,
                                      RowLog, Trace, TraceError, TraceJob, instant, whole)
from slurmtopo.slurmfmt.gres_strings import tres_gpu_terms

NEEDED = ("jobid", "submit", "start", "alloctres")
#: longest line read (AllocTRES and NodeList of a big job fit easily)
MAX_LINE = 256 * 1024
_NOT_A_TIME = ("unknown", "none", "", "n/a")


def slurm_duration(text: str, what: str) -> Optional[float]:
    """Slurm's ``[D-]HH:MM:SS`` (also ``MM:SS``, ``MM``, ``D-HH``,
    ``D-HH:MM``) in seconds; None for ``UNLIMITED``/``Partition_Limit``."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "PARTITION_LIMIT", "INVALID", "NONE", ""):
        return None
    days = 0
    rest = text
    if "-" in text:
        d, _, rest = text.partition("-")
        days = whole(d, what, 0, 366)
        parts = rest.split(":")
        if not 1 <= len(parts) <= 3:
            raise BadRow(f"bad {what}")
        parts += ["0"] * (3 - len(parts))  # D-HH, D-HH:MM
    else:
        parts = rest.split(":")
        if not 1 <= len(parts) <= 3:
            raise BadRow(f"bad {what}")
        parts = ["0"] * (3 - len(parts)) + parts if len(parts) > 1 else ["0", parts[0], "0"]
    h, m = whole(parts[0], what, 0, 1 << 20), whole(parts[1], what, 0, 1 << 20)
    s = whole(parts[2], what, 0, 1 << 20)
    total = days * 86400.0 + h * 3600.0 + m * 60.0 + s
    if total > MAX_RUN_S:
        raise BadRow(f"{what} out of range")
    return total


def _tres(text: str) -> Tuple[int, Optional[int]]:
    """(GPUs, nodes) of an AllocTRES string (its grammar:
    :func:`slurmtopo.slurmfmt.gres_strings.tres_gpu_terms`)."""
    node_term, untyped, typed = tres_gpu_terms(text)
    nodes = None if node_term is None else whole(node_term, "node count in AllocTRES", 0,
                                                  MAX_JOB_GPUS)
    typed_sum = sum(whole(v, "GPU count in AllocTRES", 0, MAX_JOB_GPUS) for v in typed)
    if untyped is not None:
        return whole(untyped, "GPU count in AllocTRES", 0, MAX_JOB_GPUS), nodes
    return typed_sum, nodes


def read_sacct(text: Union[str, Iterable[str]], path: str, limit: Optional[int] = None,
               keep_running: bool = False, hosts: bool = True, within=None) -> Trace:
    """The jobs of ``sacct -P`` output (see the module doc); with
    ``keep_running``, jobs still running are kept, marked ``running``
    (``slurmtopo audit``: they hold their GPUs to the end of the record);
    with ``hosts`` False, the jobs' ``hosts`` are left empty (NodeLists
    only checked and counted, see :class:`NodeLists`); ``within`` (a
    :class:`slurmtopo.inventory.hostlist.HostIndex`, the inventory's nodes): only
    those hosts are kept, found without expanding the NodeList."""
    numbered = enumerate((ln.rstrip("\r\n") for ln in
                          (text.splitlines() if isinstance(text, str) else text)), 1)
    header = None
    head_line = 0
    for n, line in numbered:
        if len(line) > MAX_LINE:
            raise TraceError(f"a line of {len(line)} characters: not sacct output", path, n)
        if line.strip():
            header, head_line = line, n
            break
    if header is None:
        raise TraceError("empty: no sacct header", path)
    names = [c.strip().lower() for c in header.split("|")]
    missing = [f for f in NEEDED if f not in names]
    if "end" not in names and "elapsed" not in names:
        missing.append("end (or elapsed)")
    if missing:
        raise TraceError("this is not `sacct -P` output with a header: it lacks "
                         + ", ".join(missing) + " (run sacct -P -o JobID,Submit,Start,End,"
                         "AllocTRES,...)", path, head_line)
    at = {name: i for i, name in enumerate(names)}
    log = RowLog(path)
    nodelists = NodeLists(hosts, within)
    jobs = JobCollector(path, limit)
    count = 0
    for n, line in numbered:
        if len(line) > MAX_LINE:
            raise TraceError(f"a line of {len(line)} characters: not sacct output", path, n)
        if not line.strip():
            continue
        count += 1
        cells = line.split("|")
        if len(cells) != len(names):
            log.skip(f"with other than {len(names)} fields", n)
            continue
        row = {name: cells[i].strip() for name, i in at.items()}
        try:
            job = _job(row, path, n, keep_running, nodelists)
        except BadRow as exc:
            log.skip(str(exc), n)
            continue
        jobs.add(job.submit, job)
    if not count:
        raise TraceError("no job lines under the sacct header", path, head_line)
    return jobs.finish(SACCT, count, log)


#: what stands for a NodeList's hosts outside the inventory (``within``):
#: no host name has blanks
OUTSIDE = "(nodes outside the inventory)"

#: distinct NodeLists (and host names) one read remembers; past it each row
#: pays its own expansion, so memory stays bounded on any trace
MAX_REMEMBERED = 200_000


class NodeLists:
    """The hosts of each distinct ``NodeList`` of one file, expanded once.

    Expanding a NodeList through ClusterShell (parse, then its sorted
    iteration) is nearly all of a row's cost when jobs span many nodes:
    some 0.25 ms of CPU for ``gpu[0001-0060,0100-0159]``, against 0.02 ms
    for the rest of the row. A site's history repeats its NodeLists (the
    same nodes run job after job), so each distinct text is expanded once
    per file and its tuple shared by every job that names it. Host names
    are shared likewise: 72,000 rows of 120 hosts hold a few thousand
    strings, not 8.6 million (700 MB before). Both maps live for one read
    only and keep at most :data:`MAX_REMEMBERED` entries each (a trace is
    read a line at a time, up to gigabytes: past that many distinct texts
    a NodeList is expanded again each time, never kept); a bad NodeList
    is remembered as bad.

    With ``hosts`` False (``slurmtopo simulate``, which places jobs itself
    and never looks at where they ran) a NodeList is only counted: the
    same checks, the same rows skipped, the same node counts, no names.

    With ``within`` (``slurmtopo audit``, which looks only at the
    inventory's nodes) a NodeList is never expanded: its ranges are
    compared with the inventory's names
    (:func:`slurmtopo.inventory.hostlist.select_hostlist`), so 500 rows of
    ``n[k-k+65535]`` cost what the inventory's names cost, not 32 million
    strings (186 s and 303 MB before); the nodes outside it show as one
    name the inventory has not (:data:`OUTSIDE`), so the job is skipped as
    one that ran elsewhere."""

    def __init__(self, hosts: bool = True, within=None) -> None:
        self._want_hosts = hosts
        self._within = within
        self._seen: Dict[str, Optional[Tuple[Tuple[str, ...], int]]] = {}
        self._names: Dict[str, str] = {}

    def hosts(self, text: str) -> Tuple[Tuple[str, ...], int]:
        """The hosts of ``text`` in :func:`~slurmtopo.inventory.hostlist.expand_hostlist`'s
        order (none when not wanted) and how many it names; :class:`BadRow`
        for one it refuses (too many names included)."""
        try:
            got = self._seen[text]
        except KeyError:
            got = self._expand(text)
            if len(self._seen) < MAX_REMEMBERED:
                self._seen[text] = got
        if got is None:
            raise BadRow("bad NodeList")
        return got

    def _expand(self, text: str) -> Optional[Tuple[Tuple[str, ...], int]]:
        try:
            if not self._want_hosts:
                return (), count_hostlist(text, "NodeList")
            if self._within is not None:
                names, count = select_hostlist(text, self._within, "NodeList")
                if count > len(names):
                    names.append(OUTSIDE)
                return tuple(names), count
            names = expand_hostlist(text, "NodeList")
        except ValueError:
            return None
        if len(self._names) >= MAX_REMEMBERED:
            return tuple(names), len(names)
        shared = self._names.setdefault
        return tuple([shared(n, n) for n in names]), len(names)


def _job(row: Dict[str, str], path: str, line: int, keep_running: bool = False,
         nodelists: Optional[NodeLists] = None) -> TraceJob:
    job_id = row["jobid"]
    if not job_id:
        raise BadRow("without a JobID")
    if "." in job_id:
        raise BadRow("job steps (not jobs)")
    if row["start"].lower() in _NOT_A_TIME:
        raise BadRow("that never started")
    submit = instant(row["submit"], "Submit")
    start = instant(row["start"], "Start")
    end_text = row.get("end")
    running = False
    if end_text is not None and end_text.lower() not in _NOT_A_TIME:
        run = instant(end_text, "End") - start
    elif keep_running and end_text is not None:  # End Unknown: it runs on
        run, running = 0.0, True
    elif row.get("elapsed"):
        run = slurm_duration(row["elapsed"], "Elapsed")
        if run is None:
            raise BadRow("still running")
    else:
        raise BadRow("still running")
    if run < 0:
        raise BadRow("ends before it starts")
    if run > MAX_RUN_S:
        raise BadRow("run time out of range")
    gpus, nodes = _tres(row["alloctres"])
    if gpus == 0:
        raise BadRow("without GPUs")
    if nodes is None and row.get("nnodes"):
        nodes = whole(row["nnodes"], "NNodes", 1, MAX_JOB_GPUS)
    hosts: Tuple[str, ...] = ()
    if row.get("nodelist") and row["nodelist"] not in ("None assigned", ""):
        hosts, named = (nodelists or NodeLists()).hosts(row["nodelist"])
        if nodes is None:
            nodes = named
    limit = slurm_duration(row["timelimit"], "Timelimit") if row.get("timelimit") else None
    return TraceJob(job_id=job_id[:64], submit=submit, run_time=run, gpus=gpus,
                    nodes=nodes or None, time_limit=limit or None, where=f"{path}:{line}",
                    wait=max(0.0, start - submit), hosts=hosts, running=running)
