#!/usr/bin/env python3
"""Record the groups each framework's own code builds, for tests/test_frameworks.py.

Runs the real frameworks on torch's fake process group
(``torch.testing._internal.distributed.fake_pg``: every collective is a
no-op, so any world size runs on one CPU), once per rank, and records the
ranks of every group that rank belongs to, as ``torch.distributed`` reports
them (``get_process_group_ranks``). A configuration the framework refuses is
recorded with its message. Nothing of the frameworks is copied: only what
they computed, in tests/fixtures/frameworks/<framework>.json.

Needs, in the Python that runs it (a venv is best; not slurmtopo's
dependencies): torch (tested with 2.14.1), torchtitan==0.3.0 (+ spmd_types
0.2.3, tyro, einops ...), deepspeed==0.19.8 (DS_BUILD_OPS=0), megatron-core
(0.16.1). Example::

    python3 -m venv --system-site-packages /tmp/fw && \\
      /tmp/fw/bin/pip install torch torchtitan==0.3.0 deepspeed==0.19.8 megatron-core
    /tmp/fw/bin/python scripts/framework_fixtures.py tests/fixtures/frameworks

The output is deterministic (sorted keys, cases in the order below).
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from importlib.metadata import version
from pathlib import Path

warnings.filterwarnings("ignore")

TORCHTITAN_CASES = [
    dict(dp_replicate=1, dp_shard=-1, cp=1, tp=1, pp=1, ep=1, world_size=8),
    dict(dp_replicate=2, dp_shard=-1, cp=1, tp=1, pp=1, ep=1, world_size=8),
    dict(dp_replicate=2, dp_shard=4, cp=1, tp=2, pp=1, ep=1, world_size=16),
    dict(dp_replicate=1, dp_shard=2, cp=2, tp=2, pp=2, ep=1, world_size=16),
    dict(dp_replicate=2, dp_shard=2, cp=2, tp=1, pp=2, ep=1, world_size=16),
    dict(dp_replicate=1, dp_shard=-1, cp=1, tp=2, pp=1, ep=4, world_size=16),
    dict(dp_replicate=2, dp_shard=2, cp=1, tp=2, pp=1, ep=2, world_size=8),
    dict(dp_replicate=1, dp_shard=4, cp=2, tp=1, pp=1, ep=8, world_size=8),
    dict(dp_replicate=2, dp_shard=2, cp=2, tp=2, pp=2, ep=4, world_size=32),
    dict(dp_replicate=1, dp_shard=3, cp=1, tp=2, pp=2, ep=3, world_size=12),
    dict(dp_replicate=2, dp_shard=4, cp=1, tp=2, pp=1, ep=1, world_size=16,
         spmd_backend="partial_dtensor"),
    dict(dp_replicate=1, dp_shard=2, cp=2, tp=2, pp=1, ep=2, world_size=8,
         spmd_backend="partial_dtensor"),
    dict(dp_replicate=2, dp_shard=2, cp=2, tp=1, pp=1, ep=1, world_size=8,
         spmd_backend="full_dtensor"),
    # refused
    dict(dp_replicate=2, dp_shard=3, cp=1, tp=1, pp=1, ep=1, world_size=8),
    dict(dp_replicate=0, dp_shard=-1, cp=1, tp=1, pp=1, ep=1, world_size=8),
    dict(dp_replicate=1, dp_shard=-2, cp=1, tp=1, pp=1, ep=1, world_size=8),
    dict(dp_replicate=1, dp_shard=2, cp=1, tp=2, pp=1, ep=3, world_size=4),
    dict(dp_replicate=4, dp_shard=-1, cp=1, tp=4, pp=1, ep=1, world_size=8),
]

DEEPSPEED_CASES = [
    dict(pp=1, tp=1, dp=8, ep=1),
    dict(pp=2, tp=2, dp=2, ep=1),
    dict(pp=4, tp=1, dp=4, ep=1),
    dict(pp=2, tp=4, dp=2, ep=1),
    dict(pp=1, tp=1, dp=8, ep=4),
    dict(pp=1, tp=1, dp=8, ep=4, use_data_before_expert_parallelism=True),
    dict(pp=2, tp=1, dp=8, ep=2),
    dict(pp=2, tp=1, dp=8, ep=4, use_data_before_expert_parallelism=True),
    dict(pp=1, tp=2, dp=8, ep=4),
    dict(pp=1, tp=2, dp=8, ep=4, enable_expert_tensor_parallelism=True),
    dict(pp=2, tp=2, dp=4, ep=2, enable_expert_tensor_parallelism=True),
    dict(pp=2, tp=2, dp=4, ep=4, enable_expert_tensor_parallelism=True,
         use_data_before_expert_parallelism=True),
    dict(pp=1, tp=2, dp=6, ep=3, enable_expert_tensor_parallelism=True),
    # refused
    dict(pp=1, tp=1, dp=6, ep=4),
    dict(pp=1, tp=2, dp=6, ep=4, enable_expert_tensor_parallelism=True),
]

MEGATRON_CASES = [
    dict(tp=2, cp=1, ep=1, pp=4, dp=2, expert_tp=2, order="tp-cp-ep-dp-pp"),
    dict(tp=4, cp=2, ep=1, pp=1, dp=1, expert_tp=4, order="tp-cp-ep-dp-pp"),
    dict(tp=2, cp=2, ep=1, pp=2, dp=2, expert_tp=2, order="tp-cp-ep-dp-pp"),
    dict(tp=2, cp=1, ep=4, pp=1, dp=4, expert_tp=1, order="tp-cp-ep-dp-pp"),
    dict(tp=2, cp=2, ep=2, pp=2, dp=2, expert_tp=1, order="tp-cp-ep-dp-pp"),
    dict(tp=2, cp=1, ep=2, pp=2, dp=4, expert_tp=2, order="tp-cp-ep-dp-pp"),
    dict(tp=2, cp=1, ep=1, pp=3, dp=4, expert_tp=2, order="tp-dp-pp"),
    dict(tp=2, cp=1, ep=1, pp=2, dp=2, expert_tp=2, order="tp-pp-dp"),
]

#: slurmtopo's Megatron kind -> (generator, RankGenerator token)
MEGATRON_TOKENS = {
    "tp": ("dense", "tp"), "cp": ("dense", "cp"), "pp": ("dense", "pp"), "dp": ("dense", "dp"),
    "dp-cp": ("dense", "dp-cp"), "tp-pp": ("dense", "tp-pp"), "tp-cp": ("dense", "tp-cp"),
    "tp-dp": ("dense", "tp-dp"), "tp-dp-cp": ("dense", "tp-dp-cp"),
    "ep": ("expert", "ep"), "expert-tp": ("expert", "tp"), "expert-dp": ("expert", "dp"),
    "expert-tp-ep": ("expert", "tp-ep"), "expert-tp-ep-pp": ("expert", "tp-ep-pp"),
}


def _fake_world(rank: int, world: int) -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


def _merge(found: dict, kind: str, ranks) -> None:
    group = sorted(int(r) for r in ranks)
    groups = found.setdefault(kind, [])
    if group not in groups:
        groups.append(group)


def _finish(found: dict) -> dict:
    return {kind: sorted(groups) for kind, groups in found.items()}


def torchtitan_case(case: dict) -> dict:
    import torch.distributed as dist
    from torchtitan.distributed.parallel_dims import ParallelDims

    world = case["world_size"]
    found: dict = {}
    for rank in range(world):
        _fake_world(rank, world)
        try:
            dims = ParallelDims(**case)
            dims.build_mesh()
        except (AssertionError, ValueError, RuntimeError) as exc:
            return {"refused": str(exc)}
        for kind, mesh in dims._single_axis_meshes.items():
            _merge(found, kind, dist.get_process_group_ranks(mesh.get_group()))
    return {"groups": _finish(found), "resolved_dp_shard": dims.dp_shard}


def deepspeed_case(case: dict) -> dict:
    import torch
    import torch.distributed as dist
    import deepspeed.comm
    from deepspeed.moe.layer import MoE
    from deepspeed.runtime.pipe.topology import (PipeModelDataParallelTopology,
                                                 PipelineParallelGrid)
    from deepspeed.utils import groups as dsgroups

    pp, tp, dp, ep = case["pp"], case["tp"], case["dp"], case["ep"]
    world = pp * tp * dp
    found: dict = {}
    for rank in range(world):
        _fake_world(rank, world)
        deepspeed.comm.comm.cdb = None
        deepspeed.comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False,
                                        verbose=False)
        for table in (dsgroups._EXPERT_PARALLEL_GROUP, dsgroups._EXPERT_PARALLEL_GROUP_RANKS,
                      dsgroups._EXPERT_DATA_PARALLEL_GROUP,
                      dsgroups._EXPERT_DATA_PARALLEL_GROUP_RANKS):
            table.clear()
        try:
            grid = PipelineParallelGrid(topology=PipeModelDataParallelTopology(pp, tp, dp))
            for kind, group in (("pipe_parallel", grid.get_pipe_parallel_group()),
                                ("data_parallel", grid.get_data_parallel_group()),
                                ("model_parallel", grid.get_model_parallel_group()),
                                ("slice_parallel", grid.get_slice_parallel_group())):
                _merge(found, kind, dist.get_process_group_ranks(group))
            if ep > 1:
                dsgroups.mpu = grid
                layer = MoE(hidden_size=4, expert=torch.nn.Linear(4, 4), num_experts=ep,
                            ep_size=ep, enable_expert_tensor_parallelism=case.get(
                                "enable_expert_tensor_parallelism", False))
                layer.set_deepspeed_parallelism(
                    case.get("use_data_before_expert_parallelism", False))
                name = f"ep_size_{ep}"
                _merge(found, "expert_parallel", dist.get_process_group_ranks(
                    dsgroups._get_expert_parallel_group(name)))
                _merge(found, "expert_data_parallel", dist.get_process_group_ranks(
                    dsgroups._get_expert_data_parallel_group(name)))
        except (AssertionError, ValueError, RuntimeError, NotImplementedError) as exc:
            return {"refused": str(exc)}
        finally:
            dsgroups.mpu = None
    return {"groups": _finish(found)}


def megatron_case(case: dict) -> dict:
    from megatron.core.parallel_state import RankGenerator

    tp, cp, ep, pp, dp, etp = (case[k] for k in ("tp", "cp", "ep", "pp", "dp", "expert_tp"))
    world = tp * cp * pp * dp
    gens = {"dense": RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=case["order"]),
            "expert": RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1,
                                    order=case["order"])}
    out = {}
    for kind, (gen, token) in MEGATRON_TOKENS.items():
        if gen == "expert" and ep == 1 and etp == tp:
            continue
        out[kind] = sorted(sorted(g) for g in gens[gen].get_ranks(token))
    return {"groups": out}


def main(argv) -> int:
    outdir = Path(argv[1] if len(argv) > 1 else "tests/fixtures/frameworks")
    jobs = [("torchtitan", "torchtitan", TORCHTITAN_CASES, torchtitan_case),
            ("deepspeed", "deepspeed", DEEPSPEED_CASES, deepspeed_case),
            ("megatron", "megatron-core", MEGATRON_CASES, megatron_case)]
    os.environ.setdefault("MASTER_ADDR", "localhost")
    for name, package, cases, run in jobs:
        records = [{"case": case, **run(case)} for case in cases]
        doc = {"framework": name, "package": package, "version": version(package),
               "torch": version("torch"), "generated_by": "scripts/framework_fixtures.py",
               "cases": records}
        path = outdir / f"{name}.json"
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{path}: {len(records)} cases ({name} {doc['version']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
