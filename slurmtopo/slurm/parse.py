"""Pure parsers: what Slurm's commands print -> :class:`SlurmNode`, and the
helpers job records share (jobs themselves: :mod:`slurmtopo.slurm.jobrecord`,
which never reads a user's text as Slurm's fields).

No I/O here; the command-line backend runs the commands and hands the text
over, the unit tests hand over recorded output (tests/fixtures/slurm/).

What comes from where (Slurm 22.05, checked on the dev cluster; later
versions change some JSON shapes, which are handled too):

* ``scontrol show nodes --json`` (23.02 on; preferred where it exists):
  ``{"nodes": [...]}``, one record per node, the fields below with ``state``
  a list of flags (``["IDLE", "DRAIN"]``). 24.05+ ``sinfo --json`` instead
  prints ``{"sinfo": [...]}``, records that group nodes by state (read too,
  but only one-node groups carry GPU indices).
* ``sinfo --json`` (22.05): one record per node. ``state`` is the base state
  (``"mixed"``; a list such as ``["MIXED", "DRAIN"]`` from 23.02 on),
  ``state_flags`` the flags (``["DRAIN"]``), ``gres`` the configured GRES
  (``gpu:8(S:0-1)``, ``gpu:a6000:8(S:0-1)``), ``gres_used`` the GPUs held
  by jobs with their indices (``gpu:(null):3(IDX:0-2)``,
  ``gpu:a6000:2(IDX:4-5)``, ``gpu:(null):0(IDX:N/A)`` when none),
  ``features``/``active_features`` (comma string, a list later),
  ``partitions``, ``reason``.
* ``squeue --json``: every job slurmctld knows (22.05 ignores ``-j``/``-t``
  with ``--json``: filter here). ``gres_detail`` lists the GPUs held per
  allocated node (``["gpu:2(IDX:0-1)", "gpu:2(IDX:4-5)"]``) in the order of
  ``job_resources.allocated_nodes``; a held job is ``PENDING`` with reason
  ``JobHeldUser``/``JobHeldAdmin`` and priority 0.
* ``scontrol -d show job``: text (22.05 has no ``--json`` here). Besides
  the ``Key=Value`` fields, one detail line per group of nodes with the same
  allocation, only while the job runs:
  ``Nodes=node2 CPU_IDs=0-1 Mem=0 GRES=gpu:a6000:2(IDX:0-1)``.
* ``scontrol show node`` / ``scontrol show topology``: text.

Values in scontrol text may hold blanks (``JobName=a b``, ``Comment=x y``,
``Reason=fan failed [root@...]``): a token that does not look like
``Key=`` (a capitalised word followed by ``=``) continues the previous value,
and in the multi-line form ``JobName``, ``Comment`` and a ``Reason`` that
starts a line take the rest of the line.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

import datetime as _dt

from slurmtopo.errors import SlurmError
from slurmtopo.inventory.schema import expand_hostlist
from slurmtopo.slurm.backend import ACTIVE_JOB_STATES, SlurmJob, SlurmNode
from slurmtopo.slurmfmt.gres_strings import gpu_count, gpu_indices

#: base node states Slurm prints (lower case); anything else is a flag
BASE_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "down", "drained",
                              "draining", "fail", "failing", "future", "maint", "planned",
                              "reserved", "unknown", "error", "inval", "power_down",
                              "powered_down", "perfctrs", "blocked", "alloc", "mix"})
_STATE_ALIASES = {"alloc": "allocated", "mix": "mixed", "alloc+": "allocated"}
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})

#: keys whose value runs to the end of its line in ``scontrol show`` (multi-line form)
_REST_OF_LINE = {"Comment", "OS"}
_KEY = re.compile(r"^[A-Z][A-Za-z0-9_/:]*=")


# --------------------------------------------------------------------------
# helpers for JSON shapes that changed between Slurm versions


def _number(value: Any, default: int = 0) -> int:
    """22.05 prints plain numbers; 23.02+ ``{"set": true, "number": 5}``."""
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return default
        if not value.get("set", True):
            return default
        value = value.get("number", default)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _str_list(value: Any) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split(",") if x.strip() and x.strip() != "(null)")
    return tuple(str(x) for x in value if str(x))


def _hosts(text: Any) -> Tuple[str, ...]:
    if not text or text in ("(null)", "None assigned"):
        return ()
    if isinstance(text, (list, tuple)):
        return tuple(str(x) for x in text)
    try:
        return tuple(expand_hostlist(str(text)))
    except Exception:  # noqa: BLE001 - ValueError/InventoryError: not a hostlist
        raise SlurmError(f"cannot read Slurm's host list {text!r}") from None


def split_node_state(value: Any, flags: Iterable[str] = ()) -> Tuple[str, FrozenSet[str]]:
    """``"mixed"`` + ``["DRAIN"]``, ``["MIXED", "DRAIN"]`` or ``MIXED+DRAIN``
    -> ("mixed", {"drain"}). A trailing ``*`` (not responding), ``~``
    (powered down), ``#``, ``%``, ``$``, ``@``, ``!`` of sinfo's short
    states becomes the matching flag."""
    suffix_flags = {"*": "not_responding", "~": "powered_down", "#": "powering_up",
                    "%": "powering_down", "$": "maint", "@": "reboot_requested",
                    "!": "power_down", "^": "reboot_issued", "-": "planned"}
    parts: List[str] = []
    if isinstance(value, str):
        parts = [p for p in value.split("+") if p]
    elif value:
        parts = [str(p) for p in value]
    base = None
    out_flags = {str(f).lower() for f in flags}
    for p in parts:
        p = p.strip()
        while p and p[-1] in suffix_flags:
            out_flags.add(suffix_flags[p[-1]])
            p = p[:-1]
        low = _STATE_ALIASES.get(p.lower(), p.lower())
        if base is None and low in BASE_NODE_STATES:
            base = low
        else:
            out_flags.add(low)
    return base or "unknown", frozenset(out_flags)


def _job_state(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else "UNKNOWN"
    return str(value or "UNKNOWN").upper()


def _text(value: Any) -> str:
    """A job field as text: Slurm's ``(null)``/``None``/``N/A`` and a
    missing field are ""."""
    if value is None or isinstance(value, (dict, list)):
        return ""
    s = str(value).strip()
    return "" if s in ("(null)", "None", "N/A") else s


def _uid(value: Any) -> Optional[int]:
    """A uid as Slurm prints it (a number, or digits in text); None when
    it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1 << 32 else None
    if isinstance(value, str) and value.isdigit() and len(value) <= 10:
        return int(value)
    return None


def _none_if_empty(value: Any) -> Optional[str]:
    if value is None:
        return None
    s = str(value).strip()
    return None if s in ("", "None", "(null)") else s


def load_json(text_or_data: Any, what: str) -> Mapping[str, Any]:
    if isinstance(text_or_data, Mapping):
        return text_or_data
    try:
        data = json.loads(text_or_data)
    except (TypeError, ValueError) as exc:
        raise SlurmError(f"{what}: not JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise SlurmError(f"{what}: expected a JSON object")
    errors = data.get("errors") or []
    if errors:
        first = errors[0]
        msg = first.get("error") or first.get("description") if isinstance(first, Mapping) \
            else str(first)
        raise SlurmError(f"{what}: {msg}")
    return data


# --------------------------------------------------------------------------
# sinfo --json


def node_from_json(n: Mapping[str, Any]) -> SlurmNode:
    base, flags = split_node_state(n.get("state"), n.get("state_flags") or ())
    total = gpu_count(n.get("gres"))
    count, idx = gpu_indices(n.get("gres_used"))
    if idx is None:  # GPUs in use, indices unknown: assume the first ones
        idx = frozenset(range(min(count, total)))
    features = _str_list(n.get("active_features")) or _str_list(n.get("features"))
    return SlurmNode(
        name=str(n["name"]), state=base, flags=flags, gpus_total=total,
        gpus_used=frozenset(i for i in idx), features=features,
        partitions=_str_list(n.get("partitions")), reason=_none_if_empty(n.get("reason")),
        gres=str(n.get("gres") or ""), cpus_total=_number(n.get("cpus")),
        cpus_alloc=_number(n.get("alloc_cpus")))


def _sinfo_record_nodes(rec: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """One record of the 24.05+ ``sinfo --json`` (top-level ``sinfo``: nodes
    grouped by partition, state and configuration) -> node records in the
    ``scontrol show nodes --json`` shape. Only a group of one node carries
    that node's GPU indices; for a larger group the used count is spread
    over its nodes unknown, so callers prefer ``scontrol show nodes --json``."""
    names = (rec.get("nodes") or {}).get("nodes") or []
    gres = rec.get("gres") or {}
    feats = rec.get("features") or {}
    reason = rec.get("reason") or {}
    part = (rec.get("partition") or {}).get("name")
    cpus = rec.get("cpus") or {}
    out = []
    for name in names:
        out.append({
            "name": name, "state": (rec.get("node") or {}).get("state"),
            "gres": gres.get("total") if isinstance(gres, Mapping) else gres,
            "gres_used": (gres.get("used") if isinstance(gres, Mapping) else None)
            if len(names) == 1 else None,
            "active_features": feats.get("active") if isinstance(feats, Mapping) else feats,
            "features": feats.get("total") if isinstance(feats, Mapping) else feats,
            "partitions": [part] if part else [],
            "reason": reason.get("description") if isinstance(reason, Mapping) else reason,
            "cpus": cpus.get("total") if isinstance(cpus, Mapping) else cpus,
        })
    return out


def parse_nodes_json(text_or_data: Any, what: str = "scontrol show nodes --json") -> List[SlurmNode]:
    """Nodes from any JSON Slurm prints about them: a top-level ``nodes``
    list (``scontrol show nodes --json`` on every version that has it, and
    22.05's ``sinfo --json``) or a top-level ``sinfo`` list (``sinfo --json``
    from 24.05 on). A node listed in several partitions is merged."""
    data = load_json(text_or_data, what)
    records: List[Mapping[str, Any]] = list(data.get("nodes") or [])
    for rec in data.get("sinfo") or []:
        if isinstance(rec, Mapping):
            records.extend(_sinfo_record_nodes(rec))
    out: Dict[str, SlurmNode] = {}
    for n in records:
        if not isinstance(n, Mapping) or not n.get("name"):
            continue
        node = node_from_json(n)
        seen = out.get(node.name)
        if seen is None:
            out[node.name] = node
        elif node.partitions and not set(node.partitions) <= set(seen.partitions):
            out[node.name] = replace(seen, partitions=tuple(dict.fromkeys(
                seen.partitions + node.partitions)))
    return list(out.values())


# --------------------------------------------------------------------------
# scontrol text


def _tokens(line: str, rest_keys: Iterable[str] = ()) -> List[Tuple[str, str]]:
    """``A=1 B=x y C=z`` -> [("A", "1"), ("B", "x y"), ("C", "z")]."""
    rest = set(rest_keys)
    out: List[Tuple[str, str]] = []
    toks = line.split(" ")
    i = 0
    while i < len(toks):
        tok = toks[i]
        if _KEY.match(tok):
            k, v = tok.split("=", 1)
            if k in rest:
                v = " ".join([v] + toks[i + 1:]).rstrip()
                out.append((k, v))
                break
            out.append((k, v))
        elif out:
            k, v = out[-1]
            out[-1] = (k, f"{v} {tok}")
        i += 1
    return [(k, v.rstrip()) for k, v in out]


def scontrol_records(text: str, first_key: str) -> List[List[Tuple[str, str]]]:
    """Records of ``scontrol show <thing>`` (multi-line or ``-o``) as
    ordered (key, value) lists; repeated keys (the ``Nodes=`` detail lines of
    ``-d``) stay in order."""
    records: List[List[Tuple[str, str]]] = []
    cur: Optional[List[Tuple[str, str]]] = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        oneliner = False
        if line.startswith(first_key + "="):
            cur = []
            records.append(cur)
            # the -o form holds a whole record on one line
            oneliner = len(re.findall(r"(?:^|\s)[A-Z][A-Za-z0-9_/:]*=", line)) > 12
        if cur is None:
            continue
        if oneliner:
            cur.extend(_tokens(line))
            continue
        rest = set(_REST_OF_LINE)
        if line.startswith("Reason="):  # a node's reason line runs to its end
            rest.add("Reason")
        cur.extend(_tokens(line, rest))
    return records


def _first(rec: Sequence[Tuple[str, str]], key: str, default: Optional[str] = None) -> Optional[str]:
    for k, v in rec:
        if k == key:
            return v
    return default


def _time(value: Optional[str]) -> int:
    if not value or value in ("Unknown", "None", "N/A"):
        return 0
    try:
        return int(_dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp())
    except ValueError:
        return 0


def node_from_scontrol(rec: Sequence[Tuple[str, str]]) -> SlurmNode:
    base, flags = split_node_state(_first(rec, "State"))
    total = gpu_count(_first(rec, "Gres"))
    used_text = _first(rec, "GresUsed")
    if used_text is not None:
        count, idx = gpu_indices(used_text)
        if idx is None:
            idx = frozenset(range(min(count, total)))
    else:
        idx = frozenset()
    reason = _first(rec, "Reason")
    if reason:
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason)  # " [root@time]"
    return SlurmNode(
        name=_first(rec, "NodeName") or "", state=base, flags=flags, gpus_total=total,
        gpus_used=idx, features=_str_list(_first(rec, "ActiveFeatures")),
        partitions=_str_list(_first(rec, "Partitions")), reason=_none_if_empty(reason),
        gres=_first(rec, "Gres") or "", cpus_total=_number(_first(rec, "CPUTot")),
        cpus_alloc=_number(_first(rec, "CPUAlloc")))


def parse_scontrol_nodes(text: str) -> List[SlurmNode]:
    """``scontrol [-d] show node``; GPUs in use only with ``-d`` (GresUsed)."""
    return [node_from_scontrol(r) for r in scontrol_records(text, "NodeName")]


def parse_scontrol_topology(text: str) -> Dict[str, Dict[str, Any]]:
    """``scontrol show topology`` -> {switch: {"level": int, "nodes": (...),
    "switches": (...), "link_speed": int or None}}."""
    out: Dict[str, Dict[str, Any]] = {}
    for rec in scontrol_records(text, "SwitchName"):
        name = _first(rec, "SwitchName") or ""
        speed = _first(rec, "LinkSpeed")
        out[name] = {"level": _number(_first(rec, "Level")),
                     "nodes": _hosts(_first(rec, "Nodes")),
                     "switches": _hosts(_first(rec, "Switches")),
                     "link_speed": int(speed) if speed and speed.isdigit() else None}
    return out


def parse_scontrol_blocks(text: str) -> Dict[str, Tuple[str, ...]]:
    """``scontrol show topology`` under topology/block (23.11+):
    ``BlockName=b1 BlockIndex=0 Nodes=node[1-2] BlockSize=2`` -> {block:
    its nodes as Slurm holds them now}. A block with no node maps to ()."""
    out: Dict[str, Tuple[str, ...]] = {}
    for rec in scontrol_records(text, "BlockName"):
        out[_first(rec, "BlockName") or ""] = _hosts(_first(rec, "Nodes"))
    return out


@dataclass(frozen=True)
class JobAsks:
    """What a job asked of the topology and where it runs, as ``scontrol
    -d show job`` prints it (Slurm 22.05 to 26.05)."""

    job_id: str
    nodes: Tuple[str, ...]
    #: --segment (SegmentSize=, 24.11+), None when not asked
    segment: Optional[int] = None
    #: --switches count (Switches=N@TIME), None when not asked
    switches: Optional[int] = None
    #: the wait for them, as Slurm prints it
    switch_wait: Optional[str] = None
    state: str = ""
    user: str = ""
    name: str = ""


def parse_job_asks(text: str) -> Optional[JobAsks]:
    """The first job record of ``scontrol [-d] [-o] show job`` text."""
    recs = scontrol_records(text, "JobId")
    if not recs:
        return None
    rec = recs[0]
    seg = _first(rec, "SegmentSize")
    sw = _first(rec, "Switches") or ""
    count, _, wait = sw.partition("@")
    user = (_first(rec, "UserId") or "").split("(")[0]
    return JobAsks(job_id=_first(rec, "JobId") or "", nodes=_hosts(_first(rec, "NodeList")),
                   segment=int(seg) if seg and seg.isdigit() and int(seg) > 0 else None,
                   switches=int(count) if count.isdigit() and int(count) > 0 else None,
                   switch_wait=wait or None, state=(_first(rec, "JobState") or "").upper(),
                   user=user, name=_first(rec, "JobName") or "")


# --------------------------------------------------------------------------
# command errors


_PREFIX = re.compile(r"^(?:sbatch|scontrol|scancel|squeue|sinfo|srun|salloc):\s*(?:error:\s*)?",
                     re.I)


def error_text(stderr: str, stdout: str = "", command: str = "") -> str:
    """Slurm's own message, one line: every distinct error line of stderr
    (``sbatch: error: `` prefixes dropped), joined with ``; ``."""
    lines = []
    for line in (stderr or "").splitlines() + ([] if stderr and stderr.strip()
                                               else (stdout or "").splitlines()):
        line = _PREFIX.sub("", line.strip()).strip()
        if line and line not in lines:
            lines.append(line)
    text = "; ".join(lines) or f"{command or 'command'} failed without a message"
    if "Could not establish a configuration source" in text:  # Slurm's words name no fix
        if command == "sbatch":  # submitting: no state file spares Slurm here
            way = ("`slurmtopo plan ... -- CMD` writes the batch script without submitting it, "
                   "--dry-run prints it")
        else:
            way = "--state none or a snapshot file plans without Slurm"
        text = (f"{command or 'Slurm'}: no Slurm configuration found (set SLURM_CONF, or run on "
                f"a node of the cluster; {way}): " + text)
    return text
