"""What the cost model reports: per group kind the slowest group and its
link, and the step (:class:`slurmtopo.cost.step.StepPrice`) with its time."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from slurmtopo.inventory.links import LinkClass


@dataclass
class GroupCost:
    kind: str
    count: int  # groups of this kind
    size: int  # ranks per group
    collective: str  # all-reduce | all-gather | all-to-all | p2p
    message_bytes: int
    slowest: LinkClass  # slowest link any group of the kind crosses
    time_s: float  # modelled time of one collective on the slowest group
    worst_group: int  # index (in groups[kind]) of the slowest group


@dataclass
class CostReport:
    kinds: Dict[str, GroupCost]
    #: the step's time (``step.time_s``); a lower bound's: no placement's
    #: step is faster
    step_time_s: float
    warnings: List[str] = field(default_factory=list)
    counted: Tuple[str, ...] = ()  # kinds the step communicates over
    #: lower bounds only: the per-kind bounds summed (each kind alone,
    #: <= step_time_s, which prices the kinds jointly)
    alone_s: Optional[float] = None
    #: lower bounds only: the communication's bound (every call on its
    #: best links, the kinds jointly); ``step_time_s`` is the whole step's
    #: (compute at the fastest GPUs that hold the job) when the job
    #: describes its model, else this
    comm_s: Optional[float] = None
    #: the step priced (a StepPrice; None for a lower bound)
    step: Optional[Any] = None
