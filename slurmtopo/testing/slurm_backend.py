"""The one in-memory Slurm backend of the tests and the benchmarks.

:class:`FakeSlurm` implements the :class:`slurmtopo.slurm.SlurmBackend`
interface over a few nodes with GPUs: jobs are submitted (held or not),
updated (``ReqNodeList``, ``Comment``, and the fields an admin changes:
``Partition``, ``Reservation``, ``ExcNodeList``, ``QOS``, ``Account``,
``Features``), held (``hold``: an admin hold, ``JobHeldAdmin``, as when
root or an operator holds; ``uhold``: a user hold, ``JobHeldUser``),
released and cancelled; like slurmctld, a hold on a job that has started
does not stop it but sets its priority to 0 and its reason (``scontrol``'s
man page: "attempting to hold a running job will not suspend or cancel
it"), and a release clears any hold of a job that has not finished;
``schedule()`` starts pending jobs the way Slurm would (a pinned job on
exactly its nodes, GPUs by socket with the most free then lowest index,
like cons_tres with gres.conf ``Cores=``). A release triggers a scheduling
pass, as it does in slurmctld. Hooks let a test inject races and crashes.
The start-time step's questions (``job_detail``, ``step_output``,
``config_text``, ``job_resources``) answer with the text a test gives, or are refused with a
SlurmError as by a Slurm that cannot tell. Every call is recorded.

It stands where the backend stands (the daemon, the use cases' submit,
the start-time step), so what it does is the backend contract; the
command-line backend itself is tested against the command stand-in
(tests/fakes/slurm_commands.py) and real Slurm (tests/integration).
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set

from slurmtopo.sbatch.directives import option_values, script_options
from slurmtopo.errors import SlurmError
from slurmtopo.inventory.hostlist import expand_hostlist
from slurmtopo.slurm.backend import SlurmBackend, SlurmJob, SlurmNode


@dataclass
class FJob:
    job_id: int
    script: str
    args: List[str]
    comment: str = ""
    held: bool = False
    #: who held it: "user" (JobHeldUser) or "admin" (JobHeldAdmin)
    held_by: str = "user"
    state: str = "PENDING"
    reason: Optional[str] = None
    nodes_n: int = 1
    gpn: int = 0
    tpn: int = 1
    exclusive: bool = False
    req_nodes: List[str] = field(default_factory=list)
    partition: str = "gpu"
    submit_time: int = 0
    alloc: Dict[str, List[int]] = field(default_factory=dict)
    cpus: int = 1
    user: str = "alice"
    uid: int = field(default_factory=os.getuid)
    name: str = ""
    reservation: str = ""
    qos: str = ""
    account: str = ""
    exc_nodes: List[str] = field(default_factory=list)
    features: str = ""
    #: an array job / a heterogeneous job's component
    array: bool = False
    het: bool = False
    #: why its record cannot be read with certainty (a user's text that
    #: reads as Slurm's fields, slurmtopo.slurm.jobrecord): the backend then
    #: reports nothing but its id
    unreadable: Optional[str] = None




class FakeSlurm(SlurmBackend):
    name = "fake"

    def __init__(self, nodes=4, gpus=8, cpus=16, prefix="node", partition="gpu",
                 auto_schedule=True, answers: Optional[Mapping[str, str]] = None):
        #: the start-time step's questions ("job", "probe", "config",
        #: "resources") -> text
        self.answers: Dict[str, Optional[str]] = dict(answers or {})
        #: which of them were asked, in order
        self.asked: List[str] = []
        self.gpus = gpus
        self.node_names = [f"{prefix}{i}" for i in range(1, nodes + 1)]
        self.cpus = {n: cpus for n in self.node_names}
        self.busy: Dict[str, Dict[int, int]] = {n: {} for n in self.node_names}  # gpu -> job
        self.cpu_used: Dict[str, int] = {n: 0 for n in self.node_names}
        self.excl: Dict[str, Optional[int]] = {n: None for n in self.node_names}
        self.node_state: Dict[str, str] = {n: "idle" for n in self.node_names}
        self.node_flags: Dict[str, Set[str]] = {n: set() for n in self.node_names}
        self.partitions = {n: (partition,) for n in self.node_names}
        self.jobs_: Dict[int, FJob] = {}
        self.ids = itertools.count(100)
        self.clock = itertools.count(int(time.time()))
        self.auto_schedule = auto_schedule
        self.calls: List[tuple] = []
        #: job ids asked for one by one (``job()``: ``scontrol show job``)
        self.looked_up: List[int] = []
        self.hooks: Dict[str, Callable] = {}

    # -- helpers for tests ---------------------------------------------------
    def occupy(self, node: str, gpus: Sequence[int], exclusive: bool = False) -> int:
        """A running job that holds these GPUs (or the whole node)."""
        jid = next(self.ids)
        j = FJob(jid, "", [], state="RUNNING", nodes_n=1, gpn=len(gpus),
                 submit_time=next(self.clock), exclusive=exclusive)
        self.jobs_[jid] = j
        self._allocate(j, {node: list(gpus) if not exclusive else list(range(self.gpus))})
        return jid

    def finish(self, job_id: int, state: str = "COMPLETED") -> None:
        j = self.jobs_[job_id]
        for h, gs in j.alloc.items():
            for g in gs:
                self.busy[h].pop(g, None)
            self.cpu_used[h] -= j.cpus
            if self.excl[h] == job_id:
                self.excl[h] = None
        j.state = state
        if self.auto_schedule:
            self.schedule()

    def releases(self, job_id: int) -> int:
        return sum(1 for c in self.calls if c == ("release", job_id))

    def _allocate(self, j: FJob, alloc: Dict[str, List[int]]) -> None:
        for h, gs in alloc.items():
            for g in gs:
                self.busy[h][g] = j.job_id
            self.cpu_used[h] += j.cpus
            if j.exclusive:
                self.excl[h] = j.job_id
        j.alloc = alloc
        j.state = "RUNNING"
        j.reason = None

    def _pick(self, node: str, k: int) -> Optional[List[int]]:
        free = [g for g in range(self.gpus) if g not in self.busy[node]]
        if len(free) < k:
            return None
        sockets: Dict[int, List[int]] = {}
        for g in free:
            sockets.setdefault(g * 2 // self.gpus, []).append(g)
        out: List[int] = []
        for _, gs in sorted(sockets.items(), key=lambda t: (-len(t[1]), t[0])):
            out += gs[:k - len(out)]
        return sorted(out)

    def _fits(self, j: FJob, node: str) -> Optional[List[int]]:
        if self.node_state[node] not in ("idle", "mixed", "allocated") or self.node_flags[node]:
            return None
        if self.excl[node] is not None:
            return None
        if j.exclusive and (self.busy[node] or self.cpu_used[node]):
            return None
        if self.cpus[node] - self.cpu_used[node] < j.cpus:
            return None
        return self._pick(node, self.gpus if j.exclusive else j.gpn)

    def schedule(self) -> None:
        for j in sorted(self.jobs_.values(), key=lambda j: j.job_id):
            if j.state != "PENDING" or j.held:
                continue
            if j.req_nodes:
                picks = {h: self._fits(j, h) for h in j.req_nodes}
                if len(j.req_nodes) == j.nodes_n and all(v is not None for v in picks.values()):
                    self._allocate(j, picks)
                else:
                    j.reason = "Resources"
                continue
            picks = {}
            for h in self.node_names:
                p = self._fits(j, h)
                if p is not None:
                    picks[h] = p
                if len(picks) == j.nodes_n:
                    break
            if len(picks) == j.nodes_n:
                self._allocate(j, picks)
            else:
                j.reason = "Resources"

    # -- the backend interface -------------------------------------------------
    def nodes(self) -> List[SlurmNode]:
        self.nodes_hook()
        out = []
        for n in self.node_names:
            used = frozenset(self.busy[n])
            if self.excl[n] is not None:
                st = "allocated"
            elif used:
                st = "mixed" if len(used) < self.gpus else "allocated"
            else:
                st = self.node_state[n]
            out.append(SlurmNode(name=n, state=st, flags=frozenset(self.node_flags[n]),
                                 gpus_total=self.gpus, gpus_used=used,
                                 partitions=self.partitions[n], cpus_total=self.cpus[n],
                                 cpus_alloc=self.cpu_used[n]))
        return out

    def _as_job(self, j: FJob) -> SlurmJob:
        if j.unreadable:
            return SlurmJob(job_id=j.job_id, state="UNKNOWN", unreadable=j.unreadable,
                            maybe_tagged="slurmtopo:v1:" in j.comment)
        # like the parsers: a job with a hold reason is held, running or not
        # (a hold that lands on a started job leaves it running at priority 0)
        reason = (("JobHeldAdmin" if j.held_by == "admin" else "JobHeldUser") if j.held
                  else j.reason)
        return SlurmJob(job_id=j.job_id, name=j.name or f"job{j.job_id}", user=j.user,
                        state=j.state, reason=reason, priority=0 if j.held else 1,
                        submit_time=j.submit_time, nodes=tuple(j.alloc),
                        gpus={h: tuple(g) for h, g in j.alloc.items()}, comment=j.comment,
                        held=j.held and j.state not in self.FINISHED,
                        req_nodes=tuple(j.req_nodes), partition=j.partition,
                        num_nodes=j.nodes_n, user_id=j.uid, reservation=j.reservation,
                        qos=j.qos, account=j.account, exc_nodes=tuple(j.exc_nodes),
                        features=j.features, array=j.array, het=j.het)

    FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"})

    #: squeue --json lists finished jobs on 22.05, not from 23.02 on (job() still finds them)
    lists_finished = True

    def nodes_hook(self) -> None:
        hook = self.hooks.get("nodes")
        if hook:
            hook()

    def jobs(self, states=None) -> List[SlurmJob]:
        hook = self.hooks.get("jobs")
        if hook:
            hook()
        out = [self._as_job(j) for j in self.jobs_.values()
               if self.lists_finished or j.state in ("PENDING", "RUNNING", "COMPLETING")]
        if states is not None:
            out = [j for j in out if j.state in set(states)]
        return out

    def job(self, job_id: int) -> Optional[SlurmJob]:
        self.looked_up.append(int(job_id))
        hook = self.hooks.get("job")
        if hook:
            hook(int(job_id))
        j = self.jobs_.get(int(job_id))
        return self._as_job(j) if j else None

    def submit(self, script: str, args: Sequence[str] = (), hold: bool = False) -> int:
        # what sbatch would take: the script's directives, then the command line
        opts = option_values(script_options(script, args))
        self.calls.append(("submit", tuple(args), hold))
        jid = next(self.ids)
        gpn = opts.get("gpus-per-node") or opts.get("gres") or "0"
        j = FJob(jid, script, list(args), comment=opts.get("comment") or "", held=hold,
                 nodes_n=int(opts.get("nodes") or 1),
                 gpn=int(str(gpn).split(":")[-1]),
                 tpn=int(opts.get("ntasks-per-node") or 1),
                 exclusive="exclusive" in opts, submit_time=next(self.clock),
                 partition=opts.get("partition") or "gpu")
        nl = opts.get("nodelist")
        if nl:
            j.req_nodes = expand_hostlist(nl)
        j.cpus = j.tpn
        if j.partition not in {p for ps in self.partitions.values() for p in ps}:
            raise SlurmError("sbatch: error: invalid partition specified")
        self.jobs_[jid] = j
        if self.auto_schedule:
            self.schedule()
        return jid

    def update_job(self, job_id: int, **fields) -> None:
        self.calls.append(("update", int(job_id), tuple(sorted(fields.items()))))
        hook = self.hooks.get("update")
        if hook:
            hook(int(job_id), fields)
        j = self.jobs_.get(int(job_id))
        if j is None:
            raise SlurmError("Invalid job id specified")
        for k, v in fields.items():
            if k in ("ReqNodeList", "NodeList"):
                if j.state != "PENDING":
                    raise SlurmError("Job is no longer pending execution")
                j.req_nodes = expand_hostlist(v) if v else []
            elif k == "Comment":
                j.comment = v
            elif k in self.ADMIN_FIELDS:
                if j.state != "PENDING":
                    raise SlurmError("Job is no longer pending execution")
                attr = self.ADMIN_FIELDS[k]
                if attr == "exc_nodes":
                    v = expand_hostlist(v) if v else []
                setattr(j, attr, v)
            else:
                raise SlurmError(f"Update of this parameter is not supported: {k}={v}")

    #: scontrol update fields an admin changes -> FJob attribute
    ADMIN_FIELDS = {"Partition": "partition", "Reservation": "reservation",
                    "ExcNodeList": "exc_nodes", "QOS": "qos", "Account": "account",
                    "Features": "features"}

    def _hold(self, call: str, job_id: int, by: str) -> None:
        self.calls.append((call, int(job_id)))
        hook = self.hooks.get("hold")
        if hook:
            hook(int(job_id))
        j = self.jobs_.get(int(job_id))
        if j is None:
            raise SlurmError("Invalid job id specified")
        if j.state in self.FINISHED:
            raise SlurmError("Job/step already completing or completed")
        # slurmctld sets priority 0 whatever the state: a started job keeps
        # running, held (Priority=0 Reason=JobHeldAdmin)
        j.held, j.held_by = True, by

    def hold(self, job_id: int) -> None:
        """An admin hold (the daemon runs as root or an operator)."""
        self._hold("hold", job_id, "admin")

    def uhold(self, job_id: int) -> None:
        self._hold("uhold", job_id, "user")

    def release(self, job_id: int) -> None:
        hook = self.hooks.get("release")
        if hook:
            hook(int(job_id))
        self.calls.append(("release", int(job_id)))
        j = self.jobs_.get(int(job_id))
        if j is None or j.state in self.FINISHED:
            raise SlurmError("Job/step already completing or completed")
        if j.state != "PENDING" and not j.held:
            raise SlurmError("Job is no longer pending execution")
        j.held = False
        if self.auto_schedule:
            self.schedule()
        hook = self.hooks.get("after_release")
        if hook:
            hook(int(job_id))

    def cancel(self, job_id: int) -> None:
        self.calls.append(("cancel", int(job_id)))
        j = self.jobs_.get(int(job_id))
        if j is None:
            raise SlurmError("Invalid job id specified")
        if j.state == "RUNNING":
            self.finish(j.job_id, "CANCELLED")
        else:
            j.state = "CANCELLED"

    def update_node(self, node: str, **fields) -> None:
        raise SlurmError("not supported by the fake")

    # -- the start-time step's questions ------------------------------------
    def _answer(self, what: str) -> str:
        self.asked.append(what)
        text = self.answers.get(what)
        if text is None:
            raise SlurmError(f"{what}: no answer")
        return text

    def job_detail(self, job_id: int) -> str:
        return self._answer("job")

    def node_addr(self, node: str):
        return self._answer(f"addr {node}")

    def step_output(self, options, command, env=None) -> str:
        return self._answer("probe")

    def config_text(self) -> str:
        return self._answer("config")

    def job_resources(self, job_id: int) -> str:
        return self._answer("resources")

    def topology_text(self) -> str:
        """``scontrol show topology`` as the test set it (answers
        "topology"); "" (no topology) when it set none."""
        self.asked.append("topology")
        return self.answers.get("topology") or ""
