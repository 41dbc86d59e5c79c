"""From a trace's GPU count to a job slurmtopo can place: nodes, GPUs per
node and a parallel layout.

A trace says how many GPUs a job held, not how it used them. Its shape
follows from the count and the inventory's node size ``S`` (the most GPUs
a node has): a job of ``G <= S`` GPUs runs on one node; a larger one on
``n = ceil(G / S)`` nodes with ``ceil(G / n)`` GPUs on each (``--nodes=n
--gpus-per-node=...``; the last node runs the remainder when ``G`` is not a
multiple). A trace that gives the node count (``node_num``, sacct's
``NNodes``) is followed when that fits the nodes.

The layout comes from a *rule*: the first rule whose ``up_to`` holds the
job's GPU count gives its tensor (``tp``) and pipeline (``pp``) parallel
sizes, data parallel the rest. ``tp`` is cut to a divisor of both the GPU
count and the GPUs per node (tensor parallel stays inside a node), ``pp``
to a divisor of what is left. Built in:

``default``
    up to 8 GPUs data parallel; up to 128, TP 8 inside a node and DP
    across nodes; above, TP 8, PP 4 and DP the rest.
``dp``
    every job data parallel.

or a YAML file (``--layout-rule FILE``)::

    slurmtopo: layout-rules
    version: 1
    rules:
      - {up_to: 8, tp: 1}
      - {up_to: 64, tp: 4, model: "llama3-8b,seq_len=8192"}
      - {tp: 8, pp: 2}        # no up_to: every larger job

A rule's ``model`` (a ``--model`` text) says what its jobs train: their
step is then the whole step (compute, exposed communication, bubble;
docs/cost-model.md) and a job runs ``step / best_step`` times its trace
run time instead of the ``--comm-fraction`` stretch (:mod:`engine`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from slurmtopo.cost.model_spec import parse_model
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.yamlio import Reader, as_pos_int, document_kind, load_document
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.job.workload import Workload


@dataclass(frozen=True)
class Rule:
    """Jobs of at most ``up_to`` GPUs (None: any) get TP ``tp``, PP ``pp``."""

    up_to: Optional[int]
    tp: int = 1
    pp: int = 1
    #: what the jobs train (a --model text; None: not known)
    model: Optional[str] = None


@dataclass(frozen=True)
class LayoutRules:
    name: str
    rules: Tuple[Rule, ...]

    def rule_for(self, gpus: int) -> Rule:
        for r in self.rules:
            if r.up_to is None or gpus <= r.up_to:
                return r
        return Rule(None)  # past the last rule: data parallel

    def describe(self) -> str:
        parts = []
        lo = 1
        for r in self.rules:
            span = f"{lo}-{r.up_to}" if r.up_to is not None else f"{lo}+"
            what = ", ".join(f"{k} {v}" for k, v in (("tp", r.tp), ("pp", r.pp)) if v > 1)
            parts.append(f"{span} GPUs: {what or 'dp'}")
            lo = (r.up_to or lo) + 1
        return f"{self.name} ({'; '.join(parts)})"


BUILTIN: Dict[str, LayoutRules] = {
    "default": LayoutRules("default", (Rule(8), Rule(128, tp=8), Rule(None, tp=8, pp=4))),
    "dp": LayoutRules("dp", (Rule(None),)),
}
#: most rules a file may hold
MAX_RULES = 64
#: largest tp/pp/up_to value read
MAX_SIZE = 1 << 20


@dataclass(frozen=True)
class JobShape:
    """What a trace job becomes: its nodes, GPUs per node and layout."""

    gpus: int
    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    model: Optional[str] = None

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    def request(self) -> JobRequest:
        workload = None
        if self.model is not None:  # the whole step: Megatron's distributed optimizer
            workload = Workload(style="zero12", model=parse_model(self.model))
        return JobRequest(layout=Layout(tp=self.tp, pp=self.pp, dp=self.dp),
                          gpus_per_node=self.gpus_per_node, workload=workload)


def node_size(inv) -> int:
    """The most GPUs a node of the inventory has."""
    return max((n.hardware.gpu_count for n in inv.nodes.values()), default=0)


def shape_of(gpus: int, nodes: Optional[int], rules: LayoutRules, per_node: int) -> JobShape:
    """The shape of a job of ``gpus`` GPUs (on ``nodes`` nodes when the trace
    says) on nodes of ``per_node`` GPUs (see the module doc)."""
    if nodes is not None and nodes >= 1 and -(-gpus // nodes) <= per_node and nodes <= gpus:
        n = nodes
    else:
        n = max(1, -(-gpus // per_node))
    gpn = -(-gpus // n)
    rule = rules.rule_for(gpus)
    tp = math.gcd(math.gcd(rule.tp, gpus), gpn)
    pp = math.gcd(rule.pp, gpus // tp)
    return JobShape(gpus=gpus, nodes=n, gpus_per_node=gpn, tp=tp, pp=pp, model=rule.model)


def _model_text(value) -> str:
    """A rule's ``model``: a --model text that parses."""
    if not isinstance(value, str) or len(value) > 1000:
        raise ValueError(f"expected a --model text such as 'llama3-8b', got {value!r}")
    try:
        parse_model(value)
    except SlurmtopoError as exc:
        raise ValueError(exc.message) from None
    return value


def load_rules(spec: str) -> LayoutRules:
    """A built-in rule by name, or a rules file (see the module doc)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if not (os.sep in spec or spec.endswith((".yaml", ".yml", ".json")) or os.path.exists(spec)):
        raise SlurmtopoError(f"--layout-rule {spec!r}: not a built-in rule "
                             f"({', '.join(BUILTIN)}) nor a file")

    doc = load_document(spec)
    r = Reader(spec)
    d = r.mapping(doc, "a layout-rules file", allowed={"slurmtopo", "version", "rules"})
    document_kind(r, d, ("layout-rules",), "layout-rules")
    version = r.get(d, "version", "layout-rules file", as_pos_int, 1)
    if version != 1:
        raise r.error(f"layout-rules version {version} is not supported (this slurmtopo "
                      "reads version 1)", Reader.line(d, "version"))
    seq = r.sequence(r.need(d, "rules", "a layout-rules file", lambda v: v), "rules",
                     Reader.line(d, "rules"))
    if not seq:
        raise r.error("rules is empty: give at least one rule", Reader.line(d, "rules"))
    if len(seq) > MAX_RULES:
        raise r.error(f"{len(seq)} rules: at most {MAX_RULES}", Reader.line(d, "rules"))

    def size(value) -> int:
        v = as_pos_int(value)
        if v > MAX_SIZE:
            raise ValueError(f"{v} is larger than {MAX_SIZE}")
        return v

    rules = []
    last = 0
    for i, item in enumerate(seq):
        what = f"rule {i + 1}"
        m = r.mapping(item, what, allowed={"up_to", "tp", "pp", "model"},
                      line=Reader.line(seq, i))
        up_to = r.get(m, "up_to", what, size, None)
        if up_to is None and i != len(seq) - 1:
            raise r.error(f"{what} has no up_to: only the last rule may cover every larger "
                          "job", Reader.line(m))
        if up_to is not None and up_to <= last:
            raise r.error(f"{what}: up_to {up_to} must be larger than the rule before's "
                          f"({last})", Reader.line(m, "up_to"))
        last = up_to or last
        rules.append(Rule(up_to, tp=r.get(m, "tp", what, size, 1),
                          pp=r.get(m, "pp", what, size, 1),
                          model=r.get(m, "model", what, _model_text, None)))
    return LayoutRules(spec, tuple(rules))
