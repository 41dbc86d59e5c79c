"""Optional Slurm backend over pyslurm's object API (pyslurm 25.11).

Only for a site whose Slurm matches the pyslurm release (pyslurm X.Y.* is
built against Slurm X.Y and refuses any other). This module never imports
pyslurm at import time: :func:`available` tries, and
:class:`PySlurmBackend` imports it when constructed. The command-line
backend (:mod:`slurmtopo.slurm.cli_backend`) is the default and the one
the integration tests run.

pyslurm API used (pyslurm 25.11, ``pyslurm/core/node.pyx``,
``pyslurm/core/job/job.pyx``, ``pyslurm/core/job/submission.pyx``):

* ``pyslurm.Nodes.load()`` -> collection of ``pyslurm.Node`` (a
  MultiClusterMap: ``.values()``); ``Node.name``, ``.state``
  (``"MIXED+DRAIN"``), ``.configured_gres`` (``{"gpu:a100": 8}``),
  ``.allocated_gres`` (``{"gpu:a100": {"count": "2", "indexes": "0-1"}}``
  when Slurm printed ``IDX``, else ``{"gpu:a100": 2}``),
  ``.available_features``/``.active_features`` (lists), ``.partitions``,
  (``allocated_gres`` is empty on a cluster without slurmdbd, see below)
  ``.reason``, ``.total_cpus``, ``.allocated_cpus``;
  ``Node(state=..., reason=...)`` + ``node.modify(changes)`` to update.
* ``pyslurm.Jobs.load()`` -> collection of ``pyslurm.Job``;
  ``pyslurm.Job.load(id)`` (raises ``pyslurm.RPCError`` for an unknown
  id); ``Job.id``, ``.name``, ``.user_name``, ``.state``,
  ``.state_reason``, ``.priority``, ``.submit_time``, ``.allocated_nodes``
  / ``.required_nodes`` (hostlist strings), ``.comment``, ``.partition``,
  ``.num_nodes``, ``.gres_per_node``, ``.resource_sharing``, ``.user_id``,
  ``.reservation``, ``.qos``, ``.account``, ``.excluded_nodes``, ``.constraints``,
  ``.get_resource_layout_per_node()`` -> ``{node: {"gres": {"gpu:t":
  {"count": .., "indexes": "0-1"}}, ...}}``; ``Job(id).hold()`` (an admin
  hold; ``hold(mode="user")``: a user hold, ``scontrol uhold``),
  ``.release()``, ``.cancel()``, ``.modify(JobSubmitDescription(...))``.
* ``pyslurm.JobSubmitDescription(script=PATH, ...)``,
  ``.load_sbatch_options()`` (reads ``#SBATCH`` lines; first one wins,
  where sbatch takes the last: the fixups below set what they need from the
  value sbatch would take; an
  attribute already set is kept, options pyslurm does not know are
  skipped), ``.submit()`` -> job id. ``priority=0`` submits held.

Where pyslurm 25.11 is wrong against a real libslurm 25.11 (found on the
dev cluster; each has an integration test in tests/integration/
test_slurm_backend.py and a unit test on the fake):

* ``Node.allocated_gres`` is empty without slurmdbd: a node's busy GPUs are
  taken from the running jobs' per-node layouts instead (:meth:`nodes`).
* ``switches`` fails for every value (``#SBATCH --switches=1@5:00`` and the
  attribute alike: "Invalid Time Specification"): such a script is
  submitted with ``sbatch`` (the command-line backend) instead.
* a digit-only ``time_limit`` (``--time=60``) raises TypeError: passed as a
  number.
* ``#SBATCH --segment=S`` is ignored: set as ``segment_size``.
* a multi-node job with GRES and no ``ntasks`` is given one task and never
  starts: ``ntasks`` is set to nodes x tasks per node.

Accounting (``slurmtopo audit --sacct``, ``slurmtopo show`` of a job
slurmctld has forgotten) goes through ``sacct``, the command-line backend's
:meth:`accounting` and :meth:`accounted_work_dir`, as ``--switches`` goes
through ``sbatch``; where ``sacct`` is not on PATH it is one error line
saying accounting needs it. Not pyslurm's ``pyslurm.db.Jobs``: it needs a
slurmdbd, which neither the dev cluster nor CI runs (no database), so it
could not be checked against a real Slurm, and its records would have to be
rewritten into the ``sacct -P`` text the audit reads, a second copy of
sacct's formatting.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmError
from slurmtopo.sbatch.directives import option_values, script_options
from slurmtopo.inventory.model import parse_cpulist
from slurmtopo.slurm import parse
from slurmtopo.slurm.backend import ACTIVE_JOB_STATES, SlurmBackend, SlurmJob, SlurmNode
from slurmtopo.slurm.cli_backend import CliBackend

log = logging.getLogger(__name__)

#: pyslurm's major.minor must be this or newer (the object API of 23.02+)
MIN_VERSION = (23, 2)

#: sbatch options ``submit(args=...)`` accepts -> JobSubmitDescription attribute
SUBMIT_OPTIONS = {
    "--job-name": "name", "-J": "name", "--comment": "comment", "--partition": "partitions",
    "-p": "partitions", "--nodelist": "required_nodes", "-w": "required_nodes",
    "--exclude": "excluded_nodes", "-x": "excluded_nodes", "--dependency": "dependencies",
    "-d": "dependencies", "--output": "standard_output", "-o": "standard_output",
    "--error": "standard_error", "-e": "standard_error", "--time": "time_limit",
    "-t": "time_limit", "--account": "account", "-A": "account", "--qos": "qos", "-q": "qos",
    "--chdir": "working_directory", "-D": "working_directory", "--priority": "priority",
    "--gres": "gres_per_node", "--nodes": "nodes", "-N": "nodes", "--ntasks": "ntasks",
    "-n": "ntasks", "--ntasks-per-node": "ntasks_per_node", "--constraint": "constraints",
    "-C": "constraints",
}


#: long sbatch options pyslurm 25.11's ``load_sbatch_options`` maps to a
#: JobSubmitDescription attribute (``pyslurm/core/job/sbatch_opts.py``); it
#: skips every other ``#SBATCH`` line without a word. Note ``--gpus-per-task``
#: is missing there (its entry is spelled ``gpus-per-socket`` twice).
PYSLURM_SBATCH_OPTIONS = frozenset({
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir",
    "cluster-constraint", "clusters", "comment", "constraint", "container", "contiguous",
    "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline",
    "delay-boot", "dependency", "distribution", "error", "exclude", "exclusive", "export",
    "get-user-env", "gid", "gpu-bind", "gpus", "gpus-per-node", "gpus-per-socket", "gres",
    "gres-flags", "hold", "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type",
    "mail-user", "mcs-label", "mem", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nice",
    "no-kill", "no-requeue", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu",
    "ntasks-per-node", "ntasks-per-socket", "open-mode", "output", "overcommit",
    "oversubscribe", "partition", "power", "priority", "profile", "qos", "reboot", "requeue",
    "reservation", "signal", "sockets-per-node", "spread-job", "switches", "thread-spec",
    "threads-per-core", "time", "time-min", "tmp", "uid", "use-min-nodes", "wait-all-nodes",
    "wckey"})


def unsupported_directives(script: str) -> List[str]:
    """``#SBATCH`` options of the script pyslurm would silently drop."""
    return [f"--{name}" for name in sbatch_directives(script)
            if name not in PYSLURM_SBATCH_OPTIONS]


#: where libslurm looks for slurm.conf when SLURM_CONF is unset (the usual
#: package paths, and the configless cache slurmd keeps)
DEFAULT_CONFS = ("/etc/slurm/slurm.conf", "/usr/local/etc/slurm.conf", "/run/slurm/conf/slurm.conf")


def slurm_conf_path() -> Optional[str]:
    """The slurm.conf libslurm would read, or None when there is none to be
    found. Importing pyslurm runs slurm_init(), and libslurm ends the whole
    process (``fatal: Could not establish a configuration source``) when it
    finds no configuration, so nothing imports pyslurm without one."""
    conf = os.environ.get("SLURM_CONF")
    candidates = (conf,) if conf else DEFAULT_CONFS
    return next((c for c in candidates if c and os.path.isfile(c)), None)


def _import():
    if slurm_conf_path() is None:
        raise SlurmError("pyslurm needs Slurm's configuration and none was found "
                         f"(SLURM_CONF={os.environ.get('SLURM_CONF', 'unset')}; libslurm would "
                         "end this process)")
    # lazy: pyslurm is heavy, loaded only when this runs (start-up time)
    import pyslurm  # noqa: F401  (optional dependency)
    return pyslurm


def pyslurm_version(mod=None) -> Optional[Tuple[int, int]]:
    mod = mod or _import()
    text = getattr(mod, "__version__", None)
    if text is None and hasattr(mod, "version"):
        try:
            text = mod.version()
        except Exception:  # noqa: BLE001
            text = None
    m = re.match(r"^(\d+)\.(\d+)", str(text or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def available() -> bool:
    """pyslurm imports (so it matched the local libslurm) and has the
    object API this backend uses."""
    try:
        mod = _import()
    except Exception:  # noqa: BLE001 - ImportError, OSError from libslurm, ...
        return False
    ver = pyslurm_version(mod)
    if ver is None or ver < MIN_VERSION:
        return False
    return all(hasattr(mod, n) for n in ("Nodes", "Jobs", "Job", "Node", "JobSubmitDescription"))


def _values(collection) -> Iterable[Any]:
    """pyslurm collections: a MultiClusterMap (``.values()``) or a list."""
    if collection is None:
        return []
    values = getattr(collection, "values", None)
    return values() if callable(values) else collection


def _gres_entries(d: Optional[Mapping[str, Any]]) -> List[Tuple[str, int, Optional[str]]]:
    """pyslurm's gres dict -> [(name, count, indexes or None)]."""
    out = []
    for key, val in (d or {}).items():
        name = str(key).split(":", 1)[0]
        if isinstance(val, Mapping):
            try:
                count = int(val.get("count") or 0)
            except (TypeError, ValueError):
                count = 0
            idx = val.get("indexes")
            out.append((name, count, None if idx is None else str(idx)))
        else:
            try:
                out.append((name, int(val), None))
            except (TypeError, ValueError):
                continue
    return out


def gpus_total(d: Optional[Mapping[str, Any]]) -> int:
    return sum(c for n, c, _ in _gres_entries(d) if n == "gpu")


def gpus_indices(d: Optional[Mapping[str, Any]]) -> Tuple[int, Optional[frozenset]]:
    total, idx, known = 0, set(), True
    for name, count, indexes in _gres_entries(d):
        if name != "gpu":
            continue
        total += count
        if indexes is None:
            if count:
                known = False
            continue
        if indexes in ("", "N/A"):
            continue
        try:
            idx |= set(parse_cpulist(indexes))
        except ValueError:
            known = False
    return total, (frozenset(idx) if known else None)


class PySlurmBackend(SlurmBackend):
    name = "pyslurm"

    def __init__(self, module=None):
        if module is None:
            try:
                module = _import()
            except Exception as exc:  # noqa: BLE001
                raise SlurmError(f"the pyslurm backend needs pyslurm matching this Slurm "
                                 f"(pip install 'slurmtopo[pyslurm]'): {exc}") from None
        self.pyslurm = module
        ver = pyslurm_version(module)
        if ver is None or ver < MIN_VERSION:
            raise SlurmError(f"pyslurm {getattr(module, '__version__', '?')} is too old for "
                             "slurmtopo (needs the 23.02+ object API); use --backend cli")

    # -- errors ------------------------------------------------------------
    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except self.pyslurm.RPCError as exc:
            msg = getattr(exc, "msg", None) or str(exc)
            raise SlurmError(f"{what}: {msg}") from None
        except (ValueError, TypeError) as exc:
            raise SlurmError(f"{what}: {exc}") from None

    # -- reading -----------------------------------------------------------
    def _node(self, n) -> SlurmNode:
        base, flags = parse.split_node_state(n.state or "")
        total = gpus_total(n.configured_gres)
        count, idx = gpus_indices(n.allocated_gres)
        if idx is None:
            idx = frozenset(range(min(count, total)))
        features = tuple(n.active_features or n.available_features or ())
        return SlurmNode(name=n.name, state=base, flags=flags, gpus_total=total,
                         gpus_used=idx, features=features,
                         partitions=tuple(n.partitions or ()), reason=n.reason or None,
                         gres=",".join(f"{k}:{v}" for k, v in (n.configured_gres or {}).items()),
                         cpus_total=int(n.total_cpus or 0), cpus_alloc=int(n.allocated_cpus or 0))

    def nodes(self) -> List[SlurmNode]:
        coll = self._call("loading nodes", self.pyslurm.Nodes.load)
        nodes = [self._node(n) for n in _values(coll)]
        # pyslurm 25.11 leaves Node.allocated_gres empty without slurmdbd:
        # the GPUs running jobs hold per node say the same, and always work
        held: Dict[str, set] = {}
        for j in self.jobs(ACTIVE_JOB_STATES):
            for host, idx in j.gpus.items():
                held.setdefault(host, set()).update(idx)
        return [replace(n, gpus_used=frozenset(n.gpus_used | held.get(n.name, set())))
                for n in nodes]

    def _job(self, j) -> SlurmJob:
        state = str(j.state or "UNKNOWN").upper()
        reason = j.state_reason if j.state_reason not in (None, "", "None") else None
        priority = int(j.priority or 0)
        nodes = parse._hosts(j.allocated_nodes) if state != "PENDING" else ()
        gpus: Dict[str, Tuple[int, ...]] = {}
        if state in ACTIVE_JOB_STATES:
            layout = self._call(f"job {j.id} layout", j.get_resource_layout_per_node) or {}
            for host, res in layout.items():
                _count, idx = gpus_indices((res or {}).get("gres"))
                if idx:
                    gpus[host] = tuple(sorted(idx))
        gres_req = j.gres_per_node or {}
        return SlurmJob(
            job_id=int(j.id), name=j.name or "", user=j.user_name or "", state=state,
            reason=reason, priority=priority, submit_time=int(j.submit_time or 0), nodes=nodes,
            gpus=gpus, comment=j.comment or "",
            held=reason in parse.HELD_REASONS or (state == "PENDING" and priority == 0),
            req_nodes=parse._hosts(j.required_nodes), partition=j.partition or "",
            num_nodes=int(j.num_nodes or 0),
            gres_request=",".join(f"{k}:{v}" for k, v in gres_req.items()),
            exclusive=(str(j.resource_sharing or "").lower() in ("no", "none", "exclusive")),
            user_id=j.user_id if isinstance(j.user_id, int) else None,
            reservation=j.reservation or "", qos=j.qos or "", account=j.account or "",
            exc_nodes=parse._hosts(j.excluded_nodes), features=j.constraints or "",
            work_dir=getattr(j, "working_directory", None) or "",
            # pyslurm 25.11's Job.array_id / het_job_id: None or 0 when none
            array=bool(getattr(j, "array_id", None)), het=bool(getattr(j, "het_job_id", None)))

    def _fenced_job(self, j) -> SlurmJob:
        """:meth:`_job`; a job it cannot read is an unreadable job (one
        user's job never fails the listing for everyone)."""
        try:
            return self._job(j)
        except SlurmError:
            raise
        except Exception as exc:  # noqa: BLE001 - one record, never the listing
            return SlurmJob(job_id=int(getattr(j, "id", 0) or 0), state="UNKNOWN",
                            unreadable=f"pyslurm's record of it cannot be read "
                                       f"({type(exc).__name__})")

    def jobs(self, states: Optional[Iterable[str]] = None) -> List[SlurmJob]:
        coll = self._call("loading jobs", self.pyslurm.Jobs.load)
        want = {s.upper() for s in states} if states is not None else None
        out = []
        for j in _values(coll):
            job = self._fenced_job(j)
            if want is None or job.state in want or job.unreadable:
                out.append(job)
        return out

    def job(self, job_id: int) -> Optional[SlurmJob]:
        try:
            j = self.pyslurm.Job.load(int(job_id))
        except self.pyslurm.RPCError as exc:
            msg = (getattr(exc, "msg", None) or str(exc)).lower()
            if "invalid job id" in msg:
                return None
            raise SlurmError(f"loading job {job_id}: {getattr(exc, 'msg', exc)}") from None
        return self._fenced_job(j)

    # -- acting ------------------------------------------------------------
    def _desc_from_args(self, args: Sequence[str]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        args = [str(a) for a in args]
        i = 0
        while i < len(args):
            a = args[i]
            key, sep, value = a.partition("=")
            if key in ("--hold", "-H"):
                out["priority"] = 0
                i += 1
                continue
            attr = SUBMIT_OPTIONS.get(key)
            if attr is None:
                raise SlurmError(f"the pyslurm backend cannot pass sbatch option {a!r}; use "
                                 "--backend cli (or put it in the script as #SBATCH)")
            if not sep:
                if i + 1 >= len(args):
                    raise SlurmError(f"sbatch option {a} needs a value")
                value = args[i + 1]
                i += 1
            out[attr] = value
            i += 1
        return out

    def submit(self, script: str, args: Sequence[str] = (), hold: bool = False) -> int:
        directives = sbatch_directives(script)
        if "switches" in directives:
            return self._submit_with_sbatch(script, args, hold, "pyslurm 25.11 cannot submit "
                                            "--switches (every value fails)")
        dropped = [d for d in unsupported_directives(script) if d != "--segment"]
        if dropped:
            raise SlurmError("pyslurm would ignore #SBATCH " + ", ".join(dropped) + " in this "
                             "script; submit with --backend cli")
        attrs = self._desc_from_args(args)
        if hold:
            attrs["priority"] = 0
        attrs.update(submit_fixups(directives, attrs))
        fd, path = tempfile.mkstemp(prefix="slurmtopo-", suffix=".sbatch")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(script)
            desc = self._call("job description", self.pyslurm.JobSubmitDescription,
                              script=path, **attrs)
            # attributes set above win; #SBATCH lines fill in the rest
            self._call("reading #SBATCH options", desc.load_sbatch_options)
            return int(self._call("submitting", desc.submit))
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _submit_with_sbatch(self, script: str, args: Sequence[str], hold: bool, why: str) -> int:
        log.info("submitting with sbatch: %s", why)
        try:
            return CliBackend().submit(script, args, hold=hold)
        except SlurmError as exc:
            raise SlurmError(f"{why}, and sbatch failed too: {exc.render()}") from None

    # -- accounting: through sacct (see the module doc) ----------------------
    def _sacct(self):
        """The command-line backend, to run ``sacct``; a one-line SlurmError
        where sacct is not on PATH."""
        if shutil.which("sacct") is None:
            raise SlurmError("accounting needs sacct (the cli backend), and sacct is not on "
                             "PATH; the pyslurm backend reads no accounting itself")
        return CliBackend()

    def accounting(self, start: str, end: str, fields: Sequence[str]) -> str:
        return self._sacct().accounting(start, end, fields)

    def accounted_work_dir(self, job_id: int) -> Optional[str]:
        return self._sacct().accounted_work_dir(job_id)

    def topology_text(self) -> str:
        """``scontrol show topology`` through the command line (pyslurm
        25.11 has no topology call)."""
        if shutil.which("scontrol") is None:
            raise SlurmError("Slurm's topology needs scontrol, and it is not on PATH")
        return CliBackend().topology_text()

    def update_job(self, job_id: int, **fields: str) -> None:
        if not fields:
            return
        attrs = _attributes(fields, _JOB_FIELDS, "job")
        if "time_limit" in attrs and str(attrs["time_limit"]).isdigit():
            attrs["time_limit"] = int(attrs["time_limit"])   # pyslurm: TypeError on "60"
        changes = self._call("job changes", self.pyslurm.JobSubmitDescription, **attrs)
        self._call(f"updating job {job_id}", self.pyslurm.Job(int(job_id)).modify, changes)

    def hold(self, job_id: int) -> None:
        self._call(f"holding job {job_id}", self.pyslurm.Job(int(job_id)).hold)

    def uhold(self, job_id: int) -> None:
        self._call(f"holding job {job_id}", self.pyslurm.Job(int(job_id)).hold, mode="user")

    def release(self, job_id: int) -> None:
        self._call(f"releasing job {job_id}", self.pyslurm.Job(int(job_id)).release)

    def cancel(self, job_id: int) -> None:
        self._call(f"cancelling job {job_id}", self.pyslurm.Job(int(job_id)).cancel)

    def update_node(self, node: str, **fields: str) -> None:
        attrs = _attributes(fields, _NODE_FIELDS, "node")
        changes = self._call("node changes", self.pyslurm.Node, **attrs)
        target = self._call(f"loading node {node}", self.pyslurm.Node.load, node)
        self._call(f"updating node {node}", target.modify, changes)


#: scontrol field names -> JobSubmitDescription attributes
_JOB_FIELDS = {"comment": "comment", "reqnodelist": "required_nodes",
               "nodelist": "required_nodes", "excnodelist": "excluded_nodes",
               "name": "name", "jobname": "name", "priority": "priority",
               "partition": "partitions", "timelimit": "time_limit", "qos": "qos",
               "account": "account", "dependency": "dependencies",
               "numnodes": "nodes", "features": "constraints"}
#: scontrol node fields -> Node attributes
_NODE_FIELDS = {"state": "state", "reason": "reason", "comment": "comment",
                "availablefeatures": "available_features", "activefeatures": "active_features",
                "weight": "weight"}


def sbatch_directives(script: str) -> Dict[str, str]:
    """The script's ``#SBATCH`` options by long name, with the value sbatch
    ends with (the last one given: :mod:`slurmtopo.sbatch.directives`, the
    one reader of directives), up to its first command; a flag without value
    maps to ""."""
    return {name: value or "" for name, value in option_values(script_options(script)).items()}


def submit_fixups(directives: Mapping[str, str], attrs: Mapping[str, Any]) -> Dict[str, Any]:
    """Attributes that make pyslurm 25.11 submit what ``sbatch`` would (see
    the module doc); attributes the caller set are left alone."""
    out: Dict[str, Any] = {}
    limit = attrs.get("time_limit", directives.get("time"))
    if limit is not None and str(limit).isdigit():
        out["time_limit"] = int(limit)
    seg = directives.get("segment")
    if seg and "segment_size" not in attrs:
        if not seg.isdigit():
            raise SlurmError(f"#SBATCH --segment={seg}: not a number")
        out["segment_size"] = int(seg)
    if "ntasks" not in attrs and "ntasks" not in directives:
        nodes = str(attrs.get("nodes", directives.get("nodes", "1"))).split("-", 1)[0]
        per_node = directives.get("ntasks-per-node", "1")
        if nodes.isdigit() and per_node.isdigit() and int(nodes) > 1:
            out["ntasks"] = int(nodes) * int(per_node)
    return out


def _attributes(fields, table, what: str) -> dict:
    """scontrol-style field names -> pyslurm attribute names."""
    attrs = {}
    for k, v in fields.items():
        attr = table.get(k.lower())
        if attr is None:
            raise SlurmError(f"the pyslurm backend cannot update {what} field {k!r}")
        attrs[attr] = v
    return attrs
