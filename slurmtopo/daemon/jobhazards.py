"""The job's pre-launch hazard policy and NCCL release in a v1 request (the
``hazards`` field), and the check of a placement the daemon is about to pin.

``slurmtopo sbatch --daemon`` checks its submit-time plan
(:func:`slurmtopo.api.prepare`), but the daemon picks the nodes itself, later,
on another state of the cluster: it checks its own choice again
(:mod:`slurmtopo.daemon.scheduler`), with what the job was submitted with::

    "hazards": {"policy": ["group-domain=error", "mnnvl-clique=warn"], "nccl": "2.24.3"}

``policy``: the job's hazard policy (``SLURMTOPO_HAZARDS``, then
``--hazard``), as ``KIND=LEVEL`` items, one a kind, sorted; ``nccl``: the
NCCL release the job loads (``--nccl-version``, else ``$NCCL_VERSION`` as
the submitting environment, which the job inherits, showed it). Both
optional, and the field is left out when neither is given: a request
without it (every release before this one wrote none) is checked with each
rule's own severity and the NCCL release of the daemon's inventory
(``cost: nccl_version``); never with the daemon's own environment.

It is a user's input to a daemon that runs as root: only these two keys, at
most :data:`MAX_POLICY_ITEMS` items of at most :data:`MAX_TEXT` characters,
each parsed by the rules' one reader (:meth:`slurmtopo.plan.hazards.HazardPolicy.
parse`, :func:`slurmtopo.job.workload.parse_nccl_version`); anything else is a
:class:`ValueError` of one line (the protocol makes it its ProtocolError).
Pure; no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Tuple

from slurmtopo.daemon.wire import show as _show
from slurmtopo.daemon.wire import unknown_fields
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.job.workload import parse_nccl_version
from slurmtopo.plan.hazards import HazardPolicy, HazardReport, check_hazards, nccl_version

__all__ = ["JobHazards", "NO_HAZARDS", "hazards_to_dict", "hazards_from_dict",
           "placement_hazards", "MAX_POLICY_ITEMS", "MAX_TEXT"]

#: policy items a request may carry (one a kind is what is written; ``all``
#: and repeated kinds are read as --hazard reads them)
MAX_POLICY_ITEMS = 16
#: the longest policy item or NCCL release text
MAX_TEXT = 64
_KEYS = ("policy", "nccl")


@dataclass(frozen=True)
class JobHazards:
    """What a job was submitted with for the hazard checks (hashable: part
    of the request the daemon keeps per job)."""

    #: ``KIND=LEVEL`` items (:class:`slurmtopo.plan.hazards.HazardPolicy`)
    policy: Tuple[str, ...] = ()
    #: the NCCL release the job loads, as given; None: not known
    nccl: Optional[str] = None

    @classmethod
    def of(cls, items: Iterable[str] = (), nccl: Optional[str] = None) -> "JobHazards":
        """From the submitting command's options, normalised (one item a
        kind, sorted); SlurmtopoError for an item or release it refuses."""
        policy = HazardPolicy.parse(tuple(items or ()))
        if nccl:
            parse_nccl_version(nccl)
        return cls(tuple(policy.items()), str(nccl).strip() if nccl else None)

    @property
    def given(self) -> bool:
        return bool(self.policy or self.nccl)


NO_HAZARDS = JobHazards()


def hazards_to_dict(h: Optional[JobHazards]) -> Optional[Dict[str, Any]]:
    """The wire form of ``h`` (None: nothing to write)."""
    if h is None or not h.given:
        return None
    out: Dict[str, Any] = {}
    if h.policy:
        out["policy"] = list(h.policy)
    if h.nccl:
        out["nccl"] = h.nccl
    return out


def hazards_from_dict(value: Any) -> JobHazards:
    """The JobHazards of a request's ``hazards`` field (:data:`NO_HAZARDS`
    when absent); ValueError, one line, for anything else than
    :func:`hazards_to_dict` writes."""
    if value is None:
        return NO_HAZARDS
    if not isinstance(value, dict):
        raise ValueError(f"hazards must be an object (policy, nccl), got {_show(value)}")
    why = unknown_fields(value, _KEYS, "hazards")
    if why:
        raise ValueError(why)
    items = value.get("policy", [])
    if not isinstance(items, list) or len(items) > MAX_POLICY_ITEMS or not all(
            isinstance(x, str) and 0 < len(x) <= MAX_TEXT for x in items):
        raise ValueError(f"hazards.policy must be a list of at most {MAX_POLICY_ITEMS} "
                         f"KIND=LEVEL texts, got {_show(items)}")
    nccl = value.get("nccl")
    if nccl is not None and (not isinstance(nccl, str) or not 0 < len(nccl) <= MAX_TEXT):
        raise ValueError(f"hazards.nccl must be an NCCL release (text), got {_show(nccl)}")
    try:
        policy = HazardPolicy.parse(items, "hazards.policy")
        if nccl is not None:
            parse_nccl_version(nccl, "hazards.nccl")
    except SlurmtopoError as exc:
        raise ValueError(exc.message) from None
    return JobHazards(tuple(policy.items()), nccl.strip() if nccl else None)


def placement_hazards(inv: Inventory, placement: Placement, h: Optional[JobHazards],
                      request=None) -> HazardReport:
    """The pre-launch hazards of ``placement`` for a job submitted with
    ``h``: its policy, and its NCCL release, else the one its ``request``'s
    workload carries (the cost model's ``work.nccl``), else the
    inventory's (:func:`slurmtopo.plan.hazards.nccl_version`, never the daemon's
    own environment). The same rules as every other launch path."""
    h = h or NO_HAZARDS
    given = h.nccl
    workload = getattr(request, "workload", None)
    if given is None and getattr(workload, "nccl_version", None):
        given = ".".join(str(int(x)) for x in workload.nccl_version)
    return check_hazards(inv, placement, nccl_version=nccl_version(given, {}, inv),
                         policy=HazardPolicy.parse(h.policy, "hazards.policy"))
