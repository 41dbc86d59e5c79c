"""What the placement daemon would do with a job now, for ``slurmtopo
sbatch --daemon``'s preview (the same decision code, on the current state)."""
from __future__ import annotations

from typing import List, Optional

from slurmtopo.daemon.decisions import RELEASE, WAIT, ClusterView, Config, QueuedJob
from slurmtopo.daemon.decisions import format_time, format_wait
from slurmtopo.daemon.held_job import HeldJob
from slurmtopo.daemon.scheduler import decide
from slurmtopo.model import ClusterState, Inventory


# --------------------------------------------------------------------------
# for the submit-time preview


def preview_lines(inv: Inventory, state: Optional[ClusterState], req,
                  default_wait: float = 0.0) -> List[str]:
    """What the daemon would do with ``req`` now, for ``slurmtopo sbatch
    --daemon``'s preview: which preferences it waits for, for how long,
    and the modelled cost of the preferred and of the fallback placement."""
    from slurmtopo.daemon.protocol import DaemonSpec, Shape

    q = QueuedJob(job_id=0, spec=DaemonSpec(request=req, shape=Shape()), submit_time=0.0)
    view = ClusterView(state=state or ClusterState())
    cfg = Config(default_wait=default_wait, reservations=0)
    d = decide([q], inv, view, now=0.0, config=cfg)[-1]
    lines = []
    job = HeldJob(q, inv, view, 0.0, cfg)
    for kind, level in job.prefs.items():
        w = job.waits.get(kind, 0.0)
        lines.append(f"prefers {kind}={level}: waits up to {format_wait(w)} for it, then takes the "
                     "best placement meeting its requirements" if w else
                     f"prefers {kind}={level}: no wait (takes the best placement free)")
    if d.action == RELEASE:
        lines.append("the daemon would release it now: " + d.summary())
    elif d.action == WAIT:
        lines.append("the daemon would keep it held: " + d.reason)
        if d.preferred_cost_s is not None:
            lines.append(f"preferred placement: modelled step {format_time(d.preferred_cost_s)}")
    else:
        lines.append(f"the daemon would {d.action} it: {d.reason}")
    return lines + [f"note: {n}" for n in d.notes if "ranks on" not in n]
