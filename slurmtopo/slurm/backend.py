"""The Slurm backend interface: what slurmtopo reads from and asks of Slurm.

Two implementations:

* :class:`~slurmtopo.slurm.cli_backend.CliBackend` runs Slurm's commands
  (``sinfo --json``, ``squeue --json``, ``scontrol`` text, ``sbatch``); it
  works on any Slurm >= 22.05 and is the one the integration tests run.
* :class:`~slurmtopo.slurm.pyslurm_backend.PySlurmBackend` uses pyslurm's
  object API (pyslurm 25.11, only for a site running a matching Slurm).

Everything above this layer (planner, daemon, ``slurmtopo sbatch``) sees only
:class:`SlurmNode`, :class:`SlurmJob` and :class:`~slurmtopo.inventory.model.ClusterState`.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmError
from slurmtopo.inventory.model import UNKNOWN_TO_SLURM, ClusterState, Inventory, NodeState

#: job states in which a job holds its allocation
ACTIVE_JOB_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING",
                               "STAGE_OUT", "SIGNALING", "RESIZING"})
#: the reason Slurm gives a job held by its user (``sbatch --hold``,
#: ``scontrol uhold``); an admin's ``scontrol hold`` gives ``JobHeldAdmin``
USER_HOLD_REASON = "JobHeldUser"
#: the job fields that say where and under whose terms a job may run, as
#: squeue --json / scontrol show job / pyslurm report them on Slurm 22.05
#: to 26.05 (Partition, Reservation, QOS, Account, ReqNodeList,
#: ExcNodeList, Features): the placement daemon leaves a job alone once
#: one of them changed after it first saw the job (docs/daemon.md)
#: (SlurmJob attribute -> the field's name in scontrol)
JOB_FINGERPRINT = {"partition": "Partition", "reservation": "Reservation", "qos": "QOS",
                   "account": "Account", "req_nodes": "ReqNodeList", "exc_nodes": "ExcNodeList",
                   "features": "Features"}


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: FrozenSet[str] = frozenset()  # lower case: drain, maint, not_responding, ...
    gpus_total: int = 0
    gpus_used: FrozenSet[int] = frozenset()  # NVML indices held by jobs
    features: Tuple[str, ...] = ()
    partitions: Tuple[str, ...] = ()
    reason: Optional[str] = None
    gres: str = ""  # configured GRES string as Slurm prints it ("gpu:a6000:8")
    cpus_total: int = 0
    cpus_alloc: int = 0

    @property
    def usable(self) -> bool:
        return NodeState(self.name, self.state, flags=self.flags).usable


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str = ""
    user: str = ""
    state: str = "PENDING"  # PENDING, RUNNING, ... (upper case, base state)
    reason: Optional[str] = None
    priority: int = 0
    submit_time: int = 0  # epoch seconds
    nodes: Tuple[str, ...] = ()  # allocated nodes (empty while pending)
    gpus: Mapping[str, Tuple[int, ...]] = field(default_factory=dict)  # host -> GPU indices
    comment: str = ""
    held: bool = False
    req_nodes: Tuple[str, ...] = ()
    partition: str = ""
    num_nodes: int = 0
    #: GPU request as Slurm states it ("gpu:8", "gres:gpu:4", ...), informational
    gres_request: str = ""
    exclusive: bool = False
    #: the owner's uid (None: the backend cannot tell)
    user_id: Optional[int] = None
    #: what an admin (or the user) may change after submission; the
    #: placement daemon keeps them as a fingerprint (JOB_FINGERPRINT)
    reservation: str = ""
    qos: str = ""
    account: str = ""
    exc_nodes: Tuple[str, ...] = ()
    features: str = ""
    #: the job's working directory (sbatch's submit directory unless
    #: --chdir; "" when the backend cannot tell): where its run directory is
    work_dir: str = ""
    #: an array job (or one of its tasks) / a component of a heterogeneous
    #: job: releasing its id releases every task or component at once
    array: bool = False
    het: bool = False
    #: why Slurm's record of this job cannot be read with certainty (text a
    #: user wrote reads as Slurm's fields, or the record could not be
    #: parsed; slurmtopo.slurm.jobrecord); None when it can. Such a job
    #: carries nothing but its id: no one acts on it
    unreadable: Optional[str] = None
    #: an unreadable record that holds the placement daemon's tag somewhere
    maybe_tagged: bool = False

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def held_by_user(self) -> bool:
        """Pending with a *user* hold (``JobHeldUser``: ``sbatch --hold``,
        ``scontrol hold`` by the job's owner, ``scontrol uhold`` by anyone),
        the only hold the placement daemon lifts. An admin's ``scontrol
        hold`` gives ``JobHeldAdmin``."""
        return self.state == "PENDING" and self.held and self.reason == USER_HOLD_REASON

    def fingerprint(self) -> Dict[str, str]:
        """The fields of :data:`JOB_FINGERPRINT` as text (hostlists folded
        sorted), to tell a job changed after submission."""
        out = {}
        for key in JOB_FINGERPRINT:
            value = getattr(self, key)
            if isinstance(value, tuple):
                value = ",".join(sorted(value))
            out[key] = str(value or "")
        return out

    def __hash__(self) -> int:  # gpus is a dict; hash on identity fields
        return hash((self.job_id, self.state, self.nodes))


class SlurmBackend(abc.ABC):
    """Read cluster state from Slurm and act on jobs and nodes."""

    name = "abstract"

    # -- reading ---------------------------------------------------------
    @abc.abstractmethod
    def nodes(self) -> List[SlurmNode]:
        """Every node Slurm knows, with GPUs configured and in use."""

    @abc.abstractmethod
    def jobs(self, states: Optional[Iterable[str]] = None) -> List[SlurmJob]:
        """Jobs (optionally only those in ``states``, e.g. {"PENDING"})."""

    def job(self, job_id: int) -> Optional[SlurmJob]:
        """One job, or None when Slurm does not know it (any more)."""
        for j in self.jobs():
            if j.job_id == int(job_id):
                return j
        return None

    def job_ids(self, user_id: Optional[int] = None) -> FrozenSet[int]:
        """The ids of every job Slurm still lists (of ``user_id``'s, when
        given), whatever its state: what must not lose its run directory."""
        return frozenset(j.job_id for j in self.jobs()
                         if user_id is None or j.user_id == user_id)

    def batch_script(self, job_id: int) -> Optional[str]:
        """The job's batch script as Slurm keeps it (None: not available,
        e.g. the job finished and accounting does not store scripts)."""
        return None

    def accounted_work_dir(self, job_id: int) -> Optional[str]:
        """The job's working directory from accounting, for a job slurmctld
        has forgotten (None: unknown, or no accounting)."""
        return None

    def cluster_state(self, inventory: Optional[Inventory] = None) -> ClusterState:
        """Free/busy view for the planner.

        Busy GPUs are the GRES indices Slurm has allocated on each node; a
        node is unusable when its state or flags keep new work off it. When
        an ``inventory`` is given, only its nodes are reported and an
        inventory node unknown to Slurm is reported down.
        """
        return cluster_state_from(self.nodes(), inventory, source=f"slurm:{self.name}")

    # -- acting ----------------------------------------------------------
    @abc.abstractmethod
    def submit(self, script: str, args: Sequence[str] = (), hold: bool = False) -> int:
        """Submit a batch script (text); return the job id.

        ``args`` are extra sbatch options (argv items, never shell text).
        Raises :class:`SlurmError` with Slurm's own message on failure.
        """

    @abc.abstractmethod
    def update_job(self, job_id: int, **fields: str) -> None:
        """``scontrol update JobId=<id> Key=Value ...``."""

    @abc.abstractmethod
    def hold(self, job_id: int) -> None:
        """``scontrol hold``: an admin hold when the caller is privileged."""

    @abc.abstractmethod
    def uhold(self, job_id: int) -> None:
        """``scontrol uhold``: a *user* hold whoever asks (``JobHeldUser``,
        which the job's owner may release), the only hold the placement
        daemon places, so that its holds are told from an admin's."""

    @abc.abstractmethod
    def release(self, job_id: int) -> None: ...

    @abc.abstractmethod
    def cancel(self, job_id: int) -> None: ...

    @abc.abstractmethod
    def update_node(self, node: str, **fields: str) -> None:
        """``scontrol update NodeName=<node> Key=Value ...`` (e.g. State=DRAIN Reason=..)."""


    # -- administration and the start-time step --------------------------
    # Not abstract: a backend that cannot do one of these says so with a
    # SlurmError, which every caller already handles as "Slurm said no".

    def reconfigure(self) -> None:
        """``scontrol reconfigure``: slurmctld re-reads its configuration."""
        raise SlurmError(f"the {self.name} backend cannot reconfigure Slurm; use the cli backend")

    def node_reason(self, node: str) -> Optional[str]:
        """The node's current Reason (without Slurm's ``[user@time]``
        suffix), or None when it has none."""
        raise SlurmError(f"the {self.name} backend cannot read node reasons; use the cli backend")

    def node_addr(self, node: str) -> Optional[str]:
        """The node's NodeAddr (where slurmctld reaches its slurmd), or None
        when Slurm shows none."""
        raise SlurmError(f"the {self.name} backend cannot read node addresses; use the cli "
                         "backend")

    def job_detail(self, job_id: int) -> str:
        """``scontrol show job -d <id>`` text (the GPU indices of every node)."""
        raise SlurmError(f"the {self.name} backend cannot show job details; use the cli backend")

    def job_resources(self, job_id: int) -> str:
        """``scontrol show resources <id>`` text (Slurm 25.11+): one
        ``Node=`` line per node of the running job, with ``Channel=N`` where
        switch/nvidia_imex gave the node an IMEX channel."""
        raise SlurmError(f"the {self.name} backend cannot show job resources; use the cli "
                         "backend")

    def topology_text(self) -> str:
        """``scontrol show topology`` text: the switches or blocks as
        slurmctld holds them now (``scontrol update ... Topology=`` and
        power saving change them without a reconfigure)."""
        raise SlurmError(f"the {self.name} backend cannot show Slurm's topology; use the cli "
                         "backend")

    def config_text(self) -> str:
        """``scontrol show config`` text (cgroup.conf settings included)."""
        raise SlurmError(f"the {self.name} backend cannot show Slurm's configuration; use the "
                         "cli backend")

    def step_output(self, options: Sequence[str], command: Sequence[str],
                    env: Optional[Mapping[str, str]] = None) -> str:
        """Run ``srun OPTIONS COMMAND`` inside the current allocation (with
        ``env`` as its environment) and return what it printed."""
        raise SlurmError(f"the {self.name} backend cannot start job steps; use the cli backend")

    def srun_options(self) -> Optional[FrozenSet[str]]:
        """The long options this cluster's srun knows (``--container-image``
        only where the pyxis plugin is installed), or None when that cannot
        be told from here (then nothing is refused on its account)."""
        return None

    def accounting(self, start: str, end: str, fields: Sequence[str]) -> str:
        """``sacct -a -X -P -S START -E END -o FIELDS``: the jobs that ran in
        the period as ``sacct -P`` text, header included (``slurmtopo
        audit --sacct``)."""
        raise SlurmError(f"the {self.name} backend cannot read accounting; use the cli backend")


def node_state_of(node: SlurmNode) -> NodeState:
    """The planner's view of one Slurm node: busy GPUs are the GRES indices
    jobs hold; an ``allocated`` node (every CPU taken) has no room for a new
    job whatever its GPUs, so it counts as taken whole."""
    return NodeState(name=node.name, state=node.state, busy_gpus=frozenset(node.gpus_used),
                     flags=frozenset(node.flags), exclusive=node.state == "allocated")


def cluster_state_from(nodes: Iterable[SlurmNode], inventory: Optional[Inventory] = None,
                       source: Optional[str] = None) -> ClusterState:
    out: Dict[str, NodeState] = {}
    for n in nodes:
        if inventory is not None and n.name not in inventory.nodes:
            continue
        st = node_state_of(n)
        if inventory is not None:
            n_gpus = inventory.nodes[n.name].hardware.gpu_count
            busy = {g for g in st.busy_gpus if g < n_gpus}
            # GPUs Slurm does not have (gres.conf lists fewer than the
            # inventory) cannot be allocated: count them busy
            busy |= set(range(min(n.gpus_total, n_gpus), n_gpus))
            st = NodeState(st.name, st.state, frozenset(busy), st.flags, st.exclusive)
        out[n.name] = st
    if inventory is not None:
        for name in inventory.nodes:
            if name not in out:
                out[name] = NodeState(name=name, state="down", flags=frozenset({UNKNOWN_TO_SLURM}))
    return ClusterState(nodes=out, source=source)
