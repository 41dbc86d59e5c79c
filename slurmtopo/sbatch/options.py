"""How to write a job's batch script, apart from its placement: one
dataclass, :class:`ScriptOptions`.

The command line (``plan``/``sbatch``), the Python API
(:func:`slurmtopo.api.prepare`, which re-exports it) and
:meth:`slurmtopo.sbatch.SbatchRequest.from_plan` all take this one object,
so an option is declared once and never copied as a parameter list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:
    from slurmtopo.sbatch.launch import Launch

#: Slurm's default max_switch_wait is 300 s
DEFAULT_SWITCH_WAIT = "5:00"


@dataclass(frozen=True)
class ScriptOptions:
    """How to write the batch script (everything but the placement).

    ``switch_wait`` None means no wait limit in ``--switches``.
    """

    job_name: Optional[str] = None
    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    topology: str = "auto"
    switch_wait: Optional[str] = DEFAULT_SWITCH_WAIT
    extra: Tuple[str, ...] = ()
    python: str = "python3"
    cgroup_devices: str = "auto"
    master_port: Optional[int] = None
    socket_ifname: Optional[str] = None
    run_dir: Optional[str] = None
    #: recorded in the script for ``slurmtopo bind`` (default: the path the
    #: cluster was loaded from)
    inventory_path: Optional[str] = None
    #: how the ranks start (srun or torchrun, containers); None: srun
    launch: Optional[Launch] = None
    #: first-class sbatch options as (name, value): ("qos", "high"), ...
    options: Tuple[Tuple[str, str], ...] = ()
    requeue: bool = False
    #: what the cluster's Slurm can be asked for (release, switch/nvidia_imex):
    #: slurmtopo.placement.segments.SlurmFeatures; None: a current release
    slurm: Optional[object] = None
    #: the pre-launch hazard policy as KIND=LEVEL texts (slurmtopo.plan.hazards)
    hazards: Tuple[str, ...] = ()
    #: the NCCL release the job loads, as given (``--nccl-version``;
    #: recorded in the plan for the start-time step)
    nccl_version: Optional[str] = None
    #: ... and as the submitting environment shows it ($NCCL_VERSION), used
    #: when none was given (slurmtopo.plan.hazards.nccl_version), not recorded
    nccl_version_env: Optional[str] = None
    #: idle spare nodes inside the job's block or leaf (docs/sbatch.md)
    spares: int = 0
    #: run ``slurmtopo check`` as the job's first step: "warn" (report) or
    #: "stop" (end the job on a broken contract); None: no check
    check: Optional[str] = None

    @property
    def constraint(self) -> Optional[str]:
        return dict(self.options).get("constraint")
