"""How a held job tells the placement daemon what it needs (protocol v1).

A job handed to the daemon (``slurmtopo sbatch --daemon``) is submitted
*held* (``sbatch --hold``) with its request in the job's **comment**::

    slurmtopo:v1:{"layout":{"tp":4,"dp":2},"require":{"tp":"nvlink"},"wait":{"dp":600},"shape":{"nodes":2,"gpn":4,"tpn":4}}

i.e. the prefix ``slurmtopo:v1:`` followed by compact JSON (no blank: a
blank inside a string value is written ``\\u0020``, so the comment is one
word for ``scontrol``/``squeue`` parsers). Slurm 22.05 refuses comments
longer than 1024 bytes; when the JSON would make the comment longer than
:data:`COMMENT_LIMIT`, the request goes to a spool file instead, written
atomically *before* the job is submitted, and the comment only points at
it::

    slurmtopo:v1:@3f2a9c0d1e7b5a42        ->  <spool>/requests/3f2a9c0d1e7b5a42.json

(the name is the first 16 hex digits of the file's SHA-256, so a pointer
can never name a different request). Keeping the request in Slurm is the
point: nothing but Slurm has to survive for the daemon to find every job it
manages after a restart, and no shared file system is needed between login
nodes and the daemon's host in the common case.

JSON fields (all but ``layout`` optional)::

    layout     tp, cp, ep, pp, dp, expert_tp, order, convention, world
               (only values differing from the Layout defaults are written)
    require    kind -> level          hard constraints
    prefer     kind -> level          soft constraints
    wait       kind -> seconds        how long to wait for a preferred level
    gpn        --gpus-per-node of the request
    exclusive  true for whole nodes
    nodelist   hostlist the job may use;  exclude: hostlist it must not use
    msg        kind -> bytes per collective (cost model)
    shape      what the batch script asks Slurm for: nodes (--nodes), gpn
               (GPUs per node), tpn (--ntasks-per-node); the daemon keeps
               this shape when it pins nodes (see docs/daemon.md)

Comments the daemon writes back: a job it rejects (its layout can never
fit) gets ``slurmtopo:rejected: <reason>`` before it is cancelled (or left
held, see ``--on-reject``); that comment is no longer a v1 tag, so no
daemon looks at the job again.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Mapping, Optional

from slurmtopo.errors import SlurmtopoError

PREFIX = "slurmtopo:v1:"
REJECTED_PREFIX = "slurmtopo:rejected:"
#: Slurm 22.05 refuses a --comment longer than 1024 bytes; keep room
COMMENT_LIMIT = 1000
#: the largest request file the daemon reads (a hostile spool entry must
#: not make it read gigabytes)
MAX_REQUEST_BYTES = 1 << 20

_LAYOUT_DEFAULTS = {"tp": 1, "cp": 1, "ep": 1, "pp": 1, "dp": None, "expert_tp": None,
                    "order": "tp-cp-ep-dp-pp", "world": None, "convention": "megatron"}


class ProtocolError(SlurmtopoError):
    """A job carries a slurmtopo tag that cannot be read or is invalid."""


@dataclass(frozen=True)
class Shape:
    """What the batch script asks Slurm for (parsed from its directives)."""

    nodes: Optional[int] = None  # --nodes
    gpus_per_node: Optional[int] = None  # --gpus-per-node (count only)
    tasks_per_node: Optional[int] = None  # --ntasks-per-node

    def as_dict(self) -> Dict[str, int]:
        out = {}
        for key, value in (("nodes", self.nodes), ("gpn", self.gpus_per_node),
                           ("tpn", self.tasks_per_node)):
            if value is not None:
                out[key] = int(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Shape":
        def num(key):
            v = d.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ProtocolError(f"shape.{key} must be a whole number >= 1, got {v!r}")
            return v
        return cls(nodes=num("nodes"), gpus_per_node=num("gpn"), tasks_per_node=num("tpn"))


@dataclass(frozen=True)
class DaemonSpec:
    """Everything the daemon knows about one job's wishes."""

    request: Any  # slurmtopo.request.JobRequest
    shape: Shape = field(default_factory=Shape)
    source: str = "comment"  # "comment" or the spool file's path


# --------------------------------------------------------------------------
# encoding


def request_to_dict(req, shape: Optional[Shape] = None) -> Dict[str, Any]:
    """The v1 JSON form of a JobRequest (compact: defaults left out)."""
    from slurmtopo.hostlist import fold_hostlist

    lay = req.layout
    layout: Dict[str, Any] = {}
    for f in fields(lay):
        v = getattr(lay, f.name)
        if f.name in ("dp", "world", "expert_tp"):
            continue  # written below only when they carry information
        if v != _LAYOUT_DEFAULTS.get(f.name):
            layout[f.name] = v
    # world and dp are derived from each other: dp alone says it
    if lay.dp != 1:
        layout["dp"] = lay.dp
    if lay.expert_tp != lay.tp:
        layout["expert_tp"] = lay.expert_tp
    out: Dict[str, Any] = {"layout": layout}
    for key, value in (("require", req.require), ("prefer", req.prefer)):
        if value:
            out[key] = dict(value)
    if req.wait:
        out["wait"] = {k: (int(v) if float(v).is_integer() else float(v))
                       for k, v in req.wait.items()}
    if req.gpus_per_node is not None:
        out["gpn"] = int(req.gpus_per_node)
    if req.exclusive:
        out["exclusive"] = True
    if req.nodelist is not None:
        out["nodelist"] = fold_hostlist(req.nodelist) if req.nodelist else ""
    if req.exclude:
        out["exclude"] = fold_hostlist(req.exclude)
    if req.message_bytes:
        out["msg"] = dict(req.message_bytes)
    if shape is not None and shape.as_dict():
        out["shape"] = shape.as_dict()
    return out


def dumps_compact(data: Mapping[str, Any]) -> str:
    """Compact JSON with no blank anywhere (blanks inside strings become
    ``\\u0020``), so the comment is a single word."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, sort_keys=False)
    return text.replace(" ", "\\u0020")


def request_file_name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_comment(req, shape: Optional[Shape] = None, spool: Optional[str] = None,
                 limit: int = COMMENT_LIMIT) -> str:
    """The job comment carrying ``req``. When it would be longer than
    ``limit`` the request is written (atomically) under ``spool/requests``
    and the comment points at it; without a spool that is an error."""
    text = dumps_compact(request_to_dict(req, shape))
    comment = PREFIX + text
    if len(comment.encode()) <= limit:
        return comment
    if not spool:
        raise SlurmtopoError(
            f"the job's slurmtopo request is {len(comment)} bytes, more than a Slurm comment "
            f"holds ({limit}); give the daemon's --spool directory so it can be passed as a file "
            "(long --nodelist/--exclude lists are the usual cause)")
    from slurmtopo.fileio import atomic_write

    name = request_file_name(text)
    directory = os.path.join(spool, "requests")
    from slurmtopo.fileio import ensure_dir

    ensure_dir(directory, "request directory")
    atomic_write(os.path.join(directory, name + ".json"), text + "\n", mode=0o644)
    return f"{PREFIX}@{name}"


# --------------------------------------------------------------------------
# decoding


def is_tagged(comment: Optional[str]) -> bool:
    return bool(comment) and comment.startswith(PREFIX)


def is_rejected(comment: Optional[str]) -> bool:
    return bool(comment) and comment.startswith(REJECTED_PREFIX)


def rejected_comment(reason: str) -> str:
    """``slurmtopo:rejected: <reason>``, cut to fit a Slurm comment."""
    text = REJECTED_PREFIX + " " + " ".join(str(reason).split())
    raw = text.encode()
    if len(raw) > COMMENT_LIMIT:
        text = raw[:COMMENT_LIMIT - 3].decode(errors="ignore") + "..."
    return text


def _levels(d: Any, what: str) -> Dict[str, str]:
    if d is None:
        return {}
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in d.items()):
        raise ProtocolError(f"{what} must map group kinds to levels")
    return d


def spec_from_dict(data: Any, source: str = "comment") -> DaemonSpec:
    """Validate the v1 JSON and build the JobRequest; ProtocolError (one
    line) for anything wrong."""
    from slurmtopo.groups import Layout
    from slurmtopo.request import JobRequest

    if not isinstance(data, dict):
        raise ProtocolError("the slurmtopo request is not a JSON object")
    known = {"layout", "require", "prefer", "wait", "gpn", "exclusive", "nodelist", "exclude",
             "msg", "shape"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProtocolError(f"unknown field(s) in the slurmtopo request: {', '.join(unknown)}")
    lay = data.get("layout")
    if not isinstance(lay, dict):
        raise ProtocolError("the slurmtopo request has no layout")
    names = {f.name for f in fields(Layout)}
    bad = sorted(set(lay) - names)
    if bad:
        raise ProtocolError(f"unknown layout field(s): {', '.join(bad)}")
    try:
        layout = Layout(**lay).resolved()
        wait = data.get("wait") or {}
        if not isinstance(wait, dict):
            raise ProtocolError("wait must map group kinds to seconds")
        msg = data.get("msg") or {}
        if not isinstance(msg, dict):
            raise ProtocolError("msg must map group kinds to bytes")
        nodelist = data.get("nodelist")
        req = JobRequest(layout=layout, require=_levels(data.get("require"), "require"),
                         prefer=_levels(data.get("prefer"), "prefer"),
                         gpus_per_node=data.get("gpn"), exclusive=bool(data.get("exclusive")),
                         nodelist=None if nodelist is None else (nodelist or ()),
                         exclude=data.get("exclude") or (), message_bytes=msg, wait=wait)
        shape = Shape.from_dict(data.get("shape") or {})
    except ProtocolError:
        raise
    except SlurmtopoError as exc:
        raise ProtocolError(exc.message) from None
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"bad slurmtopo request: {exc}") from None
    return DaemonSpec(request=req, shape=shape, source=source)


def parse_comment(comment: Optional[str], spool: Optional[str] = None) -> Optional[DaemonSpec]:
    """The request a job comment carries; None when the comment is not a
    v1 tag (the job is not the daemon's). Raises ProtocolError when it is a
    tag but cannot be read."""
    if not is_tagged(comment):
        return None
    body = comment[len(PREFIX):].strip()
    source = "comment"
    if body.startswith("@"):
        name = body[1:]
        if not name or not all(c in "0123456789abcdef" for c in name):
            raise ProtocolError(f"bad request file name {name!r} in the job comment")
        if not spool:
            raise ProtocolError("the request is in a spool file but the daemon has no --spool")
        path = os.path.join(spool, "requests", name + ".json")
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_REQUEST_BYTES + 1)
        except OSError as exc:
            raise ProtocolError(f"cannot read the job's request file {path} "
                                f"({exc.strerror})") from None
        if len(raw) > MAX_REQUEST_BYTES:
            raise ProtocolError(f"request file {path} is too big")
        body = raw.decode("utf-8", errors="replace").strip()
        if request_file_name(body) != name:
            raise ProtocolError(f"request file {path} does not match its name (edited?)")
        source = path
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"the slurmtopo request is not valid JSON ({exc.msg})") from None
    return spec_from_dict(data, source)
