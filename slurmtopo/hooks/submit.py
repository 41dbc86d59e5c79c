"""A job's sbatch options, planned the way ``slurmtopo sbatch`` plans them
(pure: option values in, option values out).

cli_filter/lua (``slurm_cli_pre_submit``) hands slurmtopo's planning call
the options sbatch (or srun) ended up with: those of the script's
``#SBATCH`` lines, the environment and the command line, as
``slurm.json_cli_options`` writes them (only the options that are set, by
their long names, plus ``argv``). This module reads what the planner
needs from them (:func:`plan_inputs`: partition, node list, exclusions,
``--exclusive``, constraint, and the job's shape when the directive gives
no world size), detects a torchrun launch in the script
(:func:`script_launcher`), and turns the prepared job's
:class:`~slurmtopo.sbatch.SbatchRequest` back into the options to set
(:func:`option_changes`): ``--nodes``, the tasks, the GPUs, ``--switches``
or ``--segment``, the hold and comment for the placement daemon, and the
plan itself in the job's environment (``--export=...,SLURMTOPO_PLAN=...``).
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.hooks.directive import PREFIX
from slurmtopo.plan.launch_detect import detect
from slurmtopo.plan.planenv import PLAN_ENV

#: the largest options document read (json_cli_options of a job: a few KiB;
#: --wrap's command is the biggest part)
MAX_OPTIONS_BYTES = 1 << 20
#: what sbatch's option values may hold here: one line each
_VALUE_OK = re.compile(r"^[^\n\r\t\x00]*$")
#: options that set tasks or GPUs some other way than the plan's; their value
#: is rewritten to agree with the plan (see option_changes) or, for these,
#: the job is left alone with the reason
UNPLANNABLE = {
    "ntasks-per-gpu": "sets tasks per GPU",
    "ntasks-per-tres": "sets tasks per GPU",
    "ntasks-per-socket": "sets tasks per socket",
    "ntasks-per-core": "sets tasks per core",
    "tres-per-task": "sets GPUs per task as a TRES",
    "nodefile": "names the nodes in a file",
    "array": "makes a job array, whose tasks would all start on one plan",
    "distribution": "sets srun's task layout, which the per-task variables follow",
}


class HookRefusal(SlurmtopoError):
    """The hook cannot plan this job (it goes in unchanged, with the reason)."""

    exit_code = 3


@dataclass(frozen=True)
class SubmitOptions:
    """The options a submitting command ended up with: long name -> value
    (only those set), ``argv`` (sbatch: the script and its arguments;
    srun: the command) and which command it is."""

    values: Mapping[str, str]
    argv: Tuple[str, ...] = ()
    kind: str = "sbatch"

    @classmethod
    def from_json(cls, text: str, kind: str = "sbatch") -> "SubmitOptions":
        """``slurm.json_cli_options(options)``'s document."""
        if len(text) > MAX_OPTIONS_BYTES:
            raise SlurmtopoError(f"the job's options are {len(text):,} bytes; at most "
                                 f"{MAX_OPTIONS_BYTES:,}")
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SlurmtopoError(f"the job's options are not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise SlurmtopoError("the job's options are not a JSON object")
        argv = doc.pop("argv", []) or []
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise SlurmtopoError("the job's argv is not a list of strings")
        values = {str(k): str(v) for k, v in doc.items() if v is not None
                  and not str(k).startswith("spank:")}
        return cls(values=values, argv=tuple(argv), kind=kind)

    def get(self, name: str) -> Optional[str]:
        value = self.values.get(name)
        if value is None or value == "unset":
            return None
        return value


def _count(text: Optional[str]) -> Optional[int]:
    """``8``, ``h100:8``, ``2-2`` -> 8, 8, 2 (None: absent, a range, or no count)."""
    if text is None:
        return None
    t = text.rsplit(":", 1)[-1].strip()
    lo, _, hi = t.partition("-")
    if not lo.isdigit() or (hi and hi != lo):
        return None
    n = int(lo)
    return n if 0 < n <= 1 << 20 else None


def plan_inputs(opts: SubmitOptions) -> Dict[str, Any]:
    """The values of ``slurmtopo sbatch``'s options the job's own sbatch
    options give (its keyword names): partition, node list, exclusions,
    ``--exclusive``, constraint, job name, time, account."""
    out: Dict[str, Any] = {}
    for ours, theirs in (("partition", "partition"), ("nodelist", "nodelist"),
                         ("exclude", "exclude"), ("job_name", "job-name"),
                         ("time_limit", "time"), ("account", "account"),
                         ("sb_constraint", "constraint"), ("sb_qos", "qos"),
                         ("sb_reservation", "reservation")):
        value = opts.get(theirs)
        if value is not None:
            out[ours] = value
    out["exclusive"] = opts.get("exclusive") == "exclusive"
    return out


def job_shape(opts: SubmitOptions) -> Tuple[Optional[int], Optional[int]]:
    """(world size, ranks per node) the job's own options ask for, one GPU
    a rank: ``--ntasks`` or ``--nodes`` x ``--ntasks-per-node`` (else x
    ``--gpus-per-node``); each None when they do not say."""
    nodes = _count(opts.get("nodes"))
    tpn = _count(opts.get("ntasks-per-node"))
    gpn = _count(opts.get("gpus-per-node"))
    per = tpn or gpn
    world = _count(opts.get("ntasks")) or (nodes * per if nodes and per else None)
    return world, per


def script_launcher(texts: Sequence[str]) -> Optional[str]:
    """``torchrun`` when a command line of the script (or ``--wrap``) runs
    torchrun (``torchrun``, ``python -m torch.distributed.run``, after
    ``srun`` and its options or anywhere on the line), as
    :func:`slurmtopo.plan.launch_detect.detect` recognises it; else None.
    Comment lines are skipped. The directive's ``--launcher`` wins."""
    for text in texts:
        for line in text[:1 << 20].splitlines():
            s = line.strip()
            if not s or s.startswith("#") or ("torch" not in s):
                continue
            try:
                words = shlex.split(s, comments=True)
            except ValueError:
                words = s.split()
            for i, w in enumerate(words[:256]):
                base = w.rsplit("/", 1)[-1]
                if base == "torchrun" or base.startswith("python"):
                    found = detect(words[i:])
                    if found is not None and found.family == "torchrun":
                        return "torchrun"
    return None


def _gpus(spec: str, total: int) -> str:
    """``spec`` (``--gpus``, maybe typed) with ``total`` as its count."""
    head, sep, _ = spec.rpartition(":")
    return f"{head}:{total}" if sep else str(total)


def _gres(spec: str, gpn: str) -> str:
    """``--gres`` with its GPU entry as ``gpu:<gpn>`` (other resources kept)."""
    parts = []
    for item in spec.split(","):
        name = item.split(":", 1)[0].split("/", 1)[-1]
        parts.append(f"gpu:{gpn}" if name == "gpu" else item)
    return ",".join(parts)


def export_safe(text: str) -> str:
    """``text`` for a value of sbatch's ``--export`` list, which splits at
    commas and pairs quotes: every character but letters, digits and
    ``_.:-`` as ``%XX`` (job_submit.lua decodes it)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.:-") else
                   "".join(f"%{b:02X}" for b in c.encode("utf-8")) for c in text)


def option_changes(script, opts: SubmitOptions, launcher: str, plan_value: str,
                   daemon_comment: Optional[str] = None,
                   extra_env: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str]]:
    """(option, value) pairs to set so that sbatch asks Slurm for what the
    plan needs, as ``slurmtopo sbatch``'s script does (``script``: the
    prepared :class:`~slurmtopo.sbatch.SbatchRequest`). ``launcher``:
    ``srun`` (one task per rank) or ``torchrun`` (one per node).
    ``plan_value``: the plan for the job's environment
    (:func:`slurmtopo.plan.planenv.plan_env_value`). ``daemon_comment``: the
    placement daemon's tag; the job is then held for it and asks for no
    switches or segment (the daemon pins the nodes). ``extra_env``: more
    variables for the job's environment (values made :func:`export_safe`).
    Raises HookRefusal for options the plan cannot agree with."""
    for name, why in UNPLANNABLE.items():
        if opts.get(name) is not None:
            raise HookRefusal(f"the job {why} (--{name}); the plan sets nodes, tasks and GPUs "
                              "itself: drop it to have the job planned")
    gpn_text = script.gpus_per_node
    per_node = script.ntasks_per_node
    out: List[Tuple[str, str]] = [("nodes", str(script.nodes))]
    if launcher == "torchrun":
        if per_node is None:
            raise HookRefusal("torchrun needs the same number of ranks on every node; this "
                              "plan puts different numbers on its nodes")
        out += [("ntasks-per-node", "1"), ("ntasks", str(script.nodes))]
        per_task = _count(gpn_text) or per_node
    elif per_node is not None:
        out += [("ntasks-per-node", str(per_node)), ("ntasks", str(script.ntasks))]
        per_task = 1
    else:
        out += [("ntasks", str(script.ntasks))]
        per_task = 1
    if gpn_text is not None:
        out.append(("gpus-per-node", gpn_text))
        total = _count(gpn_text) * script.nodes
        if opts.get("gpus") is not None:
            out.append(("gpus", _gpus(opts.get("gpus"), total)))
        if opts.get("gres") is not None and "gpu" in opts.get("gres"):
            out.append(("gres", _gres(opts.get("gres"), gpn_text)))
    if script.gpus_per_task is not None or opts.get("gpus-per-task") is not None:
        out.append(("gpus-per-task", str(script.gpus_per_task or per_task)))
    if daemon_comment is None:
        for opt in script.topology:
            name, eq, value = opt[2:].partition("=")
            out.append((name, value if eq else name))
    else:
        mine = opts.get("comment")
        if mine and not mine.startswith(PREFIX):
            raise HookRefusal("--daemon needs the job comment for its request, and the job "
                              f"has one ({mine[:40]!r}); remove it")
        out += [("hold", "hold"), ("comment", daemon_comment)]
    current = opts.get("export")
    if current is not None and f"{PLAN_ENV}=" in current:
        raise HookRefusal(f"the job's --export already names {PLAN_ENV}")
    more = "".join(f",{k}={export_safe(v)}" for k, v in sorted((extra_env or {}).items()))
    out.append(("export", f"{current or 'ALL'},{PLAN_ENV}={plan_value}{more}"))
    for name, value in out:
        if not _VALUE_OK.match(value):
            raise HookRefusal(f"--{name}: a value with a newline or tab")
    return out
