"""rankmap.json / CSV shape and the per-rank environment."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo import api
from slurmtopo.binding.replan import fill_placement
from slurmtopo.cli import cli
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Placement, RankSlot
from slurmtopo.job.groups import Layout, build_groups
from slurmtopo.plan.rankmap import (check_placement, dumps_rankmap, env_json, nccl_env,
                                    placement_from_dict, rail_aligned, rankmap_csv, rankmap_dict,
                                    rankmap_json, visible_devices)
from tests.rankenv import env_document, rank_env

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"


@pytest.fixture(scope="module")
def h100():
    return api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))


@pytest.fixture(scope="module")
def a6000():
    return api.load_cluster(str(EXAMPLES / "a6000-4node-pcie.yaml"))


def _p(inv, host_gpus, **lay):
    return fill_placement(inv, host_gpus, Layout(**lay).resolved())


def test_rankmap_json_shape(h100):
    lay = Layout(tp=4, pp=2, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", range(8)), ("gpu03", range(8))], lay)
    d = json.loads(dumps_rankmap(rankmap_dict(p, lay)))
    assert d["world_size"] == 16
    assert d["hosts"] == ["gpu01", "gpu03"]
    assert len(d["ranks"]) == 16
    for i, r in enumerate(d["ranks"]):
        assert {"rank", "host", "gpu", "local_rank", "nics", "cpus"} <= set(r)
        assert r["rank"] == i
        assert isinstance(r["nics"], list) and isinstance(r["cpus"], str)
    assert d["ranks"][9] == {"rank": 9, "host": "gpu03", "gpu": 1, "local_rank": 1,
                             "node_rank": 1, "local_world_size": 8, "nics": ["mlx5_1"],
                             "cpus": "0-55,112-167", "numa_node": 0}
    assert d["layout"]["tp"] == 4 and d["layout"]["order"] == "tp-cp-ep-dp-pp"


def test_groups_same_as_groups_command(h100):
    """`groups` in rankmap.json is exactly what `slurmtopo groups --json` prints."""
    lay = Layout(tp=2, pp=2, dp=4).resolved()
    p = fill_placement(h100, [("gpu01", range(8)), ("gpu02", range(8))], lay)
    d = json.loads(dumps_rankmap(rankmap_dict(p, lay)))
    out = CliRunner().invoke(cli, ["groups", "--tp", "2", "--pp", "2", "--dp", "4", "--json"])
    assert out.exit_code == 0, out.output
    assert d["groups"] == json.loads(out.output)


def test_dumps_is_one_rank_per_line(h100):
    p = _p(h100, [("gpu01", range(4))], tp=4)
    text = dumps_rankmap(rankmap_dict(p))
    rank_lines = [l for l in text.splitlines() if l.strip().startswith('{"rank"')]
    assert len(rank_lines) == 4


def test_roundtrip(h100):
    lay = Layout(tp=2, dp=3).resolved()
    p = fill_placement(h100, [("gpu04", [7, 5]), ("gpu02", [0, 1, 2, 3])], lay)
    back = placement_from_dict(json.loads(dumps_rankmap(rankmap_dict(p, lay))))
    assert back.slots == p.slots and back.hosts == p.hosts and back.groups == p.groups


def test_csv_shape(h100):
    lay = Layout(tp=2, pp=2, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", range(4)), ("gpu02", range(4))], lay)
    rows = list(csv.DictReader(io.StringIO(rankmap_csv(p))))
    assert len(rows) == 8
    assert list(rows[0])[:9] == ["rank", "host", "node_rank", "gpu", "local_rank",
                                 "local_world_size", "numa_node", "nics", "cpus"]
    groups = build_groups(lay)
    for kind in groups:
        for i, g in enumerate(groups[kind]):
            for r in g:
                assert rows[r][f"{kind}_group"] == str(i)
    assert rows[5]["host"] == "gpu02" and rows[5]["local_rank"] == "1"


def test_check_placement_errors(h100):
    slots = (RankSlot(0, "a", 0, 0), RankSlot(1, "a", 0, 1))
    with pytest.raises(SlurmtopoError, match="share a GPU"):
        check_placement(Placement(slots=slots, groups={}, hosts=("a",)))
    slots = (RankSlot(0, "a", 0, 0), RankSlot(1, "a", 1, 2))
    with pytest.raises(SlurmtopoError, match="local ranks"):
        check_placement(Placement(slots=slots, groups={}, hosts=("a",)))
    slots = (RankSlot(1, "a", 0, 0),)
    with pytest.raises(SlurmtopoError, match="ranks must be"):
        check_placement(Placement(slots=slots, groups={}, hosts=("a",)))
    with pytest.raises(SlurmtopoError, match="malformed"):
        placement_from_dict({"ranks": [{"rank": 0}]})


def test_visible_devices():
    assert visible_devices([4, 5], [4, 5], constrained=False) == "4,5"
    assert visible_devices([4, 5], [4, 5], constrained=True) == "0,1"
    # local rank order is kept; numbering follows PCI order of the allocation
    assert visible_devices([7, 2], [2, 5, 7], constrained=True) == "2,0"
    assert visible_devices([7, 2], None, constrained=True) == "1,0"
    with pytest.raises(SlurmtopoError, match="not in the allocation"):
        visible_devices([3], [4, 5], constrained=True)


@given(st.sets(st.integers(0, 15), min_size=1), st.data())
@settings(max_examples=60, deadline=None)
def test_visible_devices_property(alloc, data):
    """Under the cgroup, device i of the list is the i-th planned GPU: the
    index into the allocation sorted by NVML index."""
    used = data.draw(st.permutations(sorted(alloc)))[:data.draw(st.integers(1, len(alloc)))]
    cvd = [int(x) for x in visible_devices(used, alloc, True).split(",")]
    assert [sorted(alloc)[i] for i in cvd] == list(used)
    assert visible_devices(used, alloc, False) == ",".join(map(str, used))


def test_rank_env(h100):
    p = _p(h100, [("gpu01", [4, 5]), ("gpu02", [0, 1])], tp=2, dp=2)
    env = rank_env(p, 3, allocated=[0, 1, 2], constrained=True)
    assert env["RANK"] == "3" and env["LOCAL_RANK"] == "1" and env["WORLD_SIZE"] == "4"
    assert env["LOCAL_WORLD_SIZE"] == "2" and env["NODE_RANK"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["SLURMTOPO_GPU"] == "1" and env["SLURMTOPO_NICS"] == "mlx5_1"
    assert rank_env(p, 0)["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_nccl_env_rails_and_cross_nic(h100):
    p = _p(h100, [("gpu01", range(8)), ("gpu02", range(8))], tp=8, dp=2)
    env = nccl_env(h100, p)
    assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert env["NCCL_CROSS_NIC"] == "0"  # same GPUs, same rails everywhere
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker"  # presets know no netdevs
    assert rail_aligned(p)
    q = _p(h100, [("gpu01", [0, 1]), ("gpu02", [2, 3])], tp=2, dp=2)
    assert not rail_aligned(q) and "NCCL_CROSS_NIC" not in nccl_env(h100, q)
    assert nccl_env(h100, q, socket_ifname="ib0")["NCCL_SOCKET_IFNAME"] == "ib0"


def test_nccl_env_netdevs_from_inventory(a6000):
    p = _p(a6000, [("ws1", range(8))], tp=8)
    env = nccl_env(a6000, p)
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert env["NCCL_SOCKET_IFNAME"] == "=ens1f0np0,ens2f0np0"
    assert "NCCL_CROSS_NIC" not in env  # one host


def test_env_document(h100):
    p = _p(h100, [("gpu01", range(2))], tp=2)
    doc = env_document(p, h100, 12345)
    assert doc["job"]["MASTER_ADDR"] == "gpu01" and doc["job"]["MASTER_PORT"] == "12345"
    assert [r["RANK"] for r in doc["ranks"]] == ["0", "1"]
    json.dumps(doc)


def _odd_placement():
    """Hosts and NICs that JSON must escape, ranks with no NICs, no CPUs or
    no NUMA node, and hosts in an order other than their names'."""
    layout = Layout(tp=2, dp=3).resolved()
    hosts = ["gpu-\u00e9\"1", "gpu\\2", "a\u8bad\u7ec3"]
    slots = tuple(RankSlot(rank=r, host=hosts[r // 2], gpu=(r % 2) * 3, local_rank=r % 2,
                           nics=(("mlx5_\"0", "ib\u00e91") if r % 3 else ()),
                           cpus=(tuple(range(r, r + 4)) if r != 4 else ()),
                           numa_node=(None if r == 1 else r % 2))
                  for r in range(6))
    return Placement(slots=slots, groups=dict(build_groups(layout)), hosts=tuple(hosts),
                     notes=("a note",)), layout


def test_fast_writers_equal_the_documents(h100):
    """rankmap_json and env_json write, byte for byte, what the per-rank
    dicts encode to, escapes and absent values included."""
    odd, odd_layout = _odd_placement()
    big = _p(h100, [(h, range(8)) for h in ("gpu01", "gpu02", "gpu03", "gpu04")], tp=8, dp=4)
    for p, lay in ((odd, odd_layout), (big, Layout(tp=8, dp=4).resolved())):
        for extra in (None, {"replanned": True, "allocation": {"x": "0-3"}}):
            assert rankmap_json(p, lay, extra) == dumps_rankmap(rankmap_dict(p, lay, extra))
        assert rankmap_json(p) == dumps_rankmap(rankmap_dict(p))
        for inv, port, ifname in ((h100, 29500, None), (None, "from SLURM_JOB_ID", "eth0")):
            assert env_json(p, inv, port, ifname) == \
                dumps_rankmap(env_document(p, inv, port, ifname))
    text = rankmap_json(odd, odd_layout)
    back = json.loads(text)
    assert back["hosts"] == list(odd.hosts) and back["ranks"][0]["nics"] == []
    assert back["ranks"][1]["nics"] == ["mlx5_\"0", "ib\u00e91"]
    assert "numa_node" not in back["ranks"][1] and back["ranks"][4]["cpus"] == ""


def _csv_by_the_writer(p: Placement) -> str:
    """rankmap.csv as csv's writer writes the rows (the reference)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    kinds = list(p.groups)
    w.writerow(["rank", "host", "node_rank", "gpu", "local_rank", "local_world_size",
                "numa_node", "nics", "cpus"] + [f"{k}_group" for k in kinds])
    index = {k: {r: i for i, g in enumerate(p.groups[k]) for r in g} for k in kinds}
    for r in rankmap_dict(p)["ranks"]:
        w.writerow([r["rank"], r["host"], r["node_rank"], r["gpu"], r["local_rank"],
                    r["local_world_size"], r.get("numa_node", ""), " ".join(r["nics"]),
                    r["cpus"]] + [index[k][r["rank"]] for k in kinds])
    return buf.getvalue()


def test_fast_csv_equals_the_writer(h100):
    """rankmap_csv writes, byte for byte, what csv's writer makes of the
    rows: quotes, commas and line breaks in hosts and NIC names quoted, a
    rank with no NICs, CPUs or NUMA node an empty cell."""
    odd, _ = _odd_placement()
    hosts = ["gpu,1", "gpu\n2", "a\"b"]
    odd2 = Placement(slots=tuple(s._replace(host=hosts[s.rank // 2]) for s in odd.slots),
                     groups=odd.groups, hosts=tuple(hosts))
    big = _p(h100, [(h, range(8)) for h in ("gpu01", "gpu02", "gpu03", "gpu04")], tp=8, dp=4)
    for p in (odd, odd2, big):
        assert rankmap_csv(p) == _csv_by_the_writer(p)
    assert '"gpu,1"' in rankmap_csv(odd2)


NVL = Path(__file__).resolve().parent / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml"


def test_mnnvl_where_hosts_share_an_nvlink_domain():
    """env.rst: MNNVL needs CUMEM; 2 uses it where it works and never fails."""
    nvl = api.load_cluster(str(NVL))  # node[1-2] one NVLink domain, node[3-4] another
    same = nccl_env(nvl, _p(nvl, [("node1", range(4)), ("node2", range(4))], tp=4, dp=2))
    assert same["NCCL_MNNVL_ENABLE"] == "2" and same["NCCL_CUMEM_ENABLE"] == "1"
    apart = nccl_env(nvl, _p(nvl, [("node1", range(4)), ("node3", range(4))], tp=4, dp=2))
    assert apart["NCCL_MNNVL_ENABLE"] == "0" and "NCCL_CUMEM_ENABLE" not in apart


def test_no_mnnvl_variables_without_nvlink_domains(h100):
    env = nccl_env(h100, _p(h100, [("gpu01", range(8)), ("gpu02", range(8))], tp=8, dp=2))
    assert "NCCL_MNNVL_ENABLE" not in env and "NCCL_CUMEM_ENABLE" not in env


def test_netdevs_policy_one_nic_per_gpu_when_rail_aligned(h100):
    p = _p(h100, [("gpu01", range(8)), ("gpu02", range(8))], tp=8, dp=2)
    assert nccl_env(h100, p)["NCCL_NETDEVS_POLICY"] == "MAX:1"  # 8 GPUs, 8 rails
    q = _p(h100, [("gpu01", [0, 1]), ("gpu02", [2, 3])], tp=2, dp=2)
    assert "NCCL_NETDEVS_POLICY" not in nccl_env(h100, q)  # not rail-aligned


def test_cross_nic_from_the_inventorys_rail_wiring(h100):
    # the same nodes on a rail-optimised fabric: NIC r of every host on
    # rail leaf r (each host under 8 leaves). A job whose hosts run
    # different local GPUs (not rail-aligned) still gets NCCL_CROSS_NIC=0:
    # the wiring, not the plan, says the rails meet only at the top
    from dataclasses import replace as dc_replace

    from slurmtopo.inventory.model import Fabric, Switch
    from slurmtopo.inventory.topology import rail_optimised

    hosts = tuple(h100.nodes)
    rails = tuple(Switch(name=f"rail{r}", nodes=hosts) for r in range(8))
    wired = dc_replace(h100, fabric=Fabric(switches=rails + (
        Switch(name="spine", switches=tuple(s.name for s in rails)),)))
    assert rail_optimised(wired, hosts) is True
    assert rail_optimised(h100, hosts) is None  # one leaf a host: cannot tell
    q = _p(wired, [("gpu01", [0, 1]), ("gpu02", [2, 3])], tp=2, dp=2)
    assert not rail_aligned(q)
    assert nccl_env(wired, q)["NCCL_CROSS_NIC"] == "0"
    assert "NCCL_CROSS_NIC" not in nccl_env(h100, q)
    # a leaf shared irregularly (rail0 holds one host less): no answer
    odd = dc_replace(wired, fabric=Fabric(switches=(Switch(name="rail0", nodes=hosts[1:]),)
                                          + rails[1:]))
    assert rail_optimised(odd, hosts) is None


def _trays(a, na: int, b, nb: int):
    """GB200 trays a0.. in NVLink domain ``a`` and b0.. in ``b``, one rank
    each: (inventory, placement, hosts)."""
    from slurmtopo.inventory.model import Inventory, Node
    from slurmtopo.inventory.presets import preset

    hw = preset("gb200-nvl72-tray")
    nodes = {f"a{i}": Node(f"a{i}", hw, nvlink_domain=a) for i in range(na)}
    nodes.update({f"b{i}": Node(f"b{i}", hw, nvlink_domain=b) for i in range(nb)})
    hosts = list(nodes)
    p = Placement(slots=tuple(RankSlot(rank=k, host=h, gpu=0, local_rank=0)
                              for k, h in enumerate(hosts)), groups={}, hosts=tuple(hosts))
    return Inventory(nodes=nodes), p, hosts


def test_mnnvl_clique_ids_split_a_clique_over_parts_only():
    # two racks of 4 trays; the job's 6 hosts in two IMEX parts (segments
    # with a channel each): rack 1's trays fall in both parts, so each part
    # gets its own clique id above the UUID's ids; rack 2 lies in one part
    from slurmtopo.inventory.model import NvlinkDomain
    from slurmtopo.plan.rankmap import mnnvl_clique_ids

    inv, p, hosts = _trays(NvlinkDomain("uuid-1", 3), 4, NvlinkDomain("uuid-2", 1), 2)
    got = mnnvl_clique_ids(inv, p, [["a0", "a1"], ["a2", "a3", "b0", "b1"]])
    assert got == {"a0": "4", "a1": "4", "a2": "5", "a3": "5"}
    assert mnnvl_clique_ids(inv, p, [hosts]) == {}  # one part: NCCL's own cliques


def test_mnnvl_clique_ids_stay_32_bit_and_unique():
    # NCCL reads the id as a 32-bit integer (env.rst): past 2^31-1 the ids
    # wrap to the lowest ones no host of the job has, never colliding with a
    # clique kept whole (uuid-1's clique 0 here)
    from slurmtopo.inventory.model import NvlinkDomain
    from slurmtopo.plan.rankmap import CLIQUE_ID_MAX, mnnvl_clique_ids

    inv, p, _ = _trays(NvlinkDomain("uuid-1", CLIQUE_ID_MAX), 3, NvlinkDomain("uuid-1", 0), 2)
    got = mnnvl_clique_ids(inv, p, [["a0"], ["a1"], ["a2", "b0", "b1"]])
    assert got == {"a0": "1", "a1": "2", "a2": "3"}
