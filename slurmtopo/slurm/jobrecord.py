"""Slurm's job records, read so that no user text is ever read as structure.

A job record mixes what Slurm decides (the job's state, its hold and its
reason, its owner, priority and id) with what users write (the job's name,
comment, working directory, output paths, mail address, and from 25.11 the
whole ``sbatch`` command line with the script's arguments). The placement
daemon acts on other users' jobs with an operator's rights, so a user must
never be able to make their text read as Slurm's fields: a job named
``x Reason=JobHeldUser`` must not lift an admin's hold, and one named
``x ReqNodeList=n[`` must not stop the daemon for everyone.

**JSON first.** Where Slurm prints JSON (``squeue --json`` from 21.08,
``scontrol show job --json ID`` from 23.02), every field is its own JSON
value and nothing a user writes can become another field:
:func:`jobs_from_json` reads it, one record at a time, and a record it
cannot read becomes an *unreadable* job (:attr:`SlurmJob.unreadable`)
instead of failing the whole listing.

**Text where there is no JSON** (``scontrol -d -o show job`` on 22.05 for
one job, every job where Slurm was built without the JSON plugins). The
text has no quoting: a value runs until the next ``Key=``, and nothing
marks where a user's value ends. :func:`read_text` therefore does not trust
a record unless its keys are exactly what Slurm itself prints:

* every token that reads as a key (``Word=`` after a blank) is one of the
  keys some Slurm from 22.05 to 26.05 prints for a job
  (:data:`SCONTROL_JOB_KEYS`, taken from ``slurm_sprint_job_info`` in
  ``src/api/job_info.c`` at ``slurm-22-05-8-1``, ``slurm-23-02-7-1`` and
  ``slurm-24-05-8-1``, and ``_sprint_job_info`` in
  ``src/scontrol/info_job.c`` at ``slurm-25-11-7-1`` and
  ``slurm-26-05-3-1``, in SchedMD/slurm);
* they come in the order Slurm prints them, each at most once (only the
  ``-d`` detail group ``Nodes= CPU_IDs= Mem= GRES=`` repeats, in its place);
* the keys every record has (:data:`ALWAYS_KEYS`) are all there;
* a one-line record (``-o``) is one line: a second line is a newline in a
  value.

A key a user wrote into their name either repeats one of Slurm's, comes out
of Slurm's order (``Reason=`` ahead of ``UserId=``), or is no key of Slurm's
at all; each makes the record *doubtful*: it is never split into fields.
The job is reported with :attr:`SlurmJob.unreadable` saying why, and a
daemon never acts on it (the backend first asks for the same job alone, or
as JSON, where it can).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.slurm.backend import ACTIVE_JOB_STATES, SlurmJob
from slurmtopo.slurm.parse import (HELD_REASONS, _hosts, _job_state, _none_if_empty,
                                   _number, _text, _time, _uid, load_json)
from slurmtopo.slurmfmt.gres_strings import gpu_indices

#: the tag that marks a placement daemon's job (slurmtopo.daemon.protocol's
#: PREFIX; the daemon is above this layer): an unreadable record that holds
#: it is one the daemon must report rather than ignore
TAG_PREFIX = "slurmtopo:v1:"

#: every key ``scontrol show job`` prints, Slurm 22.05 to 26.05, in the order
#: it prints them (the versions agree on the order; each adds keys). Where
#: Slurm prints a key through ``%s`` (``Req%s=``, ``MinMemory%s=``) it is
#: written out here.
SCONTROL_JOB_KEYS = (
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset",
    "JobName", "SLUID", "HetJobIdSet", "UserId", "GroupId", "MCS_label", "Priority", "Nice",
    "Account", "QOS", "WCKey", "JobState", "Reason", "FailedNode", "Dependency", "Requeue",
    "Restarts", "BatchFlag", "Reboot", "ExitCode", "DerivedExitCode", "RunTime", "TimeLimit",
    "TimeMin", "SubmitTime", "EligibleTime", "AccrueTime", "ResizeTime", "StartTime",
    "EndTime", "Deadline", "CronJob", "CrontabSpec", "PreemptEligibleTime", "PreemptTime",
    "SuspendTime", "SecsPreSuspend", "LastSchedEval", "Scheduler", "Partition",
    "AllocNode:Sid", "ReqNodeList", "ExcNodeList", "NodeList", "SchedNodeList",
    "BatchFeatures", "BatchHost", "StepMgrEnabled", "FedOrigin", "FedViableSiblings",
    "FedActiveSiblings", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES",
    "ReqTRES", "AllocTRES", "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "ThreadSpec",
    "JOB_GRES", "Nodes", "CPU_IDs", "Mem", "GRES", "MinCPUsNode", "MinMemoryNode",
    "MinMemoryCPU", "MinTmpDiskNode", "MemUpdate", "Features", "DelayBoot", "ClusterFeatures",
    "Prefer", "Reservation", "OverSubscribe", "Exclusive", "Contiguous", "Licenses",
    "LicensesAlloc", "Network", "Command", "SubmitLine", "WorkDir", "AdminComment",
    "SystemComment", "Comment", "Extra", "StdErr", "StdIn", "StdOut", "SegmentSize",
    "SpreadSegments", "ConsolidateSegments", "Switches", "BurstBuffer", "BurstBufferState",
    "Power", "GresAllowTaskSharing", "GresEnforceBind", "GresOneTaskPerSharing",
    "KillOInInvalidDependent", "KillOnInvalidDependent", "SpreadJob", "ExpeditedRequeue",
    "OOMKillStep", "CpusPerTres", "MemPerTres", "TresBind", "TresFreq", "TresPerJob",
    "TresPerNode", "TresPerSocket", "TresPerTask", "MailUser", "MailType", "NtasksPerTRES",
    "ContainerType", "Container", "ContainerID", "SELinuxContext", "ResvPorts")
#: the ``-d`` detail of a running job: one group per set of nodes with the
#: same allocation, so these repeat, together, in their place
DETAIL_KEYS = frozenset({"Nodes", "CPU_IDs", "Mem", "GRES"})
_POSITION = {k: i for i, k in enumerate(SCONTROL_JOB_KEYS)}
_DETAIL_POSITION = _POSITION["Nodes"]
#: keys every job record has on every version (a record without one of
#: them is cut short: a newline in a value)
ALWAYS_KEYS = ("JobId", "JobName", "UserId", "Priority", "JobState", "Reason", "SubmitTime",
               "Partition", "NumNodes")
_KEY = re.compile(r"^([A-Z][A-Za-z0-9_/:]*)=")


# --------------------------------------------------------------------------
# JSON (squeue --json, scontrol show job --json)


def _allocated_node_names(j: Mapping[str, Any]) -> Tuple[str, ...]:
    res = j.get("job_resources") or {}
    names: List[str] = []
    alloc = res.get("allocated_nodes") if isinstance(res, Mapping) else None
    if isinstance(alloc, list):  # 22.05
        names = [str(a.get("nodename")) for a in alloc if isinstance(a, Mapping)
                 and a.get("nodename")]
    nodes = res.get("nodes") if isinstance(res, Mapping) else None
    if not names and isinstance(nodes, Mapping):  # 23.11+: nodes.allocation[].name
        names = [str(a.get("name")) for a in nodes.get("allocation") or []
                 if isinstance(a, Mapping) and a.get("name")]
    return tuple(names)


def job_gpus_from_detail(hosts: Sequence[str], detail: Sequence[str]
                         ) -> Dict[str, Tuple[int, ...]]:
    out: Dict[str, Tuple[int, ...]] = {}
    for host, gres in zip(hosts, detail):
        _count, idx = gpu_indices(gres)
        if idx:
            out[host] = tuple(sorted(idx))
    return out


def job_from_json(j: Mapping[str, Any]) -> SlurmJob:
    """One job of ``squeue --json`` / ``scontrol show job --json`` (22.05's
    plain numbers and 23.02+'s ``{"set", "number"}`` alike)."""
    state = _job_state(j.get("job_state"))
    reason = _none_if_empty(j.get("state_reason"))
    priority = _number(j.get("priority"))
    nodes = _hosts(j.get("nodes")) if state not in ("PENDING",) else ()
    detail = list(j.get("gres_detail") or [])
    order = _allocated_node_names(j) or nodes
    gpus = job_gpus_from_detail(order, detail) if detail and state in ACTIVE_JOB_STATES else {}
    held = reason in HELD_REASONS or (state == "PENDING" and priority == 0)
    shared = j.get("shared")
    return SlurmJob(
        job_id=_number(j.get("job_id")), name=str(j.get("name") or ""),
        user=str(j.get("user_name") or j.get("user_id") or ""), state=state, reason=reason,
        priority=priority, submit_time=_number(j.get("submit_time")), nodes=nodes, gpus=gpus,
        comment=str(j.get("comment") or ""), held=held,
        req_nodes=_hosts(j.get("required_nodes")), partition=str(j.get("partition") or ""),
        num_nodes=_number(j.get("node_count")),
        gres_request=str(j.get("tres_per_node") or j.get("tres_per_job") or
                         j.get("tres_per_task") or ""),
        exclusive=(shared == "none" or (isinstance(shared, list) and "none" in shared)),
        user_id=_uid(j.get("user_id")), reservation=_text(j.get("resv_name")),
        qos=_text(j.get("qos")), account=_text(j.get("account")),
        exc_nodes=_hosts(j.get("excluded_nodes")), features=_text(j.get("features")),
        work_dir=_text(j.get("current_working_directory")),
        array=bool(_number(j.get("array_job_id"))) or bool(_text(j.get("array_task_string"))),
        het=bool(_number(j.get("het_job_id"))))


def _json_job_id(j: Any) -> Optional[int]:
    if not isinstance(j, Mapping):
        return None
    n = _number(j.get("job_id"), -1)
    return n if 0 < n < 1 << 32 else None


def jobs_from_json(text_or_data: Any, what: str = "squeue --json",
                   states: Optional[Iterable[str]] = None,
                   job_ids: Optional[Iterable[int]] = None) -> List[SlurmJob]:
    """Every job of Slurm's JSON, one record at a time: a record that cannot
    be read is an unreadable job (its id, :attr:`SlurmJob.unreadable` saying
    why), never an error for the whole listing. ``states``/``job_ids``
    filter (22.05's ``squeue --json`` ignores ``-t`` and ``-j``)."""
    data = load_json(text_or_data, what)
    want_states = {s.upper() for s in states} if states is not None else None
    want_ids = {int(i) for i in job_ids} if job_ids is not None else None
    out = []
    for j in data.get("jobs") or []:
        try:
            job = job_from_json(j)
        except Exception as exc:  # noqa: BLE001 - one record, never the listing
            job_id = _json_job_id(j)
            if job_id is None:
                continue
            job = SlurmJob(job_id=job_id, state="UNKNOWN",
                           unreadable=f"Slurm's JSON record of it cannot be read "
                                      f"({type(exc).__name__})",
                           maybe_tagged=TAG_PREFIX in str(j.get("comment") or ""))
        if want_states is not None and job.state not in want_states and not job.unreadable:
            continue
        if want_ids is not None and job.job_id not in want_ids:
            continue
        out.append(job)
    return out


# --------------------------------------------------------------------------
# text (scontrol [-d] [-o] show job)


@dataclass(frozen=True)
class TextRecord:
    """One record of ``scontrol show job`` text: its (key, value) pairs when
    its keys are Slurm's own, and ``doubt`` saying why not otherwise (then
    ``pairs`` must not be read)."""

    job_id: Optional[int]
    pairs: Tuple[Tuple[str, str], ...]
    doubt: Optional[str]
    #: the record's text holds the placement daemon's tag somewhere
    maybe_tagged: bool = False


def _pairs(text: str) -> Tuple[Tuple[Tuple[str, str], ...], Optional[str]]:
    """(pairs, doubt) of one record's text (its lines joined by blanks)."""
    pairs: List[Tuple[str, str]] = []
    doubt: Optional[str] = None
    last = -1
    seen = set()
    for tok in text.split(" "):
        m = _KEY.match(tok)
        key = m.group(1) if m else None
        if key is not None and key not in _POSITION:
            doubt = doubt or f"{key[:24]}= is no field Slurm prints"
            key = None
        if key is None:
            if pairs:
                k, v = pairs[-1]
                pairs[-1] = (k, f"{v} {tok}")
            elif tok:
                doubt = doubt or "the record does not start with JobId="
            continue
        pos = _POSITION[key]
        if key in DETAIL_KEYS:
            if last > _DETAIL_POSITION:
                doubt = doubt or f"{key}= out of Slurm's order"
            last = _DETAIL_POSITION
        else:
            if key in seen:
                doubt = doubt or f"{key}= appears twice"
            elif pos <= last:
                doubt = doubt or f"{key}= out of Slurm's order"
            seen.add(key)
            last = max(last, pos)
        pairs.append((key, tok.split("=", 1)[1]))
    for key in ALWAYS_KEYS:
        if key not in seen:
            doubt = doubt or f"no {key}= (the record is cut: a newline in a value)"
    return tuple((k, v.rstrip()) for k, v in pairs), doubt


def _leading_id(line: str) -> Optional[int]:
    m = re.match(r"JobId=(\d{1,10})(?:\s|$)", line)
    return int(m.group(1)) if m and 0 < int(m.group(1)) < 1 << 32 else None


def read_text(text: str, one_liner: bool = True) -> List[TextRecord]:
    """The records of ``scontrol [-d] [-o] show job`` text, each with its
    doubt (see the module doc). A record starts at a line that starts with
    ``JobId=``; in the multi-line form (``one_liner`` False) it goes on over
    the lines that start with a blank. Any other line is a newline in a
    value: the record it continues is doubtful (and a line starting with
    ``JobId=`` inside a value starts a record of its own, whose id is then
    told apart by asking for that job alone: :func:`jobs_from_text`)."""
    groups: List[Tuple[Optional[int], List[str], Optional[str]]] = []
    for raw in text.split("\n"):
        if not raw.strip():
            continue
        if raw.startswith("JobId="):
            groups.append((_leading_id(raw), [raw], None))
            continue
        if not groups:
            continue
        job_id, lines, why = groups[-1]
        if one_liner or not raw[:1].isspace():
            why = why or "a newline in one of its values"
        groups[-1] = (job_id, lines + [raw], why)
    out = []
    for job_id, lines, why in groups:
        joined = " ".join(line.strip() for line in lines)
        pairs, doubt = _pairs(joined)
        doubt = why or doubt
        if job_id is None:
            doubt = doubt or "no job id"
        out.append(TextRecord(job_id, () if doubt else pairs, doubt,
                              maybe_tagged=TAG_PREFIX in joined))
    return out


def _first(pairs: Sequence[Tuple[str, str]], key: str) -> Optional[str]:
    for k, v in pairs:
        if k == key:
            return v
    return None


def job_gpus_from_text(pairs: Sequence[Tuple[str, str]]) -> Dict[str, Tuple[int, ...]]:
    """host -> GPU indices from the ``Nodes=... GRES=...`` detail of ``-d``."""
    out: Dict[str, Tuple[int, ...]] = {}
    hosts: Tuple[str, ...] = ()
    in_detail = False
    for k, v in pairs:
        if k == "Nodes":
            hosts = _hosts(v)
            in_detail = True
        elif k == "GRES" and in_detail:
            _count, idx = gpu_indices(v)
            if idx:
                for h in hosts:
                    out[h] = tuple(sorted(idx))
            in_detail = False
        elif k not in ("CPU_IDs", "Mem"):
            in_detail = False
    return out


def job_from_text(rec: TextRecord) -> SlurmJob:
    """The job of one record; a doubtful record gives an unreadable job
    that carries nothing but its id and the doubt."""
    if rec.doubt is not None or rec.job_id is None:
        return unreadable_job(rec.job_id or 0, rec.doubt or "no job id", rec.maybe_tagged)
    p = rec.pairs
    state = _job_state(_first(p, "JobState"))
    reason = _none_if_empty(_first(p, "Reason"))
    priority = _number(_first(p, "Priority"))
    user_field = _first(p, "UserId") or ""
    m = re.fullmatch(r"(.*)\((\d{1,10})\)", user_field)
    nodes = _hosts(_first(p, "NodeList")) if state != "PENDING" else ()
    num_nodes = (_first(p, "NumNodes") or "0").split("-", 1)[0]
    return SlurmJob(
        job_id=rec.job_id, name=_first(p, "JobName") or "",
        user=m.group(1) if m else user_field, state=state, reason=reason, priority=priority,
        submit_time=_time(_first(p, "SubmitTime")), nodes=nodes,
        gpus=job_gpus_from_text(p) if state in ACTIVE_JOB_STATES else {},
        comment=_first(p, "Comment") or "",
        held=reason in HELD_REASONS or (state == "PENDING" and priority == 0),
        req_nodes=_hosts(_first(p, "ReqNodeList")), partition=_first(p, "Partition") or "",
        num_nodes=_number(num_nodes),
        gres_request=_first(p, "TresPerNode") or _first(p, "TresPerJob") or "",
        exclusive=(_first(p, "OverSubscribe") == "NO"),
        user_id=_uid(m.group(2) if m else None), reservation=_text(_first(p, "Reservation")),
        qos=_text(_first(p, "QOS")), account=_text(_first(p, "Account")),
        exc_nodes=_hosts(_first(p, "ExcNodeList")), features=_text(_first(p, "Features")),
        work_dir=_text(_first(p, "WorkDir")),
        array=_first(p, "ArrayJobId") is not None, het=_first(p, "HetJobId") is not None)


def unreadable_job(job_id: int, why: str, maybe_tagged: bool = False) -> SlurmJob:
    """A job whose record cannot be read with certainty: its id and why."""
    return SlurmJob(job_id=job_id, state="UNKNOWN", unreadable=why, maybe_tagged=maybe_tagged)


def jobs_from_text(text: str, one_liner: bool = True) -> Tuple[List[SlurmJob], List[int]]:
    """(jobs, ids to ask about alone). A job id printed in more than one
    record, or by a doubtful record, cannot be told from this text: a user
    who writes a newline and ``JobId=<someone else's job>`` into a name
    prints a record for it. Those ids are returned for the caller to ask
    Slurm about one by one (``scontrol show job ID`` prints that job alone);
    the others' jobs are read here, each on its own (a record that cannot
    be read is an unreadable job, never an error for the listing)."""
    records = read_text(text, one_liner)
    count: Dict[int, int] = {}
    for r in records:
        if r.job_id is not None:
            count[r.job_id] = count.get(r.job_id, 0) + 1
    ask = sorted({r.job_id for r in records if r.job_id is not None
                  and (r.doubt is not None or count[r.job_id] > 1)})
    jobs = []
    for r in records:
        if r.job_id is None or r.job_id in ask:
            continue
        jobs.append(fenced_text_job(r))
    return jobs, ask


def fenced_text_job(rec: TextRecord) -> SlurmJob:
    """:func:`job_from_text`, a record it cannot read (a host list Slurm
    would not print, ``ReqNodeList=n[``) an unreadable job."""
    try:
        return job_from_text(rec)
    except Exception as exc:  # noqa: BLE001 - one record, never the listing
        return unreadable_job(rec.job_id or 0, f"its record cannot be read ({exc})"[:200],
                              rec.maybe_tagged)


def job_alone_from_text(text: str, job_id: int, one_liner: bool = True) -> Optional[SlurmJob]:
    """Job ``job_id`` from ``scontrol -o show job ID`` text (Slurm prints
    that job alone; an array job's tasks too): None when the text has no
    record of it; an unreadable job when the text has a doubtful record,
    or more than one of it."""
    records = read_text(text, one_liner)
    mine = [r for r in records if r.job_id == job_id]
    doubtful = [r for r in records if r.doubt is not None]
    if not mine and not doubtful:
        return None
    tagged = any(r.maybe_tagged for r in records)
    if doubtful:
        return unreadable_job(job_id, doubtful[0].doubt or "", tagged)
    if len(mine) > 1:
        return unreadable_job(job_id, "Slurm printed it twice", tagged)
    return fenced_text_job(mine[0])
