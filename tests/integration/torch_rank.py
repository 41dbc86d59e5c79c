"""One real torch.distributed (gloo) rank of a `slurmtopo sbatch` job.

Run by every rank of tests/integration/test_framework_ranks.py, under srun
or torchrun: ``torch_rank.py OUT FRAMEWORK KNOBS_JSON``. It joins the job
with the environment slurmtopo (or torchrun) gave it, builds the
framework's process groups on real gloo process groups, all-gathers
``(rank, node, GPU)`` inside each group it belongs to, and writes what it
saw to ``OUT/torch-<RANK>.json`` for the test to compare with the rank map.

The groups are the framework's rules as slurmtopo.job.frameworks computes them
(the test checks those against the fixtures recorded from the frameworks'
own code); torchtitan's dense mesh is built as torchtitan builds it, with
``init_device_mesh`` over ``(pp, dp_replicate, dp_shard, cp, tp)``, and its
dimensions' groups are the mesh's own. Every other kind is a
``new_group`` per group, called by every rank in the same order, as the
frameworks do.
"""
from __future__ import annotations

import datetime
import json
import os
import sys


def main(out: str, framework: str, knobs_json: str) -> None:
    import torch.distributed as dist

    from slurmtopo.job.frameworks.registry import framework_layout

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    knobs = json.loads(knobs_json)
    layout = framework_layout(framework, world=world, **knobs)
    local = int(os.environ["LOCAL_RANK"])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    me = {"rank": rank, "host": os.environ.get("SLURMD_NODENAME", ""),
          "gpu": int(visible.split(",")[local]), "cuda_visible_devices": visible}

    groups = {}
    if framework == "torchtitan":
        from torch.distributed.device_mesh import init_device_mesh

        names = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
        mesh = init_device_mesh("cpu", tuple(layout.knob(n) for n in names),
                                mesh_dim_names=names)
        groups.update({n: mesh.get_group(n) for n in names})
    for kind in sorted(layout.groups):
        if kind in groups:
            continue
        for members in layout.groups[kind]:
            g = dist.new_group(members)
            if rank in members:
                groups[kind] = g
    seen = {}
    for kind, g in sorted(groups.items()):
        gathered = [None] * dist.get_world_size(g)
        dist.all_gather_object(gathered, me, group=g)
        seen[kind] = {"ranks": sorted(dist.get_process_group_ranks(g)), "gathered": gathered}
    dist.barrier()
    doc = dict(me, world=world, master_addr=os.environ["MASTER_ADDR"],
               master_port=os.environ["MASTER_PORT"], groups=seen,
               # started by torchrun (its elastic agent sets this), not srun
               torchelastic="TORCHELASTIC_RUN_ID" in os.environ)
    with open(os.path.join(out, f"torch-{rank}.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
