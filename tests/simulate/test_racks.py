"""Rack-scale domains: Slurm's topology/block choice, the racks' free and
unusable trays over a replay, a rack's usable share through tray failures,
the daemon's ``--pack domains``, and the generated inventories."""
from __future__ import annotations

import math

import pytest

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.placement.common import candidates
from slurmtopo.placement.slurm_select import block_levels, choose_nodes
from slurmtopo.job.request import JobRequest
from slurmtopo.job.groups import Layout
from slurmtopo.simulate.clusters import build
from slurmtopo.simulate.freestate import FreeState
from slurmtopo.simulate.racks import capacity_table, usable_share
from tests.clirun import one_line_error, run_cli


@pytest.fixture(scope="module")
def nvl():
    return build("nvl72", racks=4)


def _busy(inv, trays):
    """A state with ``trays`` (names) wholly busy."""
    nodes = {h: NodeState(h, "allocated", frozenset(range(4))) for h in trays}
    return ClusterState(nodes=nodes, source="test")


def _slurm(inv, state, nodes, segment=None):
    req = JobRequest(layout=Layout(dp=4 * nodes), gpus_per_node=4)
    cand = candidates(inv, state, req)
    return sorted(rec[1].name for rec, _ in choose_nodes(inv, cand.nodes, 4 * nodes, 4, "block",
                                                         segment))


def test_generated_nvl72(nvl):
    assert len(nvl) == 72 and nvl.gpu_count == 288
    assert [len(b.nodes) for b in nvl.fabric.blocks] == [18] * 4
    assert nvl.fabric.block_sizes == (18, 36, 72)
    assert block_levels(nvl) == (18, (0, 1, 2))
    assert len({n.nvlink_domain for n in nvl.nodes.values()}) == 4


def test_block_best_fit(nvl):
    """Rack 1 has 10 trays busy (8 free), rack 2 4 busy (14 free), racks 3-4
    idle. A 6-tray job goes to the block with the fewest free that hold it
    (rack 1); a 12-tray one to rack 2; a 30-tray job needs a 2-rack level:
    racks 1+2 hold 22 only, racks 3+4 hold 36 (taken: rack 3 whole, then
    12 of rack 4 in node order)."""
    busy = [f"r001t{t:02d}" for t in range(1, 11)] + [f"r002t{t:02d}" for t in range(1, 5)]
    st = _busy(nvl, busy)
    assert _slurm(nvl, st, 6) == [f"r001t{t:02d}" for t in range(11, 17)]
    assert _slurm(nvl, st, 12) == [f"r002t{t:02d}" for t in range(5, 17)]
    got = _slurm(nvl, st, 30)
    assert got == [f"r003t{t:02d}" for t in range(1, 19)] + [f"r004t{t:02d}" for t in range(1, 13)]


def test_segments_each_inside_one_block(nvl):
    """16 trays as --segment=8: two segments, each the best-fitting block
    that holds 8 (rack 1's 8 free trays first, then rack 2's)."""
    busy = [f"r001t{t:02d}" for t in range(1, 11)] + [f"r002t{t:02d}" for t in range(1, 5)]
    got = _slurm(nvl, _busy(nvl, busy), 16, segment=8)
    assert [h for h in got if h.startswith("r001")] == [f"r001t{t:02d}" for t in range(11, 19)]
    assert len([h for h in got if h.startswith("r002")]) == 8


def test_rack_counters_follow_allocations(nvl):
    fs = FreeState(nvl)
    assert fs.segments == (2, 4, 8, 9, 16, 18)
    # all idle: 4 racks whole; 18 mod 4 = 2 trays no 4-tray segment can use, per rack
    assert (fs.whole_domains, fs.partial_domains) == (4, 0)
    assert fs.unusable[fs.segments.index(4)] == 4 * 2
    assert fs.unusable[fs.segments.index(18)] == 0
    fs.allocate({"r001t01": (0,)})  # one GPU busy: the tray is no longer free
    assert (fs.whole_domains, fs.partial_domains) == (3, 1)
    # rack 1 has 17 free trays: 17 unusable for 18, 1 for 4 and 8, 1 for 16
    assert fs.unusable[fs.segments.index(18)] == 17
    assert fs.unusable[fs.segments.index(16)] == 1 + 3 * 2
    fs.release({"r001t01": (0,)})
    assert (fs.whole_domains, fs.partial_domains) == (4, 0)
    assert fs.unusable[fs.segments.index(18)] == 0


def test_usable_share_by_hand():
    # segment 18: the rack only when no tray is down
    assert usable_share(18, 18, 0.01) == pytest.approx(0.99 ** 18)
    # segment 16: 16/18 of the rack with at most 2 trays down
    p = 0.01
    ok = sum(math.comb(18, k) * p ** k * (1 - p) ** (18 - k) for k in range(3))
    assert usable_share(18, 16, p) == pytest.approx(ok * 16 / 18)
    assert usable_share(18, 1, 0.05) == pytest.approx(0.95)
    assert usable_share(18, 4, 0.0) == pytest.approx(16 / 18)
    table = {row["segment"]: row["usable"] for row in capacity_table(18)}
    assert table[16]["0.02"] > table[18]["0.02"] and table[18]["0"] > table[16]["0"]


def test_inventories_of_the_traces(tmp_path):
    philly = build("philly")
    assert (len(philly), philly.gpu_count) == (552, 2490)
    assert sorted({n.hardware.gpu_count for n in philly.nodes.values()}) == [2, 8]
    assert build("acme-seren").gpu_count == 2288 and build("acme-kalos").gpu_count == 2416
    leaves = [s for s in philly.fabric.switches if s.nodes]
    assert len(leaves) == math.ceil(552 / 16) and all(len(s.nodes) <= 16 for s in leaves)
    # the machine lists as their traces publish them (rows from each README)
    spec = tmp_path / "pai_machine_spec.csv"
    spec.write_text("82e5af3cd5c4af3f56c62c54,T4,96,512,2\nm2,V100,96,512,8\nm3,V100,96,512,8\n")
    pai = build("pai-2020", machines=str(spec), oversubscription=2)
    assert (len(pai), pai.gpu_count) == (3, 18)
    assert pai.cost == {"oversubscription": {"NET_L1": 2, "NET_L2": 2}}
    nodes = tmp_path / "openb_node_list_gpu_node.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0228,128000,786432,8,G3\n"
                     "openb-node-0229,96000,786432,8,V100M32\nopenb-node-0227,32000,262144,0,\n")
    assert build("alibaba-2023", machines=str(nodes)).gpu_count == 16
    gpus = tmp_path / "cluster_gpu_number.csv"
    gpus.write_text("date,vchbv,total\n2020-09-01,64,1144\n2020-09-02,64,1100\n")
    assert build("helios", machines=str(gpus)).gpu_count == 1144
    with pytest.raises(SlurmtopoError, match="needs --machines"):
        build("pai-2020")
    bad = tmp_path / "bad.csv"
    bad.write_text("m1,T4,96,512,two\n")
    with pytest.raises(SlurmtopoError, match="line 1: cap_gpu 'two'"):
        build("pai-2020", machines=str(bad))


def test_inventory_synthetic_command(tmp_path):
    out = tmp_path / "nvl.yaml"
    code, _, err = run_cli(["inventory", "synthetic", "nvl72", "--racks", "2", "-o", str(out)])
    assert code == 0, err
    assert "36 nodes, 144 GPUs" in err
    from slurmtopo.api import load_cluster

    inv = load_cluster(str(out))
    assert len(inv) == 36 and inv.fabric.block_sizes == (18, 36)
    code, _, err = run_cli(["inventory", "synthetic", "nvl72"])
    one_line_error(code, err, "--racks")


def test_replay_on_racks_reports_them(tmp_path, nvl):
    """A replay on NVL72 racks: topology/block for Slurm and slurmtopo,
    the racks' table and the failure table."""
    import json

    inv_path = tmp_path / "nvl.yaml"
    from slurmtopo.inventory.schema import dump_inventory

    inv_path.write_text(dump_inventory(nvl))
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,gpu_num,submit_time,duration\n" + "".join(
        f"j{i},{g},{i * 60},{600 + 30 * i}\n" for i, g in enumerate([4, 8, 72, 4, 16, 64, 4] * 4)))
    argv = ["simulate", "--inventory", str(inv_path), "--trace", str(trace), "--workers", "1",
            "--policy", "slurm:topology=block", "--policy", "slurm:topology=block,segment=4",
            "--policy", "slurmtopo:topology=block",
            "--policy", "daemon:wait=600,level=nvlink-domain,pack=domains"]
    code, out, err = run_cli(argv + ["--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["racks"]["count"] == 4 and doc["racks"]["trays"] == 18
    for p in doc["policies"]:
        r = p["racks"]
        assert 0 <= r["whole_free_mean"] <= 4 and 0 <= r["partly_free_mean"] <= 4
        assert all(v >= 0 for v in r["unusable_trays_mean"].values())
    code, out, err = run_cli(argv)
    assert "free trays no --segment=S job can use" in out and "usable share of a 18-tray" in out
    # on an inventory with blocks, slurm and slurmtopo run topology/block unless told
    code, out, err = run_cli(["simulate", "--inventory", str(inv_path), "--trace", str(trace),
                              "--policy", "slurm", "--policy", "slurm:topology=block",
                              "--policy", "slurmtopo", "--policy", "slurmtopo:topology=block",
                              "--json", "--workers", "1", "--contention", "off"])
    assert code == 0, err
    pols = json.loads(out)["policies"]
    strip = [{k: v for k, v in p.items() if k not in ("policy", "options")} for p in pols]
    assert strip[0] == strip[1] and strip[2] == strip[3]
