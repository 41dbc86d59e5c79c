"""Real torch.distributed ranks of each framework's layout, launched by
`slurmtopo sbatch` on the dev cluster (issue 23, docs/frameworks.md).

Every rank runs tests/integration/torch_rank.py: it joins the job over gloo
with the MASTER_ADDR/MASTER_PORT/RANK slurmtopo (or torchrun) gave it,
builds the framework's groups and all-gathers ``(rank, node, GPU)`` inside
each. The test checks that every group really formed with the members the
framework's own code gives (the fixtures recorded from torchtitan,
DeepSpeed and Megatron-LM, tests/fixtures/frameworks/), that each member
runs on the node and GPU the rank map `slurmtopo bind` wrote says, and that
the groups the style keeps inside a node (TP, the FSDP shard group) are
there while HSDP's replicas go across nodes.

One 8-rank job per framework style, 4 GPUs of each of two nodes; srun for
all three, torchrun for torchtitan as well.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.ranks import Run, cluster, master_addr  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RANK = ROOT / "tests" / "integration" / "torch_rank.py"
FIXTURES = ROOT / "tests" / "fixtures" / "frameworks"

#: (framework, fixture case, slurmtopo options, knobs for torch_rank.py,
#:  kinds inside one node, kinds across two nodes)
JOBS = {
    # Megatron TP x DP with expert parallelism (MoE over the dp ranks)
    "megatron-tp-dp": ("megatron",
                       {"cp": 1, "dp": 4, "ep": 4, "expert_tp": 1, "order": "tp-cp-ep-dp-pp",
                        "pp": 1, "tp": 2},
                       ["--tp", "2", "--dp", "4", "--ep", "4", "--expert-tp", "1"],
                       {"tp": 2, "dp": 4, "ep": 4, "expert_tp": 1},
                       ["tp"], ["dp"]),
    # torchtitan HSDP + TP + MoE: shard x tp fills a node, replicas across
    "torchtitan-hsdp": ("torchtitan",
                        {"cp": 1, "dp_replicate": 2, "dp_shard": 2, "ep": 2, "pp": 1, "tp": 2,
                         "world_size": 8},
                        ["--dp-replicate", "2", "--dp-shard", "2", "--tp", "2", "--ep", "2"],
                        {"dp_replicate": 2, "dp_shard": 2, "tp": 2, "ep": 2},
                        ["tp", "dp_shard", "ep"], ["dp_replicate"]),
    # DeepSpeed pipe/data/model with ZeRO-1
    "deepspeed-zero1": ("deepspeed", {"dp": 2, "ep": 1, "pp": 2, "tp": 2},
                        ["--pp", "2", "--tp", "2", "--dp", "2", "--zero-stage", "1"],
                        {"pp": 2, "tp": 2, "dp": 2, "zero_stage": 1},
                        ["slice_parallel"], []),
}

CASES = [pytest.param(name, "srun", id=f"{name}-srun") for name in JOBS] + \
        [pytest.param("torchtitan-hsdp", "torchrun", id="torchtitan-hsdp-torchrun")]


def _recorded(framework, case):
    """The groups the framework's own code built for ``case`` (fixture)."""
    doc = json.loads((FIXTURES / f"{framework}.json").read_text())
    for c in doc["cases"]:
        if c["case"] == case:
            return c["groups"]
    raise AssertionError(f"no {framework} fixture case {case}")


def _group_of(groups, rank):
    (g,) = [g for g in groups if rank in g]
    return g


@pytest.mark.parametrize("name,launcher", CASES)
def test_framework_groups_form_where_the_rank_map_says(cluster, tmp_path, name, launcher):
    from slurmtopo.frameworks.registry import framework_layout

    framework, case, options, knobs, inside, across = JOBS[name]
    recorded = _recorded(framework, case)
    ours = framework_layout(framework, world=8, **knobs).groups
    # slurmtopo's groups are the framework's, kind for kind
    assert {k: recorded.get(k) for k in ours} == dict(ours)
    extra = ["--launcher", "torchrun", "--torchrun", str(Path(sys.executable).parent / "torchrun")
             ] if launcher == "torchrun" else []
    run = Run(cluster, tmp_path, ["--framework", framework, *options, "--gpus-per-node", "4",
                                  *extra],
              cmd_args=[framework, json.dumps(knobs)], command=[sys.executable, RANK],
              # the dev cluster's nodes are all this machine
              env={"GLOO_SOCKET_IFNAME": "lo"}).wait(timeout=240)
    placement, doc = run.bound()
    if master_addr(placement.slots[0].host) != placement.slots[0].host:  # the dev cluster's
        assert (f"node name {placement.slots[0].host} does not resolve here: MASTER_ADDR is "
                "its NodeAddr 127.0.0.1") in run.output()
    slots = placement.slots
    assert placement.world_size == 8 and len(placement.hosts) == 2, run.output()
    files = {int(f.stem.split("-")[1]): json.loads(f.read_text())
             for f in run.out.glob("torch-*.json")}
    assert sorted(files) == list(range(8)), run.output()
    for r, got in files.items():
        assert got["world"] == 8
        assert (got["host"], got["gpu"]) == (slots[r].host, slots[r].gpu), (r, got)
        assert got["master_addr"] == master_addr(slots[0].host)
        assert got["master_port"] == str(20000 + run.job_id % 10000)
        assert set(got["groups"]) == set(ours), r
        for kind, seen in got["groups"].items():
            want = _group_of(ours[kind], r)
            assert seen["ranks"] == want, (r, kind, seen["ranks"], want)
            # the members answered over the group itself, in group-rank order
            assert [m["rank"] for m in seen["gathered"]] == want, (r, kind)
            for m in seen["gathered"]:
                assert (m["host"], m["gpu"]) == (slots[m["rank"]].host, slots[m["rank"]].gpu)
    for kind in inside:
        for g in ours[kind]:
            assert len({slots[x].host for x in g}) == 1, (kind, g)
    for kind in across:
        for g in ours[kind]:
            assert len({slots[x].host for x in g}) == 2, (kind, g)
