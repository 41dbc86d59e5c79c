"""Submitting a job for the placement daemon: held, and tagged with its request.

``slurmtopo sbatch --daemon ... -- CMD`` renders the usual batch script
(plan embedded, ``slurmtopo bind`` at start) and calls
:func:`submit_for_daemon`, which

1. reads the shape the script asks Slurm for (``--nodes``,
   ``--ntasks-per-node``, ``--gpus-per-node``) from its ``#SBATCH`` lines;
2. turns ``--switches``/``--segment`` directives into comments: the daemon
   decides the nodes itself and pins them, and a leaf-count request would
   only make Slurm hold a pinned job that spans more leaves (a fallback);
3. writes the request into the job comment (``slurmtopo:v1:{...}``, see
   :mod:`slurmtopo.daemon.protocol`; a spool file when it is too long),
   with the job's hazard policy and NCCL release, so that the daemon
   checks the placement it pins as the submit-time plan was checked;
4. submits with ``sbatch --hold --comment=...`` and returns the job id.

Nothing else happens at submit time: the daemon finds the job by its
comment, and Slurm is the only record of it.
"""
from __future__ import annotations

import os
import re
import time
from typing import List, Optional, Sequence, Tuple

from slurmtopo.daemon.jobhazards import JobHazards
from slurmtopo.daemon.protocol import DEFAULT_SPOOL, Shape, make_comment
from slurmtopo.daemon.spool import STATUS_FILE, spool_path
from slurmtopo.daemon.status import liveness, read_status
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_file
from slurmtopo.sbatch.directives import option_values, script_options

_DIRECTIVE = re.compile(r"^#SBATCH\s+(.*?)\s*$")
#: directives the daemon replaces by pinning nodes (the segment flags mean
#: nothing without --segment)
DROPPED = ("--switches", "--segment", "--spread-segments", "--consolidate-segments")


def _count(text: Optional[str]) -> Optional[int]:
    """``8``, ``h100:8``, ``2-2`` -> 8/8/2; None when absent or not a count."""
    if text is None:
        return None
    text = text.split(":")[-1].split("-")[0].strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def script_shape(script_text: str, args: Sequence[str] = ()) -> Shape:
    """The allocation shape the script (and extra sbatch args, which win)
    asks for, read as sbatch reads it (:func:`slurmtopo.sbatch.directives.
    script_options`: the last value given wins)."""
    values = option_values(script_options(script_text, args))
    gpn = values.get("gpus-per-node")
    if gpn is None:
        gres = values.get("gres")
        if gres and gres.startswith("gpu"):
            gpn = gres
    return Shape(nodes=_count(values.get("nodes")), gpus_per_node=_count(gpn),
                 tasks_per_node=_count(values.get("ntasks-per-node")))


def prepare_script(script_text: str) -> Tuple[str, List[str]]:
    """The script with ``--switches``/``--segment`` directives commented
    out, and notes saying so."""
    out, notes = [], []
    in_header = True
    for i, line in enumerate(script_text.splitlines(keepends=True)):
        s = line.strip()
        if i > 0 and in_header and s and not s.startswith("#"):
            in_header = False
        m = _DIRECTIVE.match(s) if in_header else None
        if m and any(w.split("=", 1)[0] in DROPPED for w in m.group(1).split()):
            opt = m.group(1)
            out.append(f"# slurmtopo daemon: {opt} dropped (the daemon pins the nodes)\n")
            notes.append(f"{opt} dropped: the placement daemon chooses and pins the nodes")
            continue
        out.append(line)
    return "".join(out), notes


#: a heterogeneous job's components are separated by this line in a script
#: (``packjob``: its name before Slurm 20.02) or by ":" on sbatch's line
_HET_LINE = re.compile(r"^#SBATCH\s+(?:hetjob|packjob)\b", re.M)


def refuse_arrays(script_text: str, args: Sequence[str] = ()) -> None:
    """An array job or a heterogeneous job cannot be the daemon's: releasing
    its id releases every task or component at once (two tasks started
    under --max-releases 1), Slurm does not pin an array's nodes ("Job
    resizing not supported for job arrays") and `uhold` leaves running
    tasks held. Refused here, before the job exists; the daemon rejects
    one that gets past this (docs/daemon.md)."""
    if ":" in [str(a) for a in args] or _HET_LINE.search(script_text):
        raise SlurmtopoError("a heterogeneous job (hetjob) cannot be combined with --daemon: "
                             "the placement daemon pins one job's nodes; drop --daemon")
    values = option_values(script_options(script_text, args))
    if values.get("array") is not None:
        raise SlurmtopoError(f"--array {values['array']} cannot be combined with --daemon: the "
                             "placement daemon pins and releases one job at a time (an array's "
                             "tasks would all be released at once); submit the tasks as jobs "
                             "of their own, or drop --daemon")


def submit_for_daemon(backend, request, script_text: str, inventory_path: Optional[str] = None,
                      *, args: Sequence[str] = (), spool: Optional[str] = None,
                      notes: Optional[List[str]] = None, launcher: Optional[str] = None,
                      hazards: Sequence[str] = (), nccl_version: Optional[str] = None) -> int:
    """Submit ``script_text`` held, tagged with ``request`` (a JobRequest),
    for the placement daemon; returns the job id.

    ``backend`` is a :class:`slurmtopo.slurm.SlurmBackend`. ``args`` are
    extra sbatch options (argv items). ``spool`` is the daemon's spool
    directory, needed only when the request does not fit in a comment.
    ``inventory_path`` is informational: the daemon plans with its own
    ``--inventory`` (the script's embedded plan keeps the submit-time path
    for ``slurmtopo bind``). Notes for the user are appended to ``notes``.
    ``launcher``: the script's launcher (None: srun), so that the daemon
    plans only placements it can start. ``hazards`` (``KIND=LEVEL``
    items) and ``nccl_version``: the job's hazard policy and the NCCL
    release it loads (docs/hazards.md), carried in the request for the
    daemon's own check of the nodes it picks.
    """
    if any(str(a).startswith("--comment") for a in args):
        raise SlurmtopoError("--comment cannot be combined with --daemon: the job comment "
                             "carries the daemon's request")
    if "comment" in option_values(script_options(script_text)):
        raise SlurmtopoError("the script sets #SBATCH --comment, which --daemon needs for its "
                             "request; remove it")
    refuse_arrays(script_text, args)
    text, dropped = prepare_script(script_text)
    shape = script_shape(text, args)
    comment = make_comment(request, shape, spool, launcher=launcher,
                           hazards=JobHazards.of(hazards, nccl_version))
    job_id = backend.submit(text, args=[*map(str, args), f"--comment={comment}"], hold=True)
    if notes is not None:
        notes.extend(dropped)
        notes.append(f"job {job_id} submitted held for the placement daemon "
                     f"(comment {comment[:60]}{'...' if len(comment) > 60 else ''})")
    return int(job_id)


def no_daemon_warnings(spool: Optional[str]) -> List[str]:
    """A warning when no placement daemon runs with ``spool`` (None: the
    default one), told from its process (:func:`slurmtopo.daemon.status.
    liveness`): a job submitted held for it would wait until one starts."""
    where = spool or DEFAULT_SPOOL
    doc: dict = {}
    try:
        path = spool_path(where)
        raw = read_file(path, STATUS_FILE, 64 << 20, {os.stat(path).st_uid}, "status file")
        doc = read_status(raw.decode("utf-8", errors="replace"), os.path.join(path, STATUS_FILE))
    except (OSError, SlurmtopoError):
        pass
    if liveness(where, doc, time.time()).running:
        return []
    return [f"warning: no placement daemon is running with spool {where} "
            "(`slurmtopo daemon status` says more); the job stays held until one "
            "releases it"]
