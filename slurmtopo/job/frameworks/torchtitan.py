"""torchtitan's ``ParallelDims``: the groups of every mesh it builds.

Read from torchtitan 0.3.0 (the PyPI wheel,
``torchtitan/distributed/parallel_dims.py``) and checked against
pytorch/torchtitan commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a
(2026-08-21), which differ only in the ``full_dtensor`` backend (0.3.0 has
it) and the explicit expert-parallel check (the commit has it; 0.3.0 fails
later, in the mesh unflatten, for the same configuration).

torchtitan builds every mesh by unflattening the one-dimensional world mesh,
so each is row-major over the global ranks (the last name varies fastest):

* ``(pp, batch, cp, tp)`` gives ``pp``, ``batch`` (= dp_replicate*dp_shard),
  ``cp`` and ``tp``; ``loss`` is ``batch`` and ``cp`` flattened;
* the dense mesh gives ``dp_replicate`` and, per ``spmd_backend``:
  ``spmd_types`` (the default) ``dp_shard`` from
  ``(pp, dp_replicate, dp_shard, cp, tp)`` and ``dp`` (the same ranks as
  ``batch``); ``full_dtensor`` ``dp_shard``; ``partial_dtensor`` ``fsdp``
  (dp_shard*cp) from ``(pp, dp_replicate, fsdp, tp)``;
* the sparse (MoE) mesh ``(pp, dp_replicate, efsdp, ep)`` gives ``ep`` (the
  innermost ``ep`` ranks of dp_shard*cp*tp) and ``efsdp`` (the rest). They
  exist only for MoE (ep > 1): with ep = 1 torchtitan gives them the fake
  backend, so no rank talks over them.

FSDP shards parameters over ``dp_shard`` (with ``cp`` folded in) and
replicates over ``dp_replicate`` (HSDP when both exceed 1).

For the planner (:meth:`Torchtitan.terms`) its ranks ``(pp, dp_replicate,
dp_shard, cp, tp)`` row-major are Megatron's ``tp-cp-ep-dp-pp`` with dp =
dp_replicate*dp_shard; its MoE ``ep`` (innermost of dp_shard*cp*tp) is
Megatron's expert layout with expert_tp = 1. FSDP shards over ``dp_shard``
(cp folded in), so with dp_replicate = 1 the shard group is ``dp-cp``
(``dp`` without cp) and the job prefers it inside NVLink. With HSDP the
shard group is the inner dp_shard ranks of each ``dp`` group: consecutive
positions, which the planner keeps together as it fills nodes in rank
order, and the replicate group strides across them.

Its configuration is the TOML job file (``--job.config_file``): the
``[parallelism]`` degrees and ``spmd_backend`` (other keys of the table
must be ``ParallelismConfig`` fields; other tables are not read:
:func:`read_knobs`), the model (:func:`read_model`) and async TP
(:func:`read_overlaps`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks.base import ConfigReader, Framework, RequestTerms
from slurmtopo.job.frameworks.common import (FrameworkLayout, Knob, check_world, integer,
                                             normalised, refuse)
from slurmtopo.job.frameworks.configs import at, degree, line_of, short, toml
from slurmtopo.job.groups import Layout, mesh_groups

NAME = "torchtitan"
SPMD_BACKENDS = ("spmd_types", "full_dtensor", "partial_dtensor")

#: the dense mesh's dimensions, outermost first (init_device_mesh's order)
#: and how the plan's header names it
MESH = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
MESH_WORDS = "mesh pp, dp_replicate, dp_shard, cp, tp"

#: ParallelDims' fields under their own names, with torchtitan's defaults
KNOBS = (
    Knob("dp_replicate", 1, "Replicate (DDP/HSDP) degree (data_parallel_replicate_degree)."),
    Knob("dp_shard", -1, "Shard (FSDP) degree; -1: what is left of the world "
                         "(data_parallel_shard_degree)."),
    Knob("cp", 1, "Context-parallel degree (context_parallel_degree)."),
    Knob("tp", 1, "Tensor-parallel degree (tensor_parallel_degree)."),
    Knob("pp", 1, "Pipeline-parallel degree (pipeline_parallel_degree)."),
    Knob("ep", 1, "Expert-parallel degree, taken from dp_shard*cp*tp (expert_parallel_degree)."),
    Knob("world", None, "World size (default: the product of the degrees)."),
    Knob("spmd_backend", "spmd_types", "Which dense meshes torchtitan builds.", SPMD_BACKENDS),
)


def layout(dp_replicate: int = 1, dp_shard: int = -1, cp: int = 1, tp: int = 1, pp: int = 1,
           ep: int = 1, world: Optional[int] = None,
           spmd_backend: str = "spmd_types") -> FrameworkLayout:
    """Resolve ``ParallelDims`` as torchtitan does and list its groups.

    Refuses (LayoutError) what ``ParallelDims._validate`` refuses, with its
    message."""
    for name, value in (("dp_replicate", dp_replicate), ("cp", cp), ("tp", tp), ("pp", pp),
                        ("ep", ep)):
        if integer(name, value) < 1:
            raise refuse(NAME, f"{name}={value}: Parallelism degree should be >= 1, "
                               "except for dp_shard")
    integer("dp_shard", dp_shard)
    if not (dp_shard == -1 or dp_shard >= 1):
        raise refuse(NAME, f"dp_shard={dp_shard}: dp_shard must -1 or >=1.")
    if spmd_backend not in SPMD_BACKENDS:
        raise refuse(NAME, f"spmd_backend {spmd_backend!r} is not one of "
                           f"{', '.join(SPMD_BACKENDS)}")
    rest = dp_replicate * cp * tp * pp
    if world is None:
        if dp_shard == -1:
            raise refuse(NAME, "dp_shard=-1 takes what is left of the world size; give the "
                               "world size")
        world = rest * dp_shard
    check_world(world)
    if dp_shard == -1:
        dp_shard = world // rest
        if dp_shard < 1:
            raise refuse(NAME, f"dp_shard=-1 resolves to {dp_shard}: WORLD_SIZE({world}) is "
                               f"smaller than dp_replicate*cp*tp*pp = {rest}")
    if rest * dp_shard != world:
        raise refuse(NAME, f"Invalid parallel dims: dp_replicate({dp_replicate}) * "
                           f"dp_shard({dp_shard}) * cp({cp}) * tp({tp}) * pp({pp}) != "
                           f"WORLD_SIZE({world})")
    sparse_region = dp_shard * cp * tp
    if sparse_region % ep:
        raise refuse(NAME, f"expert_parallel_degree ({ep}) must divide dp_shard * cp * tp "
                           f"({sparse_region})")

    batch = dp_replicate * dp_shard
    loading = mesh_groups((pp, batch, cp, tp), ("pp", "batch", "cp", "tp"),
                          flatten=[("batch", "cp")])
    groups = {
        "pp": loading["pp"],
        "batch": loading["batch"],
        "loss": loading["batch-cp"],
    }
    if spmd_backend == "partial_dtensor":
        dense = mesh_groups((pp, dp_replicate, dp_shard * cp, tp),
                            ("pp", "dp_replicate", "fsdp", "tp"))
    else:
        dense = mesh_groups((pp, dp_replicate, dp_shard, cp, tp),
                            ("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    groups["dp_replicate"] = dense["dp_replicate"]
    groups["cp"] = loading["cp"]
    groups["tp"] = loading["tp"]
    if ep > 1:
        sparse = mesh_groups((pp, dp_replicate, sparse_region // ep, ep),
                             ("pp", "dp_replicate", "efsdp", "ep"))
        groups["ep"] = sparse["ep"]
        groups["efsdp"] = sparse["efsdp"]
    if spmd_backend == "spmd_types":
        groups["dp"] = loading["batch"]
    if spmd_backend == "partial_dtensor":
        groups["fsdp"] = dense["fsdp"]
    else:
        groups["dp_shard"] = dense["dp_shard"]
    knobs = (("dp_replicate", dp_replicate), ("dp_shard", dp_shard), ("cp", cp), ("tp", tp),
             ("pp", pp), ("ep", ep), ("world", world), ("spmd_backend", spmd_backend))
    return FrameworkLayout(NAME, world, knobs, normalised(groups))


# ---------------------------------------------------------------------------
# its configuration: the TOML job file

#: torchtitan [parallelism] key -> setting
_TITAN = {"data_parallel_replicate_degree": "dp_replicate",
          "data_parallel_shard_degree": "dp_shard", "context_parallel_degree": "cp",
          "tensor_parallel_degree": "tp", "pipeline_parallel_degree": "pp",
          "expert_parallel_degree": "ep", "spmd_backend": "spmd_backend"}
#: the other ParallelismConfig fields of torchtitan 0.3.0 and of the last
#: release with TOML job files (commit 9810191b^): accepted, not used
_TITAN_OTHER = frozenset((
    "fsdp_reshard_after_forward", "enable_fsdp_symm_mem", "enable_sequence_parallel",
    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
    "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
    "pipeline_parallel_microbatch_size", "context_parallel_load_balancer",
    "context_parallel_ptrr_mask_key", "disable_loss_parallel", "enable_async_tensor_parallel",
    "pipeline_parallel_expert_parallel_overlap", "context_parallel_rotate_method",
    "expert_tensor_parallel_degree", "expert_parallel_comm_backend"))


def read_knobs(text: str, where: str) -> Dict[str, object]:
    """The degrees of a torchtitan job file's ``[parallelism]`` table."""
    doc = toml(text, where)
    table = doc.get("parallelism")
    head = line_of(text, r"^\s*\[\s*parallelism\s*\]")
    if not isinstance(table, dict):
        raise LayoutError(f"{at(where, head)}: a torchtitan job file needs a [parallelism] "
                          "table (data_parallel_shard_degree = ..., tensor_parallel_degree = ...)")
    out: Dict[str, object] = {}
    for key, value in table.items():
        line = line_of(text, rf"^\s*{re.escape(key)}\s*=", head or 0)
        here = at(where, line)
        if key in _TITAN:
            if key == "spmd_backend":
                if not isinstance(value, str):
                    raise LayoutError(f"{here}: spmd_backend must be a string, got {short(value)}")
                out["spmd_backend"] = value
            else:
                out[_TITAN[key]] = degree(value, key, here)
        elif key == "expert_tensor_parallel_degree":
            if degree(value, key, here) != 1:
                raise LayoutError(f"{here}: expert_tensor_parallel_degree = {value}: torchtitan "
                                  "0.3.0 (which slurmtopo follows) has no expert tensor "
                                  "parallelism; use 1")
        elif key not in _TITAN_OTHER:
            raise LayoutError(f"{here}: [parallelism] has no {short(key)} in torchtitan "
                              f"(its degrees: {', '.join(_TITAN)})")
    return out


#: torchtitan [model] name -> flavor -> the --model preset
_TITAN_MODELS = {"llama3": {"8b": "llama3-8b", "70b": "llama3-70b", "405b": "llama3.1-405b"},
                 "deepseek_v3": {"671b": "deepseek-v3"},
                 "qwen3": {"30b-a3b": "qwen3-30b-a3b", "235b-a22b": "qwen3-235b-a22b"}}
#: torchtitan mixed_precision_param -> dtype
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def read_model(text: str, where: str) -> Dict[str, object]:
    """The ``--model`` keys of a torchtitan job file."""
    doc = toml(text, where)
    out: Dict[str, object] = {}
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    name = str(model.get("name", "")).lower()
    flavor = str(model.get("flavor", "")).lower()
    preset = _TITAN_MODELS.get(name, {}).get(flavor)
    if preset:
        out["preset"] = preset
    converters = model.get("converters", [])
    training = doc.get("training") if isinstance(doc.get("training"), dict) else {}
    for key, target in (("seq_len", "seq_len"), ("local_batch_size", "micro_batch"),
                        ("batch_size", "micro_batch"), ("global_batch_size", "global_batch")):
        if key in training:
            value = training[key]
            here = at(where, line_of(text, rf"^\s*{key}\s*="))
            if isinstance(value, bool) or not isinstance(value, int):
                raise LayoutError(f"{here}: {key} must be a whole number, got {value!r}")
            if value > 0:
                out[target] = value
    par = doc.get("parallelism") if isinstance(doc.get("parallelism"), dict) else {}
    mbs = par.get("pipeline_parallel_microbatch_size")
    if isinstance(mbs, int) and not isinstance(mbs, bool) and mbs > 0 \
            and int(par.get("pipeline_parallel_degree", 1) or 1) > 1:
        if "micro_batch" in out:  # the local batch is split into pipeline micro-batches
            out.setdefault("micro_batches", max(1, int(out["micro_batch"]) // mbs))
        out["micro_batch"] = mbs
    prec = training.get("mixed_precision_param")
    if isinstance(prec, str) and prec in _TORCH_DTYPES:
        out["dtype"] = _TORCH_DTYPES[prec]
    conv = [str(c).lower() for c in converters] if isinstance(converters, list) else []
    if any("float8" in c for c in conv) or isinstance(doc.get("float8"), dict):
        out["dtype"] = "fp8"
    if any(c.startswith("mx") or ".mx" in c for c in conv):
        out["dtype"] = "mxfp8"
    # torch.compile: [compile] enable (torchtitan from 2025; its
    # components, when listed, must name the model for the model's kernels
    # to be fused), [training] compile (before)
    comp = doc.get("compile")
    flag = comp.get("enable") if isinstance(comp, dict) else training.get("compile")
    if flag is not None:
        if not isinstance(flag, bool):
            key = "enable" if isinstance(comp, dict) else "compile"
            here = at(where, line_of(text, rf"^\s*{key}\s*="))
            raise LayoutError(f"{here}: {key} must be true or false, got {flag!r}")
        parts = comp.get("components") if isinstance(comp, dict) else None
        if isinstance(parts, list) and "model" not in [str(p).lower() for p in parts]:
            flag = False
        out["compile"] = "on" if flag else "off"
    ac = doc.get("activation_checkpoint")
    if isinstance(ac, dict) and isinstance(ac.get("mode"), str):
        mode = ac["mode"].lower()
        if mode not in ("none", "selective", "full"):
            here = at(where, line_of(text, r"^\s*mode\s*="))
            raise LayoutError(f"{here}: [activation_checkpoint] mode = {ac['mode']!r}: "
                              "none, selective or full")
        out["recompute"] = mode
    return out


def read_overlaps(text: str, where: str) -> Dict[str, bool]:
    """The overlaps a torchtitan job file turns on: async TP; sequence
    parallelism always (its TP plan)."""
    out: Dict[str, bool] = {}
    try:
        doc = toml(text, where)
    except LayoutError:
        return out
    par = doc.get("parallelism") if isinstance(doc.get("parallelism"), dict) else {}
    if par.get("enable_async_tensor_parallel") is True:
        out["tp_comm_overlap"] = True
    out["sequence_parallel"] = True
    return out


# ---------------------------------------------------------------------------
# the framework object

#: the advisor's HSDP shard groups tried besides pure FSDP: the ranks of
#: this many nodes
HSDP_NODES = (1, 2)


class Torchtitan(Framework):
    """torchtitan: FSDP and HSDP, PyTorch's kernels and overlaps, its TP
    plan's sequence parallelism."""

    name = NAME
    knobs = KNOBS
    mesh = MESH
    mesh_words = MESH_WORDS
    config = ConfigReader("TOML job file ([parallelism])",
                          read_knobs, read_model, read_overlaps)
    example = ("slurmtopo groups --framework torchtitan --world 16 --dp-replicate 2 "
               "--dp-shard -1 --tp 2")
    sequence_parallel = True  # its TP plan shards the norms' sequence
    gather_overlap = True
    tp_overlap_backward = False  # async TP fuses the forward's collectives only
    advised = True
    eager_by_default = True  # [compile] enable is off unless the job file says

    def build(self, **knobs) -> FrameworkLayout:
        return layout(**knobs)

    def terms(self, fl: FrameworkLayout) -> RequestTerms:
        k = dict(fl.knobs)
        rep, shard, cp, tp, pp, ep = (k[n] for n in ("dp_replicate", "dp_shard", "cp", "tp",
                                                     "pp", "ep"))
        lay = Layout(tp=tp, cp=cp, pp=pp, dp=rep * shard, ep=ep,
                     expert_tp=1 if ep > 1 else None, world=fl.world).resolved()
        kinds = {"tp": "tp", "cp": "cp", "pp": "pp", "batch": "dp", "dp": "dp", "loss": "dp-cp"}
        if ep > 1:
            kinds["ep"] = "ep"
        if rep == 1:
            kinds.update(dp_shard="dp", fsdp="dp-cp", efsdp="expert-dp")
        if shard == 1:
            kinds["dp_replicate"] = "dp"
        prefer: Dict[str, str] = {}
        if rep == 1 and shard * cp > 1:
            prefer["dp-cp" if cp > 1 else "dp"] = "nvlink"
        return RequestTerms(lay, {a: b for a, b in kinds.items() if a in fl.groups}, prefer)

    def style(self, knobs: Mapping[str, Any]) -> str:
        """FSDP when dp_shard x cp > 1, with replicas (HSDP) when
        dp_replicate > 1; else DDP."""
        shard = int(knobs["dp_shard"]) * int(knobs["cp"])  # type: ignore[arg-type]
        if shard > 1:
            return "hsdp" if int(knobs["dp_replicate"]) > 1 else "fsdp"  # type: ignore
        return "ddp"

    def hsdp_shard(self, knobs: Mapping[str, Any]) -> int:
        """dp_shard x cp (consecutive ranks of each ``dp-cp`` group)."""
        if self.style(knobs) != "hsdp":
            return 0
        return int(knobs["dp_shard"]) * int(knobs["cp"])  # type: ignore[arg-type]

    def advice_variants(self, c, is_moe: bool, fsdp: bool, node_gpus: int) -> List[Any]:
        """FSDP over every data-parallel rank, or HSDP with shard groups of
        the ranks of :data:`HSDP_NODES` nodes: those :func:`layout` accepts
        (expert parallelism inside dp_shard x cp x tp)."""
        if c.dp * c.cp == 1:
            return []
        out = [replace(c, style="fsdp")]
        per_node = max(1, node_gpus // (c.tp * c.cp))
        for nodes in HSDP_NODES:
            shard = per_node * nodes
            if 1 < shard < c.dp and c.dp % shard == 0 and (shard * c.cp * c.tp) % c.ep == 0:
                out.append(replace(c, style="hsdp", shard=shard))
        return out

    def advice_model_keys(self, spec) -> Tuple[Tuple[str, object], ...]:
        """The model compiled (``[compile] enable = true``), as torchtitan's
        published runs train: torch.compile fuses the memory-bound kernels
        eager PyTorch runs one by one."""
        return (("compile", "on"),)

    def advice_knobs(self, c, gpus: int) -> Dict[str, object]:
        k = super().advice_knobs(c, gpus)
        shard = c.shard if c.style == "hsdp" else c.dp
        k.update(dp_shard=shard, dp_replicate=c.dp // shard)
        return k


FRAMEWORK = Torchtitan()
