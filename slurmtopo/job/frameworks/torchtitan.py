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
"""
from __future__ import annotations

from typing import Optional

from slurmtopo.job.frameworks.common import (FrameworkLayout, Knob, check_world, integer,
                                             normalised, refuse)
from slurmtopo.job.groups import mesh_groups

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
