"""What a running job puts on the network: its step's communication as
flows between hosts, from one pricing of the step.

This is the simulator's one reader of the step's calls. :func:`step_pricing`
is the adapter: it asks the step function
(:func:`slurmtopo.cost.step.price_step`, every call of one training step
of the job's workload, priced on the planner's groups) for one step of a
placement, and hands back, per call, its collective, message, count,
priced seconds and groups. Everything else here is arithmetic on those,
so a change of the step model changes this one function.

From a call to flows
    Each call runs over its groups at once. A group whose ranks sit on
    several hosts moves bytes between them; the ring NCCL builds for large
    messages visits the group's ranks in order, so every place where the
    ring passes from one host to the next is an *edge* carrying, per call:

    ============  ====================================================
    all-reduce    2 (n-1)/n x message (reduce-scatter, then all-gather)
    all-gather    (n-1)/n x message (a reduce-scatter alike: message is
                  the gathered, or scattered, whole)
    all-to-all    message / n from every rank to every rank of another
                  host
    p2p           half the calls' message each way between neighbouring
                  pipeline stages (activations forward, gradients back)
    ============  ====================================================

    An edge is carried by as many flows as the group has ranks on its
    source host (NCCL opens a channel per NIC a host's ranks use; each
    channel's connection is one flow to the network: one queue pair, one
    5-tuple), each a share of the bytes.

Rates
    A call's flows send at the rate the pricing gave the call: its bytes
    over its priced seconds (what the slowest group needed), and a flow
    over the network at most at its GPU's NIC share: where the step model
    prices an algorithm that sends less over the network than a flat ring
    (NCCL's trees and NVLink-domain-aware algorithms reduce inside a host
    or a rack first), the ring's bytes over the priced seconds would ask
    more of a NIC than it has. :class:`JobTraffic`
    keeps, per call, its seconds and its edges; what the contention model
    (:mod:`~slurmtopo.simulate.contention`) needs is bytes per second on
    each link, which it derives from these and the fabric.

The whole step's calls are what a job sends, overlapped with compute or
not: a link carries the bytes either way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.cost.step import price_step, subgroups
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.job.groups import build_groups
from slurmtopo.job.request import JobRequest

#: flows one edge is split into at most (a host's NICs and channels)
MAX_FLOWS = 64

__all__ = ["PricedCall", "CallTraffic", "JobTraffic", "step_pricing", "job_traffic",
           "edge_bytes"]


@dataclass(frozen=True)
class PricedCall:
    """One call of a step as the step model prices it: ``calls`` collectives
    of ``message_bytes`` over each of ``groups`` (global ranks), all of them
    taking ``seconds`` (hidden behind compute or not)."""

    what: str
    collective: str
    message_bytes: int
    calls: int
    seconds: float
    groups: Sequence[Sequence[int]]


def step_pricing(inv: Inventory, placement: Placement, request: JobRequest,
                 params=None) -> List[PricedCall]:
    """Every call of one training step of ``placement``, priced: the
    simulator's one adapter to the step model (see the module doc). The
    job's workload is its request's (the step model's default model when it
    names none)."""
    step = price_step(inv, placement, request, params)
    groups = placement.groups if placement.groups else build_groups(request.layout)
    out = []
    for c in step.calls:
        call = c.call
        gl = groups.get(call.kind) or []
        if call.part[0] != "all":
            gl = subgroups(gl, call.part)
        out.append(PricedCall(call.what, call.collective, call.message_bytes, call.calls,
                              c.seconds, gl))
    return out


@dataclass(frozen=True)
class CallTraffic:
    """One call's traffic between hosts: its priced seconds per step and
    its edges, each ``(source host, destination host, bytes per step,
    flows)``."""

    what: str
    seconds: float
    edges: Tuple[Tuple[str, str, float, int], ...]

    @property
    def bytes(self) -> float:
        return sum(e[2] for e in self.edges)


@dataclass(frozen=True)
class JobTraffic:
    """A job's traffic between hosts, call by call (only the calls that
    leave a host), and the seconds all its calls take per step."""

    calls: Tuple[CallTraffic, ...]
    comm_s: float

    @property
    def empty(self) -> bool:
        return not self.calls

    def share(self, call: CallTraffic) -> float:
        """The share of the step's communication time that ``call`` takes."""
        return call.seconds / self.comm_s if self.comm_s > 0 else 0.0


def edge_bytes(collective: str, n: int, message: float) -> float:
    """Bytes one ring edge carries for one call (see the module doc)."""
    if n < 2:
        return 0.0
    if collective == "all-reduce":
        return 2.0 * (n - 1) / n * message
    if collective in ("all-gather", "reduce-scatter"):
        return (n - 1) / n * message
    return float(message)


def _edges(call: PricedCall, host_of: Sequence[str]) -> Dict[Tuple[str, str], List[float]]:
    """(src, dst) -> [bytes per step, flows] of one call over its groups."""
    out: Dict[Tuple[str, str], List[float]] = {}
    coll, m, k = call.collective, float(call.message_bytes), call.calls
    for group in call.groups:
        n = len(group)
        if n < 2:
            continue
        hosts = [host_of[r] for r in group]
        if hosts.count(hosts[0]) == n:
            continue
        per_host: Dict[str, int] = {}
        for h in hosts:
            per_host[h] = per_host.get(h, 0) + 1
        if coll == "all-to-all":
            for a, ca in per_host.items():
                for b, cb in per_host.items():
                    if a != b:
                        hit = out.setdefault((a, b), [0.0, 0])
                        hit[0] += k * m / n * ca * cb
                        hit[1] = max(hit[1], ca)
            continue
        if coll == "p2p":
            each = k * m / 2.0
            for a, b in zip(hosts, hosts[1:]):
                if a != b:
                    for s, d in ((a, b), (b, a)):
                        hit = out.setdefault((s, d), [0.0, 0])
                        hit[0] += each
                        hit[1] = max(hit[1], 1)
            continue
        per_edge = k * edge_bytes(coll, n, m)
        for i, a in enumerate(hosts):
            b = hosts[i + 1] if i + 1 < n else hosts[0]
            if a != b:
                hit = out.setdefault((a, b), [0.0, 0])
                hit[0] += per_edge
                hit[1] += per_host[a]
    return out


def job_traffic(inv: Inventory, placement: Placement, request: JobRequest, params=None,
                pricing: Optional[List[PricedCall]] = None) -> JobTraffic:
    """The traffic between hosts of ``placement`` (see the module doc).
    ``pricing``: the step's calls when the caller has priced them already."""
    calls = pricing if pricing is not None else step_pricing(inv, placement, request, params)
    host_of = [s.host for s in placement.slots]
    comm = sum(c.seconds for c in calls)
    out: List[CallTraffic] = []
    if len(set(host_of)) > 1:
        for c in calls:
            if c.seconds <= 0:
                continue
            edges = _edges(c, host_of)
            if edges:
                out.append(CallTraffic(c.what, c.seconds, tuple(
                    (a, b, v[0], max(1, min(MAX_FLOWS, int(v[1])))) for (a, b), v in sorted(edges.items()))))
    return JobTraffic(tuple(out), comm)
