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

    slurmtopo:v1:@3f2a9c0d1e7b5a42c81f07d9e2b4a6c3  ->  <spool>/requests/3f2a...c3.json

(the name is the first 16 hex digits of the SHA-256 of the submitting
uid and the file's text, so a pointer can never name a different request
and two users' identical requests never share a name, then 16 random hex
digits, so that no one can take the name first: everyone may create files
in ``requests/``, and a name another user made there cannot be replaced).
Keeping the request in Slurm is the
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
    launcher   how the job starts its ranks (``--launcher``: srun when
               absent); the daemon plans only placements it can start
               (torchrun: node-contiguous ranks); a name this daemon does
               not know is a bad request
    work       the job's training step: framework, data-parallel style,
               overlaps, NCCL release and model description
               (:mod:`slurmtopo.daemon.jobstep`), so the daemon prices the
               step plan priced; absent: the default model
    hazards    the job's hazard policy and NCCL release (``--hazard``,
               ``--nccl-version``: :mod:`slurmtopo.daemon.jobhazards`), so
               the daemon checks the placement it pins as ``sbatch``
               checked its plan; absent: each rule's own severity

Comments the daemon writes back: a job it rejects (its layout can never
fit) gets ``slurmtopo:rejected: <reason>`` before it is cancelled (or left
held, see ``--on-reject``); that comment is no longer a v1 tag, so no
daemon looks at the job again.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field, fields
from typing import Any, Collection, Dict, Mapping, Optional, Tuple

from slurmtopo.daemon.jobhazards import (NO_HAZARDS, JobHazards, hazards_from_dict,
                                         hazards_to_dict)
from slurmtopo.daemon.jobstep import work_from_dict, work_to_dict
from slurmtopo.daemon.wire import show as _show
from slurmtopo.daemon.wire import unknown_fields
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.boundedjson import JsonRefused, loads
from slurmtopo.files.fileio import read_file
from slurmtopo.inventory.hostlist import HostlistError, MAX_NAMES, fold_hostlist, select_hostlist
from slurmtopo.job.groups import Layout, MAX_WORLD
from slurmtopo.job.request import JobRequest
from slurmtopo.plan.launchers import DEFAULT as DEFAULT_LAUNCHER, names
from slurmtopo.show.termsafe import printable

PREFIX = "slurmtopo:v1:"
#: the daemon's spool directory unless ``--spool`` says otherwise (the
#: daemon's and the submitting user's commands default to the same one)
DEFAULT_SPOOL = "/var/spool/slurmtopo"
REJECTED_PREFIX = "slurmtopo:rejected:"
#: Slurm 22.05 refuses a --comment longer than 1024 bytes; keep room
COMMENT_LIMIT = 1000
#: the largest request file the daemon reads (a hostile spool entry must
#: not make it read gigabytes)
MAX_REQUEST_BYTES = 1 << 20
#: the spool's directory for request files, the one place in the spool
#: users write into (made by the daemon: mode 1733, see docs/security.md)
REQUESTS_DIR = "requests"

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


@dataclass(frozen=True)
class DaemonSpec:
    """Everything the daemon knows about one job's wishes."""

    request: Any  # slurmtopo.job.request.JobRequest
    shape: Shape = field(default_factory=Shape)
    source: str = "comment"  # "comment" or the spool file's path
    #: the job's launcher, a name of :func:`slurmtopo.plan.launchers.names`
    launcher: str = DEFAULT_LAUNCHER
    #: the job's hazard policy and NCCL release, as submitted
    hazards: JobHazards = NO_HAZARDS


# --------------------------------------------------------------------------
# encoding


def request_to_dict(req, shape: Optional[Shape] = None,
                    launcher: Optional[str] = None,
                    hazards: Optional[JobHazards] = None) -> Dict[str, Any]:
    """The v1 JSON form of a JobRequest (compact: defaults left out, srun
    among them; ``hazards`` only when a policy or NCCL release was given)."""
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
    if launcher is not None and launcher != DEFAULT_LAUNCHER:
        out["launcher"] = launcher
    if getattr(req, "workload", None) is not None:
        out["work"] = work_to_dict(req.workload)
    if hazards_to_dict(hazards) is not None:
        out["hazards"] = hazards_to_dict(hazards)
    return out


def dumps_compact(data: Mapping[str, Any]) -> str:
    """Compact JSON with no blank anywhere (blanks inside strings become
    ``\\u0020``), so the comment is a single word."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, sort_keys=False)
    return text.replace(" ", "\\u0020")


def request_file_name(text: str, uid: Optional[int] = None) -> str:
    """The name of the request file holding ``text``: the first 16 hex
    digits of its SHA-256, taken with the submitting user's ``uid`` first
    when given (what :func:`make_comment` writes). Bound to the uid, two
    users' identical requests (the same long ``--nodelist``) get two names:
    with one name the second user could not replace the first's file in
    ``requests/`` (sticky) and could not submit, and the daemon reads a
    request file only when it is the job owner's. Without a uid: the name
    earlier releases wrote, still read."""
    salt = "" if uid is None else f"uid:{int(uid)}\n"
    return hashlib.sha256((salt + text).encode()).hexdigest()[:16]


def make_comment(req, shape: Optional[Shape] = None, spool: Optional[str] = None,
                 limit: int = COMMENT_LIMIT, launcher: Optional[str] = None,
                 hazards: Optional[JobHazards] = None) -> str:
    """The job comment carrying ``req`` (and the job's ``launcher``, when
    not srun, and its ``hazards`` policy and NCCL release). When it would be longer than
    ``limit`` the request is written under ``spool/requests`` (a new file,
    :func:`write_request_file`) and the comment points at it; without a
    spool that is an error."""
    text = dumps_compact(request_to_dict(req, shape, launcher, hazards))
    comment = PREFIX + text
    if len(comment.encode()) <= limit:
        return comment
    if not spool:
        raise SlurmtopoError(
            f"the job's slurmtopo request is {len(comment)} bytes, more than a Slurm comment "
            f"holds ({limit}); give the daemon's --spool directory so it can be passed as a file "
            "(long --nodelist/--exclude lists are the usual cause)")
    return f"{PREFIX}@{write_request_file(spool, text)}"


#: tries to find a name no one has taken in requests/ (16 random hex
#: digits: a collision is never expected; a taken name is tried again)
NAME_TRIES = 8


def write_request_file(spool: str, text: str, uid: Optional[int] = None) -> str:
    """Write ``text`` as a new request file in ``<spool>/requests`` and
    return its name: the hash of the user's uid and ``text``, then 16
    random hex digits. The file is created new (``O_EXCL``, no link
    followed), 0644 whatever the umask, written and synced before the job
    that points at it exists; a name someone else made first is never
    written through or replaced: another one is drawn. A write that fails
    leaves no file. (``uid``: the submitting user's, this process's by
    default.)"""
    directory = os.path.join(spool, REQUESTS_DIR)
    if not os.path.isdir(directory):
        raise SlurmtopoError(f"the daemon's spool has no {REQUESTS_DIR}/ directory (the daemon "
                             "makes it when it starts: is --spool the daemon's?)", spool)
    data = (text + "\n").encode()
    base = request_file_name(text, os.geteuid() if uid is None else uid)
    try:  # O_PATH: users may create files in requests/ (1733), not list it
        dfd = os.open(directory, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY
                      | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SlurmtopoError(f"cannot use the spool's {REQUESTS_DIR}/ directory "
                             f"({exc.strerror})", directory) from None
    try:
        for _ in range(NAME_TRIES):
            name = base + secrets.token_hex(8)
            try:
                fd = os.open(name + ".json", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=dfd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise SlurmtopoError(f"cannot write the job's request file ({exc.strerror})",
                                     os.path.join(directory, name + ".json")) from None
            try:
                os.fchmod(fd, 0o644)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as exc:
                os.close(fd)
                try:
                    os.unlink(name + ".json", dir_fd=dfd)
                except OSError:
                    pass
                raise SlurmtopoError(f"cannot write the job's request file ({exc.strerror})",
                                     os.path.join(directory, name + ".json")) from None
            os.close(fd)
            return name
    finally:
        os.close(dfd)
    raise SlurmtopoError(f"no free name for the job's request file after {NAME_TRIES} tries",
                         directory)


# --------------------------------------------------------------------------
# decoding: total over any input (see "Limits" below)
#
# Everything here reads what a user wrote, for a daemon that runs as root
# or SlurmUser: every field's type and range is checked before anything is
# built from it, sizes are bounded before the JSON is parsed, and the only
# exception that leaves parse_comment() is ProtocolError (one line, the
# user's values quoted short). tests/daemon/test_untrusted_input.py fuzzes it.

#: Limits (docs/security.md): the longest tag read from a comment, the
#: deepest nesting (the v1 object nests 2 levels), the longest name
#: (group kind, level, order, convention), GPUs per node, nodes and tasks
#: per node of a shape, the longest wait, the largest message size
MAX_COMMENT_BYTES = 16 << 10
MAX_DEPTH = 4
MAX_NAME_CHARS = 64
MAX_GPUS_PER_NODE = 1024
MAX_TASKS_PER_NODE = 1 << 14
MAX_WAIT_S = 30 * 24 * 3600
MAX_MESSAGE_BYTES = 1 << 50

_FIELDS = ("layout", "require", "prefer", "wait", "gpn", "exclusive", "nodelist", "exclude",
           "msg", "shape", "launcher", "work", "hazards")
_SHAPE_FIELDS = {"nodes": "nodes", "gpn": "gpus_per_node", "tpn": "tasks_per_node"}


def is_tagged(comment: Optional[str]) -> bool:
    return isinstance(comment, str) and comment.startswith(PREFIX)


def is_pointer(comment: Optional[str]) -> bool:
    """A v1 tag that names a request file (``slurmtopo:v1:@<hash>``)."""
    return is_tagged(comment) and comment[len(PREFIX):].strip().startswith("@")


def valid_name(name: str) -> bool:
    """A request file's name as this or an earlier release writes it: 32
    hex digits (hash and random part), or 16 (the hash alone)."""
    return len(name) in (16, 32) and all(c in "0123456789abcdef" for c in name)


def pointer_name(comment: Optional[str]) -> Optional[str]:
    """The request file a comment points at (its name), or None."""
    if not is_pointer(comment):
        return None
    name = comment[len(PREFIX):].strip()[1:]
    return name if valid_name(name) else None


def rejected_comment(reason: str) -> str:
    """``slurmtopo:rejected: <reason>``, one printable line cut to fit a
    Slurm comment."""
    text = REJECTED_PREFIX + " " + printable(" ".join(str(reason).split()))
    raw = text.encode()
    if len(raw) > COMMENT_LIMIT:
        text = raw[:COMMENT_LIMIT - 3].decode(errors="ignore") + "..."
    return text


def _whole(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{what} must be a whole number from {low} to {high:,}, "
                            f"got {_show(value)}")
    return value


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        raise ProtocolError(f"{what} must be a name of 1 to {MAX_NAME_CHARS} characters, "
                            f"got {_show(value)}")
    return value


def _mapping(value: Any, what: str, meaning: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must map group kinds to {meaning}, got {_show(value)}")
    for key in value:
        _name(key, f"a group kind in {what}")
    return value


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= MAX_WAIT_S:
        raise ProtocolError(f"{what} must be a number of seconds from 0 to {MAX_WAIT_S:,}, "
                            f"got {_show(value)}")
    return value


def _hostlist(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_REQUEST_BYTES:
        raise ProtocolError(f"{what} must be a hostlist (text), got {_show(value)}")
    return value


def _known(text: str, what: str, index, strict: bool) -> Tuple[str, ...]:
    """The inventory's names that the hostlist ``text`` names, never
    expanding it; with ``strict`` every name it counts must be one."""
    try:
        names, count = select_hostlist(text, index, what)
    except HostlistError as exc:
        raise ProtocolError(printable(str(exc), 160)) from None
    if strict and count > len(names):
        raise ProtocolError(f"{what} names {count - len(names):,} node(s) not in the daemon's "
                            "inventory")
    return tuple(names)


def _layout(value: Any):
    if not isinstance(value, dict):
        raise ProtocolError("the slurmtopo request has no layout")
    why = unknown_fields(value, {f.name for f in fields(Layout)}, "layout")
    if why:
        raise ProtocolError(why)
    kw: Dict[str, Any] = {}
    for key, v in value.items():
        if key in ("order", "convention"):
            kw[key] = _name(v, f"layout.{key}")
        elif v is None and key in ("dp", "expert_tp", "world"):
            kw[key] = None
        else:
            kw[key] = _whole(v, f"layout.{key}", 1, MAX_WORLD)
    return Layout(**kw).resolved()


def _launcher(value: Any) -> str:
    """A launcher this slurmtopo knows (srun when absent)."""
    if value is None:
        return DEFAULT_LAUNCHER
    if not isinstance(value, str) or value not in names():
        raise ProtocolError(f"launcher must be one of {', '.join(names())}, got {_show(value)}")
    return value


def _shape(value: Any) -> Shape:
    if value is None:
        return Shape()
    if not isinstance(value, dict):
        raise ProtocolError(f"shape must be an object (nodes, gpn, tpn), got {_show(value)}")
    why = unknown_fields(value, _SHAPE_FIELDS, "shape")
    if why:
        raise ProtocolError(why)
    high = {"nodes": MAX_NAMES, "gpn": MAX_GPUS_PER_NODE, "tpn": MAX_TASKS_PER_NODE}
    return Shape(**{_SHAPE_FIELDS[k]: None if v is None else _whole(v, f"shape.{k}", 1, high[k])
                    for k, v in value.items()})


def spec_from_dict(data: Any, source: str = "comment", index=None) -> DaemonSpec:
    """Validate the v1 JSON and build the JobRequest; ProtocolError (one
    line) for anything wrong, whatever ``data`` is. With ``index`` (the
    daemon's inventory as a :class:`slurmtopo.inventory.hostlist.HostIndex`) the
    request keeps only the inventory's names of ``nodelist`` and
    ``exclude``, found without expanding them (a 65,536-name exclude costs
    what the inventory's names cost), and a ``nodelist`` that names nodes
    the inventory lacks is refused."""
    if not isinstance(data, dict):
        raise ProtocolError("the slurmtopo request is not a JSON object")
    unknown = sorted(k for k in data if k not in _FIELDS)
    if unknown:
        raise ProtocolError("unknown field(s) in the slurmtopo request: "
                            + ", ".join(_show(k) for k in unknown[:5]))
    try:
        layout = _layout(data.get("layout"))
        levels = {}
        for key in ("require", "prefer"):
            levels[key] = {k: _name(v, f"{key}.{k}")
                           for k, v in _mapping(data.get(key), key, "levels").items()}
        wait = {k: _seconds(v, f"wait.{k}")
                for k, v in _mapping(data.get("wait"), "wait", "seconds").items()}
        msg = {k: _whole(v, f"msg.{k}", 0, MAX_MESSAGE_BYTES)
               for k, v in _mapping(data.get("msg"), "msg", "bytes").items()}
        gpn = data.get("gpn")
        if gpn is not None:
            gpn = _whole(gpn, "gpn", 1, MAX_GPUS_PER_NODE)
        exclusive = data.get("exclusive", False)
        if not isinstance(exclusive, bool):
            raise ProtocolError(f"exclusive must be true or false, got {_show(exclusive)}")
        nodelist = data.get("nodelist")
        if nodelist is not None:
            nodelist = _hostlist(nodelist, "nodelist") or ()
            if nodelist and index is not None:
                nodelist = _known(nodelist, "nodelist", index, strict=True)
        exclude = data.get("exclude")
        exclude = () if exclude is None else _hostlist(exclude, "exclude")
        if exclude and index is not None:
            exclude = _known(exclude, "exclude", index, strict=False) or ()
        shape = _shape(data.get("shape"))
        launcher = _launcher(data.get("launcher"))
        try:
            workload = work_from_dict(data.get("work"))
            hazards = hazards_from_dict(data.get("hazards"))
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        req = JobRequest(layout=layout, require=levels["require"], prefer=levels["prefer"],
                         gpus_per_node=gpn, exclusive=exclusive, nodelist=nodelist,
                         exclude=exclude or (), message_bytes=msg, wait=wait,
                         workload=workload)
    except ProtocolError:
        raise
    except SlurmtopoError as exc:
        raise ProtocolError(exc.message) from None
    except ValueError as exc:  # a hostlist ClusterShell cannot read
        raise ProtocolError(f"bad slurmtopo request: {_show(str(exc))}") from None
    return DaemonSpec(request=req, shape=shape, source=source, launcher=launcher,
                      hazards=hazards)


def read_request_file(spool: str, name: str, owners: Optional[Collection[int]] = None
                      ) -> Tuple[str, str]:
    """(text, path) of the request file ``name`` (:func:`valid_name`) in
    ``<spool>/requests``: opened without following a link or blocking on a
    FIFO, a regular file owned by one of ``owners`` (None: not checked) of
    at most MAX_REQUEST_BYTES, whose SHA-256 starts with the name's first
    16 hex digits (:func:`request_file_name`: with an owner's uid, this
    process's when ``owners`` is None, or without one as earlier releases
    named it)."""
    directory = os.path.join(spool, REQUESTS_DIR)
    path = os.path.join(directory, name + ".json")
    try:
        raw = read_file(directory, name + ".json", MAX_REQUEST_BYTES, owners,
                        "job's request file")
    except FileNotFoundError:
        raise ProtocolError(f"the job's request file {path} does not exist") from None
    except SlurmtopoError as exc:
        raise ProtocolError(exc.render()) from None
    try:
        body = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ProtocolError(f"request file {path} is not UTF-8 text") from None
    uids = owners if owners is not None else (os.geteuid(),)
    digest = name[:16]
    salted = any(digest == request_file_name(body, u) for u in uids)
    if not salted and (len(name) != 16 or digest != request_file_name(body)):
        raise ProtocolError(f"request file {path} does not match its name (edited?)")
    return body, path


def parse_comment(comment: Optional[str], spool: Optional[str] = None,
                  owners: Optional[Collection[int]] = None, index=None,
                  sizes: Optional[list] = None) -> Optional[DaemonSpec]:
    """The request a job comment carries; None when the comment is not a
    v1 tag (the job is not the daemon's). Raises ProtocolError, and only
    that, when it is a tag but cannot be read. ``owners``: the uids that
    may own a request file the comment points at (the daemon passes the
    job's owner; None: not checked). ``index``: the daemon's inventory
    (:class:`slurmtopo.inventory.hostlist.HostIndex`): ``nodelist`` and ``exclude``
    are then compared with it, never expanded (:func:`spec_from_dict`).
    ``sizes``: a list the request file's size is appended to (what reading
    it cost)."""
    if not is_tagged(comment):
        return None
    if len(comment) > MAX_COMMENT_BYTES:
        raise ProtocolError(f"the slurmtopo tag is longer than {MAX_COMMENT_BYTES:,} characters "
                            "(long requests go to a request file)")
    body = comment[len(PREFIX):].strip()
    source = "comment"
    if body.startswith("@"):
        name = body[1:]
        if not valid_name(name):
            raise ProtocolError(f"bad request file name {_show(name)} in the job comment")
        if not spool:
            raise ProtocolError("the request is in a spool file but the daemon has no --spool")
        body, source = read_request_file(spool, name, owners)
        if sizes is not None:
            sizes.append(len(body))
    try:
        data = loads(body, MAX_DEPTH)
    except JsonRefused as exc:
        raise ProtocolError(f"the slurmtopo request is refused: {exc}") from None
    return spec_from_dict(data, source, index)
