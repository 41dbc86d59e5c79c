"""``slurmtopo audit`` against a real slurmctld: two multi-node jobs on the
dev cluster (node1-2 under leaf1, node3-4 under leaf2, topology/tree), the
audit's spans checked against the nodes and GPUs Slurm gave them.

Job A is pinned to node1 and node3 (``-w``): two leaves, 4 GPUs on each.
Job B asks for two nodes of 4 GPUs and Slurm picks them. Whatever Slurm
picks for B, every node keeps at least 4 free GPUs without A, so one leaf
could have held A: the audit must report A over the fewest leaves.
"""
from __future__ import annotations

import json

from tests.integration.helpers import run_slurmtopo

INV = "etc/examples/devcluster.yaml"
LEAF = {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2", "node4": "leaf2"}


def _sleeper(devcluster, *args) -> int:
    return devcluster.sbatch("-t", "5", "--ntasks-per-node=1", *args, wrap="sleep 300")


def test_audit_spans_match_the_nodes_slurm_gave(devcluster, tmp_path):
    a = _sleeper(devcluster, "-N2", "-w", "node[1,3]", "--gpus-per-node=4", "-J", "pinned")
    devcluster.wait_state(a, {"RUNNING"})
    b = _sleeper(devcluster, "-N2", "--gpus-per-node=4", "-J", "chosen")
    devcluster.wait_state(b, {"RUNNING"})
    given = {a: devcluster.gpus(a), b: devcluster.gpus(b)}
    assert sorted(given[a]) == ["node1", "node3"]

    p = run_slurmtopo(["audit", "--inventory", INV, "--backend", "cli", "--json"],
                      env=devcluster.env)
    doc = json.loads(p.stdout)
    jobs = {int(j["job"]): j for j in doc["jobs"]}
    assert sorted(jobs) == sorted([a, b])
    for jid, held in given.items():
        j = jobs[jid]
        assert j["gpus"] == sum(len(g) for g in held.values()) == 8
        assert j["node_count"] == len(held) == 2
        assert j["spans"]["nodes"] == 2
        assert j["spans"]["leaves"] == len({LEAF[n] for n in held})
        assert j["spans"]["domains"] == 2  # no multi-node NVLink: a node is its own domain
    assert (jobs[a]["spans"]["leaves"], jobs[a]["fewest"]["leaves"]) == (2, 1)
    assert jobs[a]["optimal"] is False and jobs[a]["name"] == "pinned"
    # B: Slurm's own choice under topology/tree keeps two nodes under one leaf
    # when a leaf has them, and one leaf is the fewest
    assert jobs[b]["fewest"]["leaves"] == 1
    assert jobs[b]["optimal"] is (len({LEAF[n] for n in given[b]}) == 1)
    busy = sum(len(g) for held in given.values() for g in held.values())
    assert doc["stranded"]["free"] == 32 - busy

    # the same through a snapshot: slurmtopo state --jobs, then --state
    snap = tmp_path / "snap.yaml"
    run_slurmtopo(["state", "--inventory", INV, "--backend", "cli", "--jobs", "-o", snap],
                  env=devcluster.env)
    again = json.loads(run_slurmtopo(["audit", "--inventory", INV, "--state", snap,
                                      "--json"], env=devcluster.env).stdout)
    assert again["jobs"] == doc["jobs"]
    assert again["stranded"] == doc["stranded"]
