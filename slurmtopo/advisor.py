"""The layout advisor (``slurmtopo advise``): which parallel layout to train
a model on N GPUs of this cluster with, ranked by the modelled step.

An ML engineer asks it before anything else: the framework, TP, PP (and
interleaving), CP, EP, the micro-batch, recomputation, the distributed
optimizer, FSDP or HSDP, a ZeRO stage. The advisor enumerates the layouts
each framework accepts for the model on ``gpus`` GPUs (:func:`candidates`:
Megatron-LM with its distributed optimizer or Megatron-FSDP, torchtitan's
FSDP and HSDP, DeepSpeed's ZeRO-1 and ZeRO-3), keeps those that fit in the
GPUs' memory with the least recomputation that makes them fit
(:mod:`slurmtopo.cost.memory`), orders them twice (by their compute alone,
the whole step without communication: an optimistic bound that needs no
placement; and by their step where Slurm's default placement puts them,
which sees an all-to-all leave the nodes), places the most promising of
both orders with the real planner on the inventory
(:func:`slurmtopo.plan.choice.plan`) and prices each with the step
function (:func:`slurmtopo.cost.step.price_step`: compute, exposed
communication, bubble), and ranks them by tokens per second per GPU. The
first few come back as ready ``slurmtopo plan`` lines.

A use case beside :mod:`slurmtopo.api` (which it calls): pure but for the
inventory it is handed.
"""
from __future__ import annotations

import heapq
import math
import shlex
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo import api
from slurmtopo.cost.compute import Dims, GpuFigures, gpu_figures, model_flops_per_token
from slurmtopo.cost.memory import memory_per_gpu
from slurmtopo.cost.model_spec import ModelSpec, model_dict
from slurmtopo.cost.params import cost_params
from slurmtopo.cost.step import price_step
from slurmtopo.cost.whole import compose
from slurmtopo.errors import LayoutError, PlacementError
from slurmtopo.job.frameworks import registry

__all__ = ["Candidate", "Advice", "candidates", "advise", "advice_json", "plan_line",
           "MAX_PLACED"]

#: how many layout structures (tp, pp, cp, ep, style), best by each of the
#: two orders, are placed by the planner, and how many of each one's
#: variants (micro-batch, interleaving, recomputation) are priced on that
#: placement
MAX_PLACED = 24
VARIANTS = 4
#: the best structures of every framework placed besides the best overall
PER_FRAMEWORK = 3
#: the micro-batch sizes tried
MICRO_BATCHES = (1, 2, 4)
#: interleaved stages a rank tried, besides every even split of its layers
VIRTUAL_STAGES = (1, 2, 3, 4, 5, 6, 8)




@dataclass(frozen=True)
class Candidate:
    """One layout: the framework, the parallel sizes, the micro-batch, the
    recomputation, the data-parallel style (``zero12``: Megatron's
    distributed optimizer or DeepSpeed's ZeRO-1; ``fsdp``: Megatron-FSDP,
    torchtitan's FSDP or ZeRO-3; ``hsdp``: torchtitan's FSDP over ``shard``
    data-parallel ranks, replicated over the rest)."""

    tp: int
    pp: int
    vp: int
    cp: int
    ep: int
    dp: int
    micro_batch: int
    recompute: str
    style: str
    framework: str = registry.DEFAULT_FRAMEWORK
    #: HSDP: data-parallel ranks a shard group holds (torchtitan's dp_shard)
    shard: int = 0
    #: DeepSpeed: the ZeRO stage
    zero: int = 0
    #: model keys the framework prices the layout with (its recompute
    #: modules, the gradients' dtype: ``Framework.advice_recompute``,
    #: ``advice_model_keys``)
    model_keys: Tuple[Tuple[str, object], ...] = ()

    def dims(self) -> Dims:
        return Dims(tp=self.tp, cp=self.cp, pp=self.pp, ep=self.ep, etp=1, dp=self.dp,
                    vp=self.vp)

    def label(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}" + (f"x{self.vp}" if self.vp > 1 else ""),
                 f"cp{self.cp}", f"ep{self.ep}", f"dp{self.dp}"]
        return " ".join(parts)

    def optimizer(self) -> str:
        """How the data-parallel ranks share the model, as the table says it."""
        return registry.get(self.framework).advice_optimizer(self)

    def knobs(self, gpus: int) -> Dict[str, object]:
        """The framework's settings for :func:`slurmtopo.api.job_request`."""
        return registry.get(self.framework).advice_knobs(self, gpus)


@dataclass(frozen=True)
class Ranked:
    """A candidate placed and priced."""

    candidate: Candidate
    model: ModelSpec
    time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    memory_gib: float
    exposed_comm: Tuple[Tuple[str, float], ...]
    plan: str
    nodes: int


@dataclass(frozen=True)
class Advice:
    """The ranked layouts and what was considered."""

    model: ModelSpec
    gpus: int
    gpu: str
    gpu_memory_gib: float
    ranked: Tuple[Ranked, ...]
    considered: int
    fitting: int
    placed: int
    notes: Tuple[str, ...] = ()


def _divisors(n: int, most: int) -> List[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def _tp_ok(spec: ModelSpec, tp: int) -> bool:
    """Megatron-LM's conditions on tensor parallelism: heads, key/value
    heads (GQA groups), hidden and MLP sizes divide."""
    s = spec
    if s.heads % tp or s.hidden % tp or s.ffn % tp:
        return False
    if s.kv_heads and not s.kv_lora_rank and s.kv_heads % tp and tp % s.kv_heads:
        return False
    return True


def candidates(spec: ModelSpec, gpus: int, max_tp: int = 8, frameworks_fsdp: bool = True,
               frameworks: Sequence[str] = (registry.DEFAULT_FRAMEWORK,), node_gpus: int = 8
               ) -> List[Candidate]:
    """Every layout of ``spec`` on ``gpus`` GPUs the ``frameworks`` accept
    (the recomputation left "none": :func:`advise` raises it until the
    layout fits): tp dividing the heads and sizes (at most ``max_tp``, the
    GPUs an NVLink group holds), pp and interleaving up to the layers (an
    uneven split, as Megatron-LM's first and last stage options make, is
    priced at its fullest stage), cp for sequences of 8K tokens and more,
    ep dividing the experts and the ranks beside a pipeline stage, the
    micro-batch and the global batch dividing evenly. Per framework (each
    framework's ``advice_variants``, slurmtopo.job.frameworks):

    * Megatron-LM: its distributed optimizer, or Megatron-FSDP
      (``frameworks_fsdp``) for dense models without a pipeline;
    * torchtitan: FSDP over every data-parallel rank, or HSDP with shard
      groups of the ranks of one or two nodes (``node_gpus`` GPUs a
      node), with any of the sizes above;
    * DeepSpeed: ZeRO-1 (with a pipeline too) and ZeRO-3 (without: its
      pipeline engine refuses stages 2 and 3), no context parallelism (its
      sequence parallelism, Ulysses, is an all-to-all of its own) and no
      interleaving (its pipeline engine has none). ZeRO-2 is not listed:
      its communication is ZeRO-1's and the job's description carries the
      data-parallel style, not the stage, so every price of it (the
      plan's memory check among them) would be ZeRO-1's.
    """
    s = spec.resolved()
    out: List[Candidate] = []
    gb = s.global_batch
    for tp in _divisors(gpus, max_tp):
        if not _tp_ok(s, tp):
            continue
        for pp in _divisors(gpus // tp, min(s.layers, 64)):
            for cp in _divisors(gpus // (tp * pp), 16):
                if cp > 1 and (s.seq_len < 8192 or s.seq_len % (2 * cp)):
                    continue
                dp = gpus // (tp * pp * cp)
                eps = [1]
                if s.is_moe:
                    eps = [e for e in _divisors(s.experts, 256) if (dp * cp * tp) % e == 0]
                for ep in eps:
                    for mbs in MICRO_BATCHES:
                        if gb and gb % (dp * mbs):
                            continue
                        m = s.micro_batches_for(dp) if gb else s.micro_batches
                        # the tried ones, and every even split of the stage's
                        # layers (one layer a virtual stage at most: NeMo's
                        # recipes run 10-20)
                        stage = math.ceil(s.layers / pp)
                        vps = [1] if pp == 1 else [
                            v for v in sorted(set(VIRTUAL_STAGES) | set(_divisors(stage, stage)))
                            if pp * v <= s.layers and (v == 1 or m % pp == 0)]
                        for vp in vps:
                            for fw in frameworks:
                                out.extend(_framework_variants(
                                    fw, s, Candidate(tp, pp, vp, cp, ep, dp, mbs, "none",
                                                     "zero12", fw),
                                    frameworks_fsdp, node_gpus))
    return out


def _framework_variants(fw: str, s: ModelSpec, c: Candidate, megatron_fsdp: bool,
                        node_gpus: int) -> List[Candidate]:
    """The data-parallel styles ``fw`` runs layout ``c`` with (the
    framework's own ``advice_variants``)."""
    known = registry.FRAMEWORKS.get(fw) if isinstance(fw, str) else None
    if known is None or not known.advised:
        raise LayoutError(f"the advisor knows no framework {fw!r} (one of "
                          f"{', '.join(registry.advised())})")
    return known.advice_variants(c, s.is_moe, megatron_fsdp, node_gpus)


def _model_for(spec: ModelSpec, c: Candidate) -> ModelSpec:
    # the recomputation is the candidate's alone (the plan line drops the
    # user's recompute keys too: _model_text)
    keys: Dict[str, object] = {"recompute_modules": "", "recompute_layers": 0,
                               **dict(c.model_keys)}
    return replace(spec, micro_batch=c.micro_batch, virtual_stages=c.vp, recompute=c.recompute,
                   **keys)


def _shard(c: Candidate) -> int:
    """The HSDP shard group in ranks, as the step and memory count it
    (dp_shard x cp)."""
    return c.shard * c.cp if c.style == "hsdp" else 0


def _fitting(spec: ModelSpec, c: Candidate, gpu: GpuFigures) -> Optional[Candidate]:
    """``c`` with the least recomputation its framework tries that fits
    (:meth:`~slurmtopo.job.frameworks.base.Framework.advice_recompute`), or
    None."""
    fw = registry.get(c.framework)
    if spec.offload_layers and c.pp > 1:
        return None  # offloading runs without a pipeline (Megatron-LM refuses one)
    own = tuple((k, v) for k, v in fw.advice_model_keys(spec) if not getattr(spec, k))
    for rc, keys in fw.advice_recompute(spec):
        if spec.offload_layers and rc != "none":
            break  # nor with recomputation
        cand = replace(c, recompute=rc, model_keys=own + keys)
        if _fits(spec, cand, gpu):
            if rc == "full" and fw.block_recompute:
                return _fewest_recomputed(spec, cand, gpu)
            return cand
    return None


def _fits(spec: ModelSpec, c: Candidate, gpu: GpuFigures) -> bool:
    return memory_per_gpu(_model_for(spec, c), c.dims(), c.style, c.framework,
                          gpu.memory_gib, _shard(c)).fits


def _fewest_recomputed(spec: ModelSpec, c: Candidate, gpu: GpuFigures) -> Candidate:
    """``c`` (fitting with every layer recomputed) with the fewest layers of
    each model chunk recomputed that still fit (the block method's
    ``recompute_layers``): the others keep their activations and cost no
    second forward."""
    chunk = math.ceil(math.ceil(spec.layers / max(1, c.pp)) / max(1, c.vp))
    for n in range(1, chunk):
        part = replace(c, model_keys=c.model_keys + (("recompute_layers", n),))
        if _fits(spec, part, gpu):
            return part
    return c


def plan_line(model_text: str, c: Candidate, inventory: str, gpus: int) -> str:
    """The ``slurmtopo plan`` command line of a layout, ready to run."""
    words = ["slurmtopo", "plan", "--inventory", inventory, "--framework", c.framework,
             "--world", str(gpus)]
    for name, value in registry.get(c.framework).plan_line_options(c.knobs(gpus)).items():
        if name == "world":
            continue
        if value is True:
            words.append("--" + name.replace("_", "-"))
        else:
            words += ["--" + name.replace("_", "-"), str(value)]
    model = (f"{model_text},micro_batch={c.micro_batch},virtual_stages={c.vp},"
             f"recompute={c.recompute}" + "".join(f",{k}={v}" for k, v in c.model_keys))
    words += ["--model", model]
    return " ".join(shlex.quote(w) for w in words)


def _model_text(text: str) -> str:
    """The user's --model text without the keys the advisor sets."""
    own = ("micro_batch", "mbs", "virtual_stages", "vp", "vpp", "recompute", "ac",
           "activation_checkpointing", "recompute_modules", "recompute_layers",
           "recompute_num_layers")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return ",".join(p for p in parts if p.partition("=")[0].strip().lower() not in own)


def advise(cluster, model_text: str, gpus: int, inventory_path: str, top: int = 5,
           max_placed: int = MAX_PLACED, frameworks: Optional[Sequence[str]] = None) -> Advice:
    """Rank the layouts of ``model_text`` (a ``--model`` text) on ``gpus``
    GPUs of ``cluster`` for ``frameworks`` (default: every registered
    framework that is ``advised``, read now, so that one registered after
    this module loaded is included; see the module doc). Raises LayoutError
    when none fits or none can be placed."""
    if not frameworks:
        frameworks = registry.advised()
    if gpus < 1:
        raise LayoutError(f"--gpus {gpus}: give the GPUs to train on (1 or more)")
    spec = api.model_spec(model_text)
    base_text = _model_text(model_text)
    params = cost_params(cluster)
    nodes = list(cluster.nodes.values())
    if not nodes:
        raise LayoutError("the inventory has no nodes")
    total = sum(n.hardware.gpu_count for n in nodes)
    if gpus > total:
        raise LayoutError(f"--gpus {gpus}: the inventory has {total} GPUs")
    g0 = nodes[0].hardware.gpus[0] if nodes[0].hardware.gpus else None
    gpu, known = gpu_figures(g0.model if g0 else "", g0.memory_mib if g0 else None,
                             params.gpu_compute)
    notes: List[str] = []
    if not known:
        notes.append(f"GPU {g0.model if g0 else '?'!r} has no compute figures (cost: "
                     "gpu_compute: in the inventory); priced as an H100")
    per_node = max(n.hardware.gpu_count for n in nodes)
    domain = per_node
    if any(n.nvlink_domain is not None for n in nodes):
        counts: Dict[object, int] = {}
        for n in nodes:
            if n.nvlink_domain is not None:
                counts[n.nvlink_domain] = counts.get(n.nvlink_domain, 0) + n.hardware.gpu_count
        domain = max(counts.values())
    cands = candidates(spec, gpus, max_tp=min(8, domain), frameworks=frameworks,
                       node_gpus=per_node)
    if not cands:
        raise LayoutError(f"no layout of {gpus} GPUs divides the model evenly (layers "
                          f"{spec.layers}, heads {spec.heads}, global batch "
                          f"{spec.global_batch or 'not given'})")
    fitting = [f for f in (_fitting(spec, c, gpu) for c in cands) if f is not None]
    if not fitting:
        least = min(memory_per_gpu(_model_for(spec, replace(c, recompute="full")), c.dims(),
                                   c.style, c.framework, gpu.memory_gib, _shard(c)).total_gib
                    for c in cands)
        raise LayoutError(f"no layout of {gpus} GPUs fits {model_text!r} in "
                          f"{gpu.memory_gib:.0f} GiB a GPU (the smallest needs {least:.1f} "
                          "GiB with full recomputation): give more GPUs")
    # compute alone (no communication): the optimistic order, no placement
    def optimistic(c: Candidate) -> float:
        return compose(_model_for(spec, c), c.dims(), gpu, (), c.style, c.framework,
                       shard=_shard(c)).tokens_per_s_per_gpu

    # the structures (what the planner places: framework, tp, pp, cp, ep,
    # style); each keeps its best variants by compute alone (micro-batch,
    # interleaving, recomputation) to price
    by_structure: Dict[tuple, List[Tuple[float, Candidate]]] = {}
    for c in fitting:
        key = (c.framework, c.tp, c.pp, c.cp, c.ep, c.style, c.shard, c.zero)
        by_structure.setdefault(key, []).append((optimistic(c), c))

    # which structures the planner places: the best max_placed by two
    # orders, and the best few of every framework by each (so that each
    # framework's best is priced too). First, their best variant's compute
    # alone (the optimistic bound); second, its whole step where Slurm's
    # default placement puts it (a millisecond each, no planner), so that
    # a structure whose communication stays inside nodes is placed even
    # where others compute faster with all-to-alls over the network
    def estimate(variants: List[Tuple[float, Candidate]]) -> float:
        _, c = max(variants, key=lambda rc: (rc[0], -rc[1].micro_batch, -rc[1].vp))
        try:
            req = api.job_request(c.framework, model=_model_for(spec, c), **c.knobs(gpus))
            return price_step(cluster, api.default_placement(cluster, req), req,
                              params).whole.tokens_per_s_per_gpu
        except (LayoutError, PlacementError):
            return 0.0  # Slurm's default cannot place it: the first order only

    by_compute = sorted(by_structure.items(),
                        key=lambda kv: (-max(r for r, _ in kv[1]), kv[0]))
    # a structure's step is never faster than its compute alone: one whose
    # compute alone is below the max_placed-th estimate so far, and below
    # its framework's PER_FRAMEWORK-th, cannot be chosen by the second
    # order, and is not priced (the same choice, a fraction of the pricing)
    rank: Dict[tuple, float] = {}
    best: List[float] = []  # the best max_placed estimates so far, a min-heap
    best_of: Dict[str, List[float]] = {}  # the same per framework
    for key, variants in by_compute:
        bound = max(r for r, _ in variants)
        mine = best_of.setdefault(key[0], [])
        if (len(best) >= max_placed and bound < best[0]
                and len(mine) >= PER_FRAMEWORK and bound < mine[0]):
            rank[key] = 0.0
            continue
        rank[key] = estimate(variants)
        for heap, size in ((best, max_placed), (mine, PER_FRAMEWORK)):
            (heapq.heappush if len(heap) < size else heapq.heappushpop)(heap, rank[key])
    by_default = sorted(by_structure.items(), key=lambda kv: (-rank[kv[0]], kv[0]))
    chosen = []
    for order in (by_compute, by_default):
        chosen += order[:max_placed]
        for fw in frameworks:
            chosen += [kv for kv in order if kv[0][0] == fw][:PER_FRAMEWORK]
    seen = set()
    structures = []
    for key, variants in chosen:
        if key not in seen:
            seen.add(key)
            structures.append((key, variants))
    ranked: List[Ranked] = []
    placed = 0
    for key, variants in structures:
        variants.sort(key=lambda rc: (-rc[0], rc[1].micro_batch, rc[1].vp))
        placement = None
        for _, c in variants[:VARIANTS]:
            model = _model_for(spec, c)
            try:
                req = api.job_request(c.framework, model=model, **c.knobs(gpus))
                if placement is None:
                    placement = api.plan_job(cluster, None, req)
                    placed += 1
            except (LayoutError, PlacementError) as exc:
                notes.append(f"{c.label()}: not placed ({exc.message})")
                break
            step = price_step(cluster, placement, req, params)
            whole = step.whole
            if whole is None:  # pragma: no cover - the model is always given here
                continue
            ranked.append(Ranked(c, model, step.time_s, whole.tokens_per_s_per_gpu, whole.mfu,
                                 whole.memory.total_gib, tuple(sorted(step.by_kind().items())),
                                 plan_line(base_text, c, inventory_path, gpus),
                                 len(placement.hosts)))
    if not ranked:
        raise LayoutError(f"none of the {len(fitting)} layouts that fit could be placed on "
                          "the inventory")
    ranked.sort(key=lambda r: (-r.tokens_per_s_per_gpu, r.candidate.tp, r.candidate.pp,
                               r.candidate.framework))
    return Advice(spec, gpus, gpu.name, gpu.memory_gib, tuple(ranked[:max(1, top)]),
                  len(cands), len(fitting), placed, tuple(notes))


def advice_json(a: Advice) -> Dict[str, object]:
    """The advice as plain data (``advise --json``)."""
    return {"model": model_dict(a.model), "gpus": a.gpus, "gpu": a.gpu,
            "gpu_memory_gib": round(a.gpu_memory_gib, 3),
            "considered": a.considered, "fitting": a.fitting, "placed": a.placed,
            "model_flops_per_token": model_flops_per_token(a.model),
            "layouts": [{"rank": i + 1, "tp": r.candidate.tp, "pp": r.candidate.pp,
                         "virtual_stages": r.candidate.vp, "cp": r.candidate.cp,
                         "ep": r.candidate.ep, "dp": r.candidate.dp,
                         "micro_batch": r.candidate.micro_batch,
                         "recompute": r.candidate.recompute,
                         **dict(r.candidate.model_keys), "style": r.candidate.style,
                         "framework": r.candidate.framework,
                         "optimizer": r.candidate.optimizer(),
                         "time_s": _r(r.time_s),
                         "tokens_per_s_per_gpu": _r(r.tokens_per_s_per_gpu),
                         "mfu": _r(r.mfu), "memory_gib_per_gpu": _r(r.memory_gib),
                         "exposed_comm_s": {k: _r(v) for k, v in r.exposed_comm},
                         "nodes": r.nodes, "plan": r.plan} for i, r in enumerate(a.ranked)],
            "notes": list(a.notes)}


def _r(x: float) -> float:
    return float(f"{x:.6g}") if x and math.isfinite(x) else x
