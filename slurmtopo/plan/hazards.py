"""Pre-launch hazards: what is known to hang, crash or slow NCCL, checked on
a placement before the job starts (pure: an inventory and a placement in,
findings out; docs/hazards.md lists every rule with its source).

The same function serves every path that launches a job: ``plan`` and
``sbatch`` (through :func:`slurmtopo.api.prepare`), the start-time step
(``slurmtopo bind`` logs what the allocation it really got brings), and a
submit-time directive path, so a rule is written once:

* ``uneven-ranks``: hosts holding different numbers of ranks;
* ``rail-alignment``: on a rail-optimised fabric (a leaf per NIC, as the
  inventory's wiring says), a communicator whose ranks use different rails
  on different hosts;
* ``mnnvl-clique``: a multi-node NVLink clique holding more of the job's
  ranks than the NCCL release the job loads handles;
* ``group-domain``: a TP or EP group spread over NVLink domains although
  one domain could hold it.

Each finding carries its severity (the rule's, or the one the user's
policy sets for its kind), one line of reason with its public source, and
the override. NCCL's version has one home here (:func:`nccl_version`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.inventory.topology import group_rails, misaligned, rail_optimised
from slurmtopo.job.groups import DOMAIN_KINDS
from slurmtopo.job.workload import parse_nccl_version

ERROR = "error"
WARN = "warn"
OFF = "off"
LEVELS = (ERROR, WARN, OFF)


@dataclass(frozen=True)
class Rule:
    """One hazard kind: what it is, where it is documented, how to get past it."""

    kind: str
    summary: str
    #: public sources (issues, code at a tag), first the main one
    sources: Tuple[str, ...]
    override: str


RULES: Dict[str, Rule] = {r.kind: r for r in (
    Rule("uneven-ranks",
         "hosts hold different numbers of ranks: NCCL's init can deadlock",
         ("https://github.com/NVIDIA/nccl/issues/2385",
          "https://github.com/ROCm/rocm-systems/pull/5695"),
         "--gpus-per-node K (the same K ranks on every node; sbatch queues the job until "
         "nodes have K free GPUs); --hazard uneven-ranks=error refuses such plans, =off "
         "silences them"),
    Rule("rail-alignment",
         "a communicator uses different rails on different hosts of a rail-optimised "
         "fabric: its traffic crosses rails, or cannot flow where rails are not joined",
         ("https://github.com/NVIDIA/nccl/issues/836",
          "https://github.com/NVIDIA/nccl/issues/1933"),
         "--gpus-per-node K with the same GPUs free on every node (or --nodelist of nodes "
         "with the same GPUs free); --hazard rail-alignment=error|off"),
    Rule("mnnvl-clique",
         "a multi-node NVLink clique holds more of the job's ranks than the job's NCCL "
         "release handles",
         ("https://github.com/NVIDIA/nccl/blob/v2.24.3-1/src/include/device.h",
          "https://github.com/NVIDIA/nccl/commit/80f6bda4378b99d99e82b4d76a633791cc45fef0",
          "https://github.com/NVIDIA/nccl/issues/2186",
          "https://github.com/NVIDIA/nccl/issues/1159"),
         "an NCCL release that handles the clique (--nccl-version says which the job "
         "loads), fewer of the job's ranks per rack; --hazard mnnvl-clique=warn|off"),
    Rule("group-domain",
         "a TP or EP group is spread over NVLink domains although one domain could hold "
         "it: its all-to-all or all-reduce leaves NVLink, and across NVL72 racks MoE "
         "all-to-all has hung",
         ("https://github.com/deepseek-ai/DeepEP/issues/596",
          "https://github.com/NVIDIA/Megatron-LM/issues/1881"),
         "--require tp=nvlink or --require ep=rack (the planner keeps them inside or "
         "refuses); --hazard group-domain=error|off"),
)}
KINDS = tuple(RULES)


@dataclass(frozen=True)
class Hazard:
    """One finding on one placement."""

    kind: str
    severity: str  # ERROR or WARN
    #: what, where: one line naming hosts, ranks or groups
    message: str
    #: the public report of this very finding (default: the rule's first)
    source: Optional[str] = None

    @property
    def rule(self) -> Rule:
        return RULES[self.kind]

    def line(self) -> str:
        """``hazard KIND (error): what (source); override: how``."""
        r = self.rule
        return (f"hazard {self.kind} ({'error' if self.severity == ERROR else 'warning'}): "
                f"{self.message} ({self.source or r.sources[0]}); override: {r.override}")

    def as_dict(self) -> Dict[str, str]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message,
                "source": self.source or self.rule.sources[0], "override": self.rule.override}


@dataclass(frozen=True)
class HazardPolicy:
    """What the user set per kind (``error``, ``warn``, ``off``); a kind not
    set keeps each finding's own severity (docs/hazards.md)."""

    levels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, items: Iterable[str], what: str = "--hazard") -> "HazardPolicy":
        """``["mnnvl-clique=warn", "all=off"]`` (``all`` sets every kind;
        later items win)."""
        levels: Dict[str, str] = {}
        for item in items or ():
            kind, sep, level = str(item).partition("=")
            kind, level = kind.strip(), level.strip().lower()
            if level == "warning":
                level = WARN
            if not sep or level not in LEVELS or (kind not in RULES and kind != "all"):
                raise SlurmtopoError(
                    f"{what} {item!r}: expected KIND=error|warn|off, KIND one of "
                    f"{', '.join(KINDS)} or all")
            for k in (KINDS if kind == "all" else (kind,)):
                levels[k] = level
        return cls(levels)

    def items(self) -> List[str]:
        """Back to ``KIND=LEVEL`` texts (for the plan document), sorted."""
        return [f"{k}={v}" for k, v in sorted(self.levels.items())]

    def severity(self, kind: str, found: str) -> Optional[str]:
        """The severity a finding of ``kind`` gets (None: the kind is off)."""
        level = self.levels.get(kind)
        if level is None:
            return found
        return None if level == OFF else level


@dataclass(frozen=True)
class HazardReport:
    """Every finding on one placement, errors first."""

    hazards: Tuple[Hazard, ...] = ()

    @property
    def errors(self) -> Tuple[Hazard, ...]:
        return tuple(h for h in self.hazards if h.severity == ERROR)

    @property
    def warnings(self) -> Tuple[Hazard, ...]:
        return tuple(h for h in self.hazards if h.severity == WARN)

    def raise_for_errors(self) -> None:
        """A SlurmtopoError with the first error's line (and how many more)."""
        errors = self.errors
        if errors:
            more = f" (and {len(errors) - 1} more hazard(s))" if len(errors) > 1 else ""
            raise SlurmtopoError("refused: " + errors[0].line() + more)


# --------------------------------------------------------------------------
# the NCCL release a job loads


def nccl_version(explicit: Optional[str], environ: Mapping[str, str],
                 inv: Optional[Inventory] = None) -> Optional[str]:
    """The NCCL release the job will load, where it is known: the one given
    (``--nccl-version``, or recorded in the plan), else ``NCCL_VERSION`` of
    the environment (NVIDIA's containers set it to the release they ship),
    else the cluster's default (the inventory's ``cost: nccl_version``,
    the cost model's input). The one place the version is decided. A
    malformed environment value is ignored (it is not the user's typing),
    a malformed ``explicit`` refused."""
    if explicit:
        parse_nccl_version(explicit)
        return str(explicit).strip()
    for value, what in ((environ.get("NCCL_VERSION"), "NCCL_VERSION"),
                        ((inv.cost or {}).get("nccl_version") if inv is not None else None,
                         "the inventory's cost: nccl_version")):
        if value:
            try:
                parse_nccl_version(str(value), what)
            except SlurmtopoError:
                continue
            return str(value).strip()
    return None


@dataclass(frozen=True)
class CliqueLimit:
    """NCCL releases ``first`` to ``last`` (inclusive, None: open) and the
    clique size from which they fail (``at_least`` ranks of one job in one
    multi-node NVLink clique)."""

    first: Tuple[int, ...]
    last: Optional[Tuple[int, ...]]
    at_least: int
    severity: str
    why: str
    source: str

    def covers(self, version: Tuple[int, ...]) -> bool:
        v = version + (0,) * (3 - len(version))
        top = None if self.last is None else self.last + (999,) * (3 - len(self.last))
        return tuple(self.first) <= v and (top is None or v <= top)


#: what is known of NCCL and multi-node NVLink cliques, one row a finding.
#: NCCL reads every rank of one clique as one "node": the local-rank arrays
#: bound the clique (NCCL_MAX_LOCAL_RANKS).
CLIQUE_LIMITS: Tuple[CliqueLimit, ...] = (
    CliqueLimit((0,), (2, 20, 2), 2, WARN,
                "NCCL before 2.20.3 has no multi-node NVLink: the clique's ranks talk over "
                "the network",
                "https://github.com/NVIDIA/nccl/issues/1159"),
    CliqueLimit((2, 20, 3), (2, 24), 65, ERROR,
                "NCCL 2.20-2.24 sizes its local-rank arrays for 64 ranks "
                "(NCCL_MAX_LOCAL_RANKS, 72 from 2.25.1)",
                "https://github.com/NVIDIA/nccl/blob/v2.24.3-1/src/include/device.h"),
    CliqueLimit((2, 27), (2, 27), 44, WARN,
                "NCCL 2.27 was reported to crash in MNNVL clique set-up from 44 ranks on a "
                "partly degraded fabric",
                "https://github.com/NVIDIA/nccl/issues/2186"),
    CliqueLimit((2, 30), (2, 30), 40, WARN,
                "NCCL 2.30 was reported to crash in MNNVL clique set-up from 40 ranks on a "
                "partly degraded fabric",
                "https://github.com/NVIDIA/nccl/issues/2186"),
)


# --------------------------------------------------------------------------
# the checks


def check_hazards(inv: Inventory, placement: Placement, *,
                  nccl_version: Optional[str] = None,
                  policy: Optional[HazardPolicy] = None) -> HazardReport:
    """Every hazard of ``placement`` on ``inv`` for a job loading NCCL
    ``nccl_version`` (None: unknown), with ``policy`` applied. Pure."""
    policy = policy or HazardPolicy()
    found: List[Hazard] = []
    for kind, check in (("uneven-ranks", lambda i, p: _uneven(i, p, nccl_version)),
                        ("rail-alignment", _rails),
                        ("mnnvl-clique", lambda i, p: _cliques(i, p, nccl_version)),
                        ("group-domain", _group_domains)):
        if policy.levels.get(kind) == OFF:
            continue
        for severity, message, *source in check(inv, placement):
            level = policy.severity(kind, severity)
            if level is not None:
                found.append(Hazard(kind, level, message, source[0] if source else None))
    found.sort(key=lambda h: h.severity != ERROR)
    return HazardReport(tuple(found))


def _uneven(inv: Inventory, p: Placement, version: Optional[str]) -> List[Tuple[str, str]]:
    """Ranks per NCCL node: a host, or under multi-node NVLink (NCCL
    2.20.3+, two or more of the job's hosts in one clique) the clique,
    which NCCL fuses into one node."""
    mnnvl = version is None or parse_nccl_version(version) >= (2, 20, 3)
    unit: Dict[str, str] = {}
    hosts_in: Dict[str, int] = {}
    for h, mates in p.by_host().items():
        node = inv.nodes.get(h)
        d = node.nvlink_domain if node is not None else None
        if mates and d is not None and mnnvl:
            unit[h] = d.key
            hosts_in[d.key] = hosts_in.get(d.key, 0) + 1
    counts: Dict[str, int] = {}
    for h, mates in p.by_host().items():
        if mates:
            key = unit.get(h, h)
            key = key if hosts_in.get(key, 0) >= 2 else h
            counts[key] = counts.get(key, 0) + len(mates)
    if len(set(counts.values())) <= 1:
        return []
    shown = list(counts.items())
    text = ", ".join(f"{h}: {c}" for h, c in shown[:8])
    if len(shown) > 8:
        text += f", ... {len(shown) - 8} more"
    return [(WARN, f"ranks per node differ ({text}): NCCL's initialisation can deadlock "
                   "when its nodes hold different numbers of ranks")]


def _rails(inv: Inventory, p: Placement) -> List[Tuple[str, str]]:
    """On a fabric the inventory says is rail-optimised, every group that
    crosses hosts must use the same set of rails (a rank's nearest NIC, by
    name) on each of its hosts (slurmtopo.inventory.topology.group_rails, which the
    cost model prices the same way)."""
    hosts = list(p.by_host())
    if len(hosts) < 2 or not rail_optimised(inv, hosts):
        return []
    slots = p.slots
    bad: List[str] = []
    count = 0
    seen: set = set()  # several kinds may name the same ranks (dp, dp-cp with cp 1)
    for kind in sorted(p.groups):
        for gi, group in enumerate(p.groups[kind]):
            key = tuple(sorted(group))
            if key in seen:
                continue
            seen.add(key)
            pair = misaligned(group_rails(slots, group))
            if pair is None:
                continue
            (h1, r1), (h2, r2) = pair
            count += 1
            if not bad:
                bad.append(f"{kind} group {gi} uses rail(s) {','.join(sorted(r1))} on "
                           f"{h1} but {','.join(sorted(r2))} on {h2}")
    if not bad:
        return []
    more = f" ({count} groups in all)" if count > 1 else ""
    return [(WARN, bad[0] + more + ": NCCL assumes rail-aligned ranks on a rail-optimised "
                                   "fabric")]


def _cliques(inv: Inventory, p: Placement, version: Optional[str]) -> List[Tuple[str, ...]]:
    """The job's ranks in every multi-node NVLink clique that two or more
    of its hosts share (where NCCL uses MNNVL), against the release."""
    ranks: Dict[str, int] = {}
    hosts_in: Dict[str, set] = {}
    for h, mates in p.by_host().items():
        node = inv.nodes.get(h)
        d = node.nvlink_domain if node is not None else None
        if d is None or not mates:
            continue
        ranks[d.key] = ranks.get(d.key, 0) + len(mates)
        hosts_in.setdefault(d.key, set()).add(h)
    shared = {k: n for k, n in ranks.items() if len(hosts_in[k]) >= 2}
    if not shared:
        return []
    key, biggest = max(sorted(shared.items()), key=lambda kv: kv[1])
    where = f"clique {key} holds {biggest} of the job's ranks on {len(hosts_in[key])} hosts"
    if version is None:
        hit = [lim for lim in CLIQUE_LIMITS if biggest >= lim.at_least and lim.first > (0,)]
        if not hit:
            return []
        worst = min(hit, key=lambda lim: lim.at_least)
        return [(WARN, f"{where}, and the job's NCCL release is not known (give "
                       f"--nccl-version, or NCCL_VERSION): {worst.why}", worst.source)]
    v = parse_nccl_version(version)
    out = []
    for lim in CLIQUE_LIMITS:
        if lim.covers(v) and biggest >= lim.at_least:
            out.append((lim.severity, f"{where} with NCCL {version}: {lim.why}", lim.source))
    return out


def _group_domains(inv: Inventory, p: Placement) -> List[Tuple[str, str]]:
    """TP/EP groups over more than one NVLink domain (a multi-node domain,
    or a host outside one) where one domain of the inventory has the GPUs
    for the whole group (a warning: on a busy cluster the planner sends a
    group out only where no domain has room now)."""
    nodes = inv.nodes
    dom: Dict[str, str] = {}
    rack: Dict[str, bool] = {}
    for h in p.by_host():
        node = nodes.get(h)
        d = node.nvlink_domain if node is not None else None
        dom[h] = h if d is None else d.key
        rack[h] = d is not None
    capacity = inv.derive("hazards.domain_capacity", lambda: _domain_capacity(inv))
    biggest = max(capacity.values(), default=0)
    slots = p.slots
    out = []
    for kind in DOMAIN_KINDS:
        spread = []
        for gi, group in enumerate(p.groups.get(kind, ())):
            if len(group) < 2 or len(group) > biggest:
                continue
            doms = {dom[slots[r].host] for r in group}
            if len(doms) > 1:
                spread.append((gi, group, doms))
        if not spread:
            continue
        gi, group, doms = spread[0]
        racks = any(rack[slots[r].host] for r in group)
        severity = WARN
        what = "NVLink racks" if racks else "hosts"
        more = f" ({len(spread)} {kind} groups in all)" if len(spread) > 1 else ""
        out.append((severity, f"{kind} group {gi} ({len(group)} ranks) spans {len(doms)} "
                              f"{what} ({', '.join(sorted(doms)[:4])}) although one NVLink "
                              f"domain of the cluster holds {biggest} GPUs{more}"))
    return out


def _domain_capacity(inv: Inventory) -> Dict[str, int]:
    """NVLink domain key (or host name) -> its GPUs, over the inventory."""
    out: Dict[str, int] = {}
    for n in inv:
        key = n.name if n.nvlink_domain is None else n.nvlink_domain.key
        out[key] = out.get(key, 0) + n.hardware.gpu_count
    return out

