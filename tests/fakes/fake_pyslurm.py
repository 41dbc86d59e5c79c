"""A faithful fake of the part of pyslurm 25.11 that slurmtopo's pyslurm
backend uses.

pyslurm cannot be installed here (PyPI has only 25.11.x, which refuses to
build against the Slurm 22.05 of the test machines), so this module stands
in for it with the same names, call conventions, types and quirks as the
real one (``pyslurm/core/node.pyx``, ``pyslurm/core/job/job.pyx``,
``pyslurm/core/job/submission.pyx``, ``pyslurm/core/job/sbatch_opts.pyx``,
``pyslurm/utils/cstr.pyx``, ``pyslurm/utils/collections.pyx``,
``pyslurm/core/error.pyx`` of PySlurm/pyslurm):

* ``Nodes.load()`` / ``Jobs.load()`` return MultiClusterMap collections:
  iterating or ``.values()`` gives the objects, ``.items()`` gives
  ``(cluster, key, value)`` triples, ``.get(key)`` looks up the local
  cluster, ``coll[key]`` too;
* GRES are dicts built like ``cstr.to_gres_dict``: configured
  ``"gpu:a100:8(S:0-1)"`` -> ``{"gpu:a100": 8}``, used
  ``"gpu:a100:2(IDX:0-1)"`` -> ``{"gpu:a100": {"count": "2", "indexes":
  "0-1"}}`` (the count a *string*, as in pyslurm);
* ``Node.state`` is Slurm's complete state string (``"MIXED+DRAIN"``),
  ``Job.state`` the base state (``"RUNNING"``), ``Job.state_reason`` the
  reason string (``"None"`` while running, ``"JobHeldUser"`` when held);
* ``Job.load(id)`` raises ``RPCError`` (msg ``"Invalid job id specified"``)
  for an unknown id; ``Job.hold()``/``release()``/``cancel()``/``modify()``
  act on the fake cluster like Slurm does (hold: priority 0 and reason
  ``JobHeldAdmin``; ``hold(mode="user")``: ``JobHeldUser``);
* ``JobSubmitDescription(**attrs)``: ``load_sbatch_options()`` needs
  ``script`` to be a *file path* (``ValueError`` otherwise, as pyslurm),
  reads ``#SBATCH`` lines with pyslurm's own line parser, keeps attributes
  already set (``overwrite=False``) and skips options pyslurm does not map;
  ``submit()`` checks partition and GPU counts like slurmctld and raises
  ``RPCError`` with Slurm's messages (``Invalid partition name specified``,
  ``Requested node configuration is not available``).

Quirks of pyslurm 25.11 measured against a real libslurm 25.11 (the dev
cluster built from the release tarball), reproduced here:

* ``Node.allocated_gres`` is ``{}`` on a cluster without slurmdbd
  (:attr:`FakeCluster.slurmdbd`, False by default like the dev cluster);
* ``switches`` raises ``ValueError("Invalid Time Specification: '.")`` for
  every value, as an attribute or through ``#SBATCH --switches``;
* a digit-only string ``time_limit`` (``"60"``) raises
  ``TypeError("an integer is required")``; an int or ``"1:00:00"`` works;
* ``#SBATCH --segment`` is not in pyslurm's option table (skipped), while
  the ``segment_size`` attribute works;
* a job of more than one node with a GPU request and no ``ntasks`` gets one
  task and stays ``PENDING`` (reason ``Resources``) for ever.

The fake's cluster is :data:`cluster` (a :class:`FakeCluster`); tests set it
up with :func:`reset`, :meth:`FakeCluster.add_node`, :meth:`FakeCluster.add_job`.
"""
from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from slurmtopo.inventory.model import format_cpulist

__version__ = "25.11.0"

LOCAL_CLUSTER = "linux"

ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_PARTITION_NAME = 2000
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014
ESLURM_INVALID_NODE_NAME = 2018
SLURM_ERROR = -1

_STRERROR = {
    ESLURM_INVALID_JOB_ID: "Invalid job id specified",
    ESLURM_INVALID_PARTITION_NAME: "Invalid partition name specified",
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE: "Requested node configuration is not available",
    ESLURM_INVALID_NODE_NAME: "Invalid node name specified",
    SLURM_ERROR: "Unspecified error",
}


def version():
    return __version__


class RPCError(Exception):
    """pyslurm.RPCError(errno=SLURM_ERROR, msg=None): .errno and .msg."""

    def __init__(self, errno=SLURM_ERROR, msg=None):
        self.errno = errno
        self.msg = msg or _STRERROR.get(errno, f"Unknown error {errno}")
        super().__init__(self.msg)


# --------------------------------------------------------------------------
# pyslurm.utils.cstr / helpers


def to_gres_dict(gres: Optional[str]) -> dict:
    """pyslurm's cstr.to_gres_dict, rewritten with the same results."""
    output: Dict[str, Any] = {}
    if not gres or gres == "(null)":
        return {}
    for item in re.split(",(?=[^,]+?:)", gres):
        if "gres:" in item:
            item = item.replace("gres:", "")
        parts = re.split(":(?=[^:]+?)", item.replace("(", ":", 1).replace(")", ""))
        name, typ, cnt = parts[0], parts[1], 0
        if typ.isdigit():
            cnt = typ
            typ = None
        else:
            cnt = parts[2]
        key = f"{name}:{typ}" if typ else name
        if "IDX" not in parts:
            output[key] = int(cnt)
        else:
            idx = parts[3] if not typ else parts[4]
            output[key] = {"count": cnt, "indexes": idx}
    return output


def expand_range_str(text: str) -> List[int]:
    out: List[int] = []
    for part in (text or "").split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def _fold(ids) -> str:
    return format_cpulist(ids)  # Slurm folds index lists like the kernel cpulists


def nodelist_from_range_str(text: str) -> List[str]:
    from slurmtopo.inventory.hostlist import expand_hostlist
    return expand_hostlist(text) if text else []


def nodelist_to_range_str(names) -> str:
    from slurmtopo.inventory.hostlist import fold_hostlist
    return fold_hostlist(list(names))


# --------------------------------------------------------------------------
# pyslurm.xcollections.MultiClusterMap (the parts slurmtopo may touch)


class MultiClusterMap:
    def __init__(self, data=None):
        self.data: Dict[str, Dict[Any, Any]] = {LOCAL_CLUSTER: {}}
        for item in data or []:
            self.data[LOCAL_CLUSTER][item._id] = item

    def __iter__(self):
        for cluster in self.data.values():
            yield from cluster.values()

    def values(self):
        return list(iter(self))

    def items(self):
        return [(c, k, v) for c, d in self.data.items() for k, v in d.items()]

    def keys(self):
        return [k for d in self.data.values() for k in d]

    def get(self, key, default=None, cluster=None):
        return self.data.get(cluster or LOCAL_CLUSTER, {}).get(key, default)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            return self.data[key[0]][key[1]]
        return self.data[LOCAL_CLUSTER][key]

    def __len__(self):
        return sum(len(d) for d in self.data.values())

    def __contains__(self, key):
        return key in self.data.get(LOCAL_CLUSTER, {})


# --------------------------------------------------------------------------
# the fake cluster behind the API


class _NodeRec:
    def __init__(self, name, gres="gpu:8(S:0-1)", state="IDLE", used=(), gpu_type=None,
                 features=(), partitions=("gpu",), reason=None, cpus=16, alloc_cpus=0):
        self.name = name
        self.gres = gres
        self.state = state
        self.used = set(used)
        self.gpu_type = gpu_type
        self.features = list(features)
        self.partitions = list(partitions)
        self.reason = reason
        self.cpus = cpus
        self.alloc_cpus = alloc_cpus
        self.comment = None

    @property
    def gpus(self) -> int:
        m = re.search(r":(\d+)(?:\(|$)", self.gres)
        return int(m.group(1)) if m else 0

    def gres_used(self) -> str:
        t = f"{self.gpu_type}:" if self.gpu_type else ""
        idx = _fold(self.used) if self.used else "N/A"
        return f"gpu:{t}{len(self.used)}(IDX:{idx})"


class _JobRec:
    def __init__(self, job_id, name="job", user="alice", state="PENDING", reason="Priority",
                 priority=1000, nodes=None, layout=None, comment=None, partition="gpu",
                 required_nodes=None, num_nodes=1, gres_per_node="gres:gpu:8", script=None,
                 submit_time=None, shared=None, uid=1000):
        self.id = job_id
        self.name = name
        self.user = user
        self.uid = uid
        self.state = state
        self.reason = reason
        self.priority = priority
        self.nodes = nodes
        self.layout = layout or {}   # node -> "gpu:a100:2(IDX:0-1)"
        self.comment = comment
        self.partition = partition
        self.required_nodes = required_nodes
        self.num_nodes = num_nodes
        self.gres_per_node = gres_per_node
        self.script = script
        self.submit_time = submit_time or int(time.time())
        self.shared = shared
        self.desc: Dict[str, Any] = {}


class FakeCluster:
    def __init__(self):
        self.nodes: Dict[str, _NodeRec] = {}
        self.jobs: Dict[int, _JobRec] = {}
        self.partitions = {"gpu"}
        self.ids = itertools.count(100)
        self.calls: List[tuple] = []   # (what, args) of every RPC, for assertions
        self.fail: Dict[str, RPCError] = {}   # RPC name -> error to raise
        #: with slurmdbd pyslurm fills Node.allocated_gres; without, it is {}
        self.slurmdbd = False

    def rpc(self, what, *args):
        self.calls.append((what,) + args)
        if what in self.fail:
            raise self.fail[what]

    def add_node(self, name, **kw) -> _NodeRec:
        self.nodes[name] = _NodeRec(name, **kw)
        return self.nodes[name]

    def add_job(self, job_id=None, **kw) -> _JobRec:
        jid = job_id if job_id is not None else next(self.ids)
        self.jobs[jid] = _JobRec(jid, **kw)
        return self.jobs[jid]


cluster = FakeCluster()


def reset() -> FakeCluster:
    global cluster
    cluster = FakeCluster()
    return cluster


# --------------------------------------------------------------------------
# pyslurm.Node / pyslurm.Nodes


class Node:
    """pyslurm.Node: read from a loaded record, or a bag of changes."""

    _settable = ("state", "reason", "comment", "available_features", "active_features",
                 "weight")

    def __init__(self, name=None, **kwargs):
        self._rec = None
        self._changes: Dict[str, Any] = {}
        self._name = name
        for k, v in kwargs.items():
            if k not in self._settable:
                raise AttributeError(f"attribute '{k}' of 'pyslurm.core.node.Node' objects is "
                                     "not writable")
            if k == "state":
                _node_state_from_str(v)
            self._changes[k] = v

    @classmethod
    def _wrap(cls, rec):
        n = cls.__new__(cls)
        n._rec, n._changes, n._name = rec, {}, rec.name
        return n

    @property
    def _id(self):
        return self.name

    @staticmethod
    def load(name):
        cluster.rpc("slurm_load_node_single", name)
        rec = cluster.nodes.get(name)
        if rec is None:
            raise RPCError(msg=f"Node '{name}' does not exist")
        return Node._wrap(rec)

    def modify(self, changes: "Node"):
        cluster.rpc("slurm_update_node", self.name, dict(changes._changes))
        rec = cluster.nodes.get(self.name)
        if rec is None:
            raise RPCError(ESLURM_INVALID_NODE_NAME)
        for k, v in changes._changes.items():
            if k == "state":
                s = v.upper()
                base = rec.state.split("+")[0]
                if s in ("DRAIN", "FAIL"):
                    rec.state = f"{base}+{s}"
                elif s in ("RESUME", "UNDRAIN"):
                    rec.state = base
                elif s == "DOWN":
                    rec.state = "DOWN"
            elif k == "reason":
                rec.reason = v
            elif k == "comment":
                rec.comment = v
            elif k in ("available_features", "active_features"):
                rec.features = v.split(",") if isinstance(v, str) else list(v)

    @property
    def name(self):
        return self._rec.name if self._rec else self._name

    @property
    def state(self):
        return self._rec.state if self._rec else self._changes.get("state")

    @property
    def configured_gres(self):
        return to_gres_dict(self._rec.gres) if self._rec else {}

    @property
    def allocated_gres(self):
        if not cluster.slurmdbd:
            return {}
        return to_gres_dict(self._rec.gres_used()) if self._rec else {}

    @property
    def available_features(self):
        return list(self._rec.features) if self._rec else []

    @property
    def active_features(self):
        return list(self._rec.features) if self._rec else []

    @property
    def partitions(self):
        return list(self._rec.partitions) if self._rec else []

    @property
    def reason(self):
        return self._rec.reason if self._rec else self._changes.get("reason")

    @property
    def total_cpus(self):
        return self._rec.cpus if self._rec else 0

    @property
    def allocated_cpus(self):
        return self._rec.alloc_cpus if self._rec else 0

    @property
    def idle_cpus(self):
        return self.total_cpus - self.allocated_cpus


def _node_state_from_str(state):
    ok = {"CANCEL_REBOOT", "DOWN", "DRAIN", "FAIL", "FUTURE", "NORESP", "NO_RESP", "POWER_DOWN",
          "POWER_DOWN_ASAP", "POWER_DOWN_FORCE", "POWER_UP", "RESUME", "UNDRAIN"}
    if not state or state.upper() not in ok:
        raise ValueError(f"Invalid Node state: {state}")
    return state.upper()


class Nodes(MultiClusterMap):
    @staticmethod
    def load(preload_passwd_info=False):
        cluster.rpc("slurm_load_node")
        return Nodes([Node._wrap(r) for r in cluster.nodes.values()])


# --------------------------------------------------------------------------
# pyslurm.Job / pyslurm.Jobs


class Job:
    def __init__(self, job_id):
        self._job_id = int(job_id)
        self._rec = None

    @classmethod
    def _wrap(cls, rec):
        j = cls(rec.id)
        j._rec = rec
        return j

    def __repr__(self):
        return f"pyslurm.Job({self.id})"

    @property
    def _id(self):
        return self.id

    @staticmethod
    def load(job_id):
        cluster.rpc("slurm_load_job", job_id)
        rec = cluster.jobs.get(int(job_id))
        if rec is None:
            raise RPCError(ESLURM_INVALID_JOB_ID)
        return Job._wrap(rec)

    def _target(self) -> _JobRec:
        rec = cluster.jobs.get(self._job_id)
        if rec is None:
            raise RPCError(ESLURM_INVALID_JOB_ID)
        return rec

    def modify(self, changes: "JobSubmitDescription"):
        cluster.rpc("slurm_update_job", self._job_id, dict(changes._attrs))
        rec = self._target()
        for k, v in changes._attrs.items():
            if k == "priority":
                rec.priority = int(v)
                if int(v) == 0:
                    rec.reason = "JobHeldUser" if changes._attrs.get("_user_hold") \
                        else "JobHeldAdmin"
                elif rec.reason in ("JobHeldUser", "JobHeldAdmin"):
                    rec.reason = "None" if rec.state == "RUNNING" else "Priority"
            elif k == "comment":
                rec.comment = v
            elif k == "required_nodes":
                rec.required_nodes = v
            elif k == "name":
                rec.name = v
            elif k.startswith("_"):
                continue
            else:
                rec.desc[k] = v

    def hold(self, mode=None):
        desc = JobSubmitDescription(priority=0)
        if mode and mode.casefold() == "user":
            desc._attrs["_user_hold"] = True
        self.modify(desc)

    def release(self):
        self.modify(JobSubmitDescription(priority=4294967294))

    def cancel(self):
        cluster.rpc("slurm_kill_job", self._job_id, 9)
        rec = cluster.jobs.get(self._job_id)
        if rec is None:   # pyslurm ignores an unknown id for SIGKILL
            return
        rec.state = "CANCELLED"

    def get_resource_layout_per_node(self):
        rec = self._rec or self._target()
        return {node: {"cpu_ids": "0", "gres": to_gres_dict(gres), "memory": None}
                for node, gres in rec.layout.items()}

    # attributes (names and types as pyslurm's)
    id = property(lambda self: self._job_id)
    name = property(lambda self: (self._rec or self._target()).name)
    user_name = property(lambda self: (self._rec or self._target()).user)
    state = property(lambda self: (self._rec or self._target()).state)
    state_reason = property(lambda self: (self._rec or self._target()).reason)
    priority = property(lambda self: (self._rec or self._target()).priority)
    submit_time = property(lambda self: (self._rec or self._target()).submit_time)
    allocated_nodes = property(lambda self: (self._rec or self._target()).nodes)
    required_nodes = property(lambda self: (self._rec or self._target()).required_nodes)
    comment = property(lambda self: (self._rec or self._target()).comment)
    partition = property(lambda self: (self._rec or self._target()).partition)
    num_nodes = property(lambda self: (self._rec or self._target()).num_nodes)
    gres_per_node = property(lambda self: to_gres_dict((self._rec or self._target()).gres_per_node))
    resource_sharing = property(lambda self: (self._rec or self._target()).shared)
    user_id = property(lambda self: (self._rec or self._target()).uid)
    # unset strings are None in pyslurm (cstr.to_unicode); set by modify()
    reservation = property(lambda self: (self._rec or self._target()).desc.get("reservation"))
    qos = property(lambda self: (self._rec or self._target()).desc.get("qos"))
    account = property(lambda self: (self._rec or self._target()).desc.get("account"))
    excluded_nodes = property(
        lambda self: (self._rec or self._target()).desc.get("excluded_nodes"))
    constraints = property(lambda self: (self._rec or self._target()).desc.get("constraints"))
    cluster = property(lambda self: LOCAL_CLUSTER)


class Jobs(MultiClusterMap):
    @staticmethod
    def load(preload_passwd_info=False, frozen=False):
        cluster.rpc("slurm_load_jobs")
        return Jobs([Job._wrap(r) for r in cluster.jobs.values()])


# --------------------------------------------------------------------------
# pyslurm.JobSubmitDescription (+ sbatch_opts)


_SBATCH_OPTIONS = {  # pyslurm's SBATCH_OPTIONS: (short, long) -> (attr, param)
    ("A", "account"): ("account", None), (None, "comment"): ("comment", None),
    ("d", "dependency"): ("dependencies", None), ("e", "error"): ("standard_error", None),
    ("x", "exclude"): ("excluded_nodes", None), (None, "exclusive"): ("resource_sharing", "no"),
    ("G", "gpus"): ("gpus", None), (None, "gpus-per-node"): ("gpus_per_node", None),
    (None, "gres"): ("gres_per_node", None), ("H", "hold"): ("priority", 0),
    ("J", "job-name"): ("name", None), ("w", "nodelist"): ("required_nodes", None),
    ("N", "nodes"): ("nodes", None), ("n", "ntasks"): ("ntasks", None),
    (None, "ntasks-per-node"): ("ntasks_per_node", None), ("o", "output"): ("standard_output", None),
    ("p", "partition"): ("partition", None), (None, "priority"): ("priority", None),
    ("q", "qos"): ("qos", None), (None, "switches"): ("switches", None),
    ("t", "time"): ("time_limit", None), ("D", "chdir"): ("working_directory", None),
}


def _parse_line(line):
    """pyslurm's sbatch_opts._parse_line (same splitting quirks)."""
    opts = line[len("#SBATCH"):]
    opts = opts.split("#")[0].strip()
    if "=" in opts:
        opts = "=".join(opts.replace("=", " ").split())
        opt, val = opts.split("=")
    elif " " in opts:
        opts = "=".join(opts.split())
        opt, val = opts.split("=")
    elif any(el.isdigit() for el in opts):
        opt, val = list(filter(None, re.split(r"(\d+)", opts)))
    else:
        opt, val = opts, None
    opt = opt[1:]
    if opt[0] == "-":
        opt = opt[1:]
    return opt, val


class JobSubmitDescription:
    _known = {"script", "script_args", "name", "comment", "partition", "partitions",
              "required_nodes", "excluded_nodes", "dependencies", "standard_output",
              "standard_error", "time_limit", "account", "qos", "working_directory",
              "priority", "nodes", "ntasks", "ntasks_per_node", "gpus", "gpus_per_node",
              "gres_per_node", "resource_sharing", "switches", "constraints",
              "time_limit_min", "environment", "segment_size"}

    def __init__(self, **kwargs):
        self._attrs: Dict[str, Any] = {}
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __setattr__(self, k, v):
        if k.startswith("_"):
            object.__setattr__(self, k, v)
            return
        if k not in self._known:
            raise AttributeError(f"'pyslurm.core.job.submission.JobSubmitDescription' object "
                                 f"has no attribute '{k}'")
        if k == "switches" and v is not None:
            raise ValueError("Invalid Time Specification: '.")
        if k == "time_limit" and isinstance(v, str) and v.isdigit():
            raise TypeError("an integer is required")
        self._attrs[k] = v

    def __getattr__(self, k):
        if k.startswith("_"):
            raise AttributeError(k)
        if k not in self._known:
            raise AttributeError(k)
        return self._attrs.get(k)

    def load_sbatch_options(self, overwrite=False):
        if not self.script:
            raise ValueError("You need to set the 'script' attribute first.")
        if not Path(self.script).is_file():
            raise ValueError("The script path you provided is not valid.")
        for line in Path(self.script).read_text().splitlines():
            line = line.lstrip()
            if not line.startswith("#SBATCH"):
                continue
            flag, val = _parse_line(line)
            spec = next((v for (s, l), v in _SBATCH_OPTIONS.items() if flag in (s, l)), None)
            if spec is None or spec[0] is None:
                continue
            attr, param = spec
            if getattr(self, attr) is None or overwrite:
                setattr(self, attr, param if val is None else val)

    def submit(self):
        if not self.script:
            raise ValueError("You need to provide a batch script.")
        text = Path(self.script).read_text() if Path(str(self.script)).is_file() \
            else str(self.script)
        if not text.startswith("#!"):
            raise ValueError("Batch script must start with a shebang (#!)")
        cluster.rpc("slurm_submit_batch_job", dict(self._attrs))
        part = self.partitions or self.partition
        if part and part not in cluster.partitions:
            raise RPCError(ESLURM_INVALID_PARTITION_NAME)
        want = self.gpus_per_node or self.gres_per_node
        if want is not None:
            n = int(str(want).split(":")[-1])
            if cluster.nodes and n > max(r.gpus for r in cluster.nodes.values()):
                raise RPCError(ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
        prio = self.priority
        held = prio is not None and int(prio) == 0
        nodes = int(str(self.nodes or 1).split("-")[0])
        # pyslurm 25.11: several nodes with GPUs and no ntasks -> one task, never starts
        stuck = nodes > 1 and want is not None and self.ntasks is None
        rec = cluster.add_job(name=self.name or "sbatch", comment=self.comment,
                              priority=0 if held else 1000,
                              reason="JobHeldUser" if held else ("Resources" if stuck
                                                                 else "Priority"),
                              required_nodes=self.required_nodes, script=text)
        rec.never_starts = stuck
        rec.desc = dict(self._attrs)
        return rec.id
