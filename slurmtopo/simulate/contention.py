"""Shared links: the running jobs' traffic on the fabric, and how much a
link carrying more than it can slows the jobs on it.

A flow-level model, recomputed only when a job starts or ends.

Links
    * every host's NICs, one link out and one in (capacity: the sum of its
      GPUs' network shares, :class:`slurmtopo.cost.hardware.HardwareFigures`);
    * above the hosts, tier by tier, the uplinks of each switch group (the
      switches a host hangs from at that level: its leaf, or both leaves of
      a dual-homed host; the spines above a leaf ...). A group's uplinks
      carry at most what its hosts' GPUs get at the next level up, with
      the inventory's oversubscription (:meth:`CostParams.network_gbps
      <slurmtopo.cost.params.CostParams.network_gbps>`: the figure the cost
      model prices a ring crossing that level with), split into ports of
      the switches' ``link_gbps`` (else the hosts' fastest NIC): a leaf of
      8 hosts of 8 x 400 Gb/s NICs, non-blocking, has 64 uplink ports of
      400 Gb/s. Each port is one link up and one link down;
    * every multi-node NVLink domain (a GB200 NVL72 rack), one link of its
      GPUs' NVLink bandwidth all together (it never fills: each GPU's
      NVLink ports are its own job's).

Paths
    A flow from host a to host b goes up a's NICs, then for every tier
    below the level where a and b meet, up one port of a's group and down
    the port of the same index of b's group, then into b's NICs. Two hosts
    of one NVLink domain talk over the domain instead. Which port: the way
    ECMP picks one, by a hash of the flow (a seeded mix of the job, the two
    hosts, the flow's number and the tier), not by spreading every flow
    over all ports (``ideal`` does that: a group's ports as one link).

Load and slowdown
    A job's call (:mod:`~slurmtopo.simulate.traffic`) sends at rate ``p``
    on each link of its flows while it runs, a share ``u`` of the job's
    time (its *duty*: the job's share of time communicating times the
    call's share of that). Jobs run their steps independently, so when a
    call of job J runs, the other jobs on a link are each sending with
    probability ``u``: the load J sees on link ``l`` is its own rate (all
    its flows of that call at once) plus the others' average rates,

        load(J, call, l) = p(J, call, l) + W(l) - W_J(l),   W(l) = sum u p

    and the call runs ``rho = max(1, load / capacity)`` times slower on
    ``l``; its slowest link sets its pace (a collective waits for its last
    edge). The job's run time stretches in proportion to the share of it
    spent in each call:

        M = 1 + sum_c u_c * (rho_c - 1)

    (calls inside a host or an NVLink domain have rho 1). Communication
    hidden behind compute stretches as much as exposed communication: its
    window is taken to be no longer than it (the smallest the step model
    allows), so every extra second shows. On a host's own NICs a job never contends with itself
    (the step model already shared them among its ranks); on the ports
    above it can: two of its flows hashed onto one port halve each other.

Assumptions (docs/simulate.md)
    Rates are those of the job running uncontended: a slowed job keeps
    its rates (an upper bound on its average load; no fixed point is
    iterated). Phases of different jobs are independent. Routing is static
    ECMP: no adaptive routing, no congestion control beyond fair sharing.
    Time limits are not enforced on stretched jobs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory
from slurmtopo.inventory.topology import network_view
from slurmtopo.plan.choice import params_of

ECMP = "ecmp"
IDEAL = "ideal"
OFF = "off"
MODES = (ECMP, IDEAL, OFF)

#: link kinds (what each link is, for reports)
HOST_OUT, HOST_IN, UP, DOWN, NVL = "host-out", "host-in", "up", "down", "nvlink-domain"

_MASK = (1 << 64) - 1


def mix(*values: int) -> int:
    """A deterministic 64-bit hash of whole numbers (splitmix64 steps; the
    same in every process, unlike ``hash()``)."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 29
    return x


@dataclass
class _Bundle:
    """A switch group's uplinks at one tier: ``ports`` links up from
    ``up`` and ``ports`` down from ``down`` (link ids), ``cap`` GB/s each."""

    up: int
    down: int
    ports: int
    cap: float


class FabricLinks:
    """The links of an inventory's fabric (see the module doc), built once
    and shared by every replay. ``mode`` is ``ecmp`` or ``ideal``."""

    def __init__(self, inv: Inventory, params=None, mode: str = ECMP):
        if params is None:
            params = params_of(inv)  # the cost block's one policy
        self.mode = mode
        self.inv = inv
        self.view = view = network_view(inv.fabric)
        self.names: List[str] = list(inv.nodes)
        self.index: Dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.cap: List[float] = []
        self.kind: List[str] = []
        self.label: List[str] = []
        #: links whose own job never overloads them (a host's NICs, a domain)
        self.own_fits: List[bool] = []
        n = len(self.names)
        self.host_out = [0] * n
        self.host_in = [0] * n
        nic_gbs: List[float] = [0.0] * n
        #: GB/s one flow from the host can send: its fastest GPU's network share
        self.flow_cap: List[float] = [0.0] * n
        shares: List[List[float]] = []
        for i, name in enumerate(self.names):
            node = inv.nodes[name]
            fig = params.hw(node.hardware)
            shares.append(list(fig.net))
            total = sum(fig.net)
            self.flow_cap[i] = max(fig.net, default=0.0)
            self.host_out[i] = self._link(total, HOST_OUT, name, True)
            self.host_in[i] = self._link(total, HOST_IN, name, True)
            rates = [x.rate_gbps or params.default_nic_gbit
                     for x in node.hardware.compute_nics()]
            nic_gbs[i] = max(rates, default=params.default_nic_gbit) / 8.0
        # NVLink domains
        self.domain: List[Optional[int]] = [None] * n
        dom_ids: Dict[str, int] = {}
        dom_cap: Dict[str, float] = {}
        for i, name in enumerate(self.names):
            node = inv.nodes[name]
            if node.nvlink_domain is None:
                continue
            key = node.nvlink_domain.key
            fig = params.hw(node.hardware)
            dom_cap[key] = dom_cap.get(key, 0.0) + node.hardware.gpu_count * \
                fig.class_bw(LinkClass.NVLINK_DOMAIN)
        for key in sorted(dom_cap):
            dom_ids[key] = self._link(dom_cap[key], NVL, key, True)
        for i, name in enumerate(self.names):
            dom = inv.nodes[name].nvlink_domain
            if dom is not None:
                self.domain[i] = dom_ids[dom.key]
        # switch groups per tier: the switches above each host at each level
        self.tiers: List[Tuple[int, ...]] = [()] * n
        group_ids: Dict[Tuple[int, Tuple[str, ...]], int] = {}
        group_caps: List[float] = []
        #: a group's port rate: its switches' link_gbps, else (None) the
        #: fastest NIC of its hosts
        group_port: List[Optional[float]] = []
        group_nic: List[float] = []
        group_keys: List[Tuple[int, Tuple[str, ...]]] = []
        switch_gbps = {s.name: s.link_gbps for s in inv.fabric.switches}
        if not view.flat:
            for i, name in enumerate(self.names):
                anc = view.ancestors.get(name)
                if not anc:
                    continue
                top = max(anc.values())
                ids = []
                for t in range(top + 1):
                    sws = tuple(sorted(sw for sw, lvl in anc.items() if lvl == t))
                    if not sws:
                        break
                    key = (t, sws)
                    g = group_ids.get(key)
                    if g is None:
                        g = group_ids[key] = len(group_keys)
                        group_keys.append(key)
                        group_caps.append(0.0)
                        rate = next((switch_gbps[s] for s in sws if switch_gbps.get(s)), None)
                        group_port.append(rate / 8.0 if rate else None)
                        group_nic.append(0.0)
                    cls = LinkClass.network(t + 1)
                    group_caps[g] += sum(params.network_gbps(s, cls) for s in shares[i])
                    group_nic[g] = max(group_nic[g], nic_gbs[i])
                    ids.append(g)
                self.tiers[i] = tuple(ids)
        self.bundles: List[_Bundle] = []
        for g, (t, sws) in enumerate(group_keys):
            cap = group_caps[g]
            port = group_port[g] or group_nic[g] or cap
            ports = 1 if mode == IDEAL or cap <= 0 else max(1, int(round(cap / port)))
            each = cap / ports if ports else cap
            label = "+".join(sws)
            up = len(self.cap)
            for k in range(ports):
                self._link(each, UP, f"{label} up {k}", False)
            down = len(self.cap)
            for k in range(ports):
                self._link(each, DOWN, f"{label} down {k}", False)
            self.bundles.append(_Bundle(up, down, ports, each))
        self._meet: Dict[Tuple[int, int], Optional[int]] = {}

    def _link(self, cap: float, kind: str, label: str, own_fits: bool) -> int:
        self.cap.append(cap)
        self.kind.append(kind)
        self.label.append(label)
        self.own_fits.append(own_fits)
        return len(self.cap) - 1

    @property
    def links(self) -> int:
        return len(self.cap)

    def meet(self, a: int, b: int) -> Optional[int]:
        """The tier at which hosts ``a`` and ``b`` (indices) meet: 0 under
        one leaf group, 1 one level up ...; None: no common switch."""
        key = (a, b) if a < b else (b, a)
        hit = self._meet.get(key, -1)
        if hit != -1:
            return hit
        va, vb = self.view.ancestors.get(self.names[a]), self.view.ancestors.get(self.names[b])
        if self.view.flat:
            out: Optional[int] = 0
        elif not va or not vb:
            out = None
        else:
            common = [lvl for sw, lvl in va.items() if sw in vb]
            out = min(common) if common else None
        self._meet[key] = out
        return out

    def path(self, a: int, b: int, flow: int) -> List[int]:
        """The links a flow from host ``a`` to host ``b`` crosses; ``flow``
        is its hash (see the module doc)."""
        da = self.domain[a]
        if da is not None and da == self.domain[b]:
            return [da]
        out = [self.host_out[a]]
        level = self.meet(a, b)
        ta, tb = self.tiers[a], self.tiers[b]
        up_to = max(len(ta), len(tb)) if level is None else level
        for t in range(up_to):
            pick = mix(flow, t)
            if t < len(ta):
                ba = self.bundles[ta[t]]
                out.append(ba.up + pick % ba.ports)
            if t < len(tb):
                bb = self.bundles[tb[t]]
                out.append(bb.down + pick % bb.ports)
        out.append(self.host_in[b])
        return out


@dataclass
class JobLoad:
    """One job's calls on the links: per call, link -> its rate (GB/s)
    there while the call runs, and the call's duty (the share of the
    job's run time it takes, uncontended)."""

    rates: List[Dict[int, float]]
    duty: List[float]

    def weighted(self) -> Dict[int, float]:
        """link -> the job's average rate there (sum over calls of duty x rate)."""
        out: Dict[int, float] = {}
        for rates, u in zip(self.rates, self.duty):
            for link, p in rates.items():
                out[link] = out.get(link, 0.0) + u * p
        return out


def job_load(links: FabricLinks, traffic, scale: float, job: int, seed: int = 0) -> JobLoad:
    """The load of a job's :class:`~slurmtopo.simulate.traffic.JobTraffic`
    on ``links``, its flows hashed with ``seed`` and the job's number;
    ``scale``: the share of the job's run time one second of its step's
    communication takes (a call's duty is its seconds times it)."""
    rates: List[Dict[int, float]] = []
    duty: List[float] = []
    index = links.index
    for call in traffic.calls:
        per: Dict[int, float] = {}
        for src, dst, nbytes, flows in call.edges:
            a, b = index[src], index[dst]
            rate = nbytes / flows / call.seconds / 1e9
            for f in range(flows):
                path = links.path(a, b, mix(seed, job, a, b, f))
                r = rate
                if path[0] != links.domain[a]:  # over the network: at most its NIC's rate
                    r = min(rate, links.flow_cap[a])
                for link in path:
                    per[link] = per.get(link, 0.0) + r
        rates.append(per)
        duty.append(min(1.0, scale * call.seconds))
    return JobLoad(rates, duty)


class _Running:
    __slots__ = ("load", "wl", "rho", "arg", "mult", "alone")

    def __init__(self, load: JobLoad):
        self.load = load
        self.wl = load.weighted()
        self.rho = [1.0] * len(load.rates)
        self.arg = [-1] * len(load.rates)
        self.mult = 1.0
        self.alone = 1.0


class Contention:
    """The running jobs' loads on the links, kept as jobs start and end
    (see the module doc). :meth:`add` and :meth:`remove` return the jobs
    whose run-time multiplier changed, with the new value."""

    def __init__(self, links: FabricLinks):
        self.links = links
        self.W: List[float] = [0.0] * links.links
        self.users: List[Dict[int, None]] = [dict() for _ in range(links.links)]
        self.jobs: Dict[int, _Running] = {}

    def _ratio(self, run: _Running, p: float, link: int) -> float:
        cap = self.links.cap[link]
        others = self.W[link] - run.wl.get(link, 0.0)
        if others < 0.0:
            others = 0.0
        if self.links.own_fits[link] and p > cap:
            cap = p
        return (p + others) / cap if cap > 0 else 1.0

    def _full(self, run: _Running, c: int) -> None:
        best, arg = 1.0, -1
        for link, p in run.load.rates[c].items():
            r = self._ratio(run, p, link)
            if r > best:
                best, arg = r, link
        run.rho[c], run.arg[c] = best, arg

    @staticmethod
    def _mult(run: _Running) -> float:
        load = run.load
        if not load.rates:
            return 1.0
        return 1.0 + sum(u * (r - 1.0) for u, r in zip(load.duty, run.rho))

    def multiplier(self, job: int) -> float:
        run = self.jobs.get(job)
        return 1.0 if run is None else run.mult

    def alone(self, job: int) -> float:
        """The job's multiplier with no other job on its links (its own
        flows colliding only)."""
        run = self.jobs.get(job)
        return 1.0 if run is None else run.alone

    def add(self, job: int, load: JobLoad) -> Dict[int, float]:
        run = _Running(load)
        # alone: its own flows only
        caps, own = self.links.cap, self.links.own_fits
        for c, rates in enumerate(load.rates):
            best = 1.0
            for link, p in rates.items():
                cap = caps[link]
                if own[link] and p > cap:
                    cap = p
                r = p / cap if cap > 0 else 1.0
                if r > best:
                    best = r
            run.rho[c] = best
        run.alone = self._mult(run)
        self.jobs[job] = run
        W, users = self.W, self.users
        for link, x in run.wl.items():
            W[link] += x
            users[link][job] = None
        for c in range(len(load.rates)):
            self._full(run, c)
        run.mult = self._mult(run)
        changed = {job: run.mult}
        for link in run.wl:
            for other in users[link]:
                if other == job:
                    continue
                o = self.jobs[other]
                moved = False
                for c, rates in enumerate(o.load.rates):
                    p = rates.get(link)
                    if p is None:
                        continue
                    r = self._ratio(o, p, link)
                    if r > o.rho[c]:
                        o.rho[c], o.arg[c] = r, link
                        moved = True
                if moved:
                    o.mult = self._mult(o)
                    changed[other] = o.mult
        return changed

    def remove(self, job: int) -> Dict[int, float]:
        run = self.jobs.pop(job, None)
        if run is None:
            return {}
        W, users = self.W, self.users
        for link, x in run.wl.items():
            w = W[link] - x
            del users[link][job]
            W[link] = w if users[link] else 0.0
        changed: Dict[int, float] = {}
        for link in run.wl:
            for other in users[link]:
                o = self.jobs[other]
                moved = False
                for c, a in enumerate(o.arg):
                    if a == link:
                        self._full(o, c)
                        moved = True
                if moved:
                    m = self._mult(o)
                    if m != o.mult:
                        o.mult = m
                        changed[other] = m
        return changed

    def link_loads(self) -> List[Tuple[int, float, float, int]]:
        """Every loaded link: (link, average load GB/s, capacity GB/s,
        jobs on it), for reports."""
        return [(link, self.W[link], self.links.cap[link], len(u))
                for link, u in enumerate(self.users) if u]
