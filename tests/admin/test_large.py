"""A generated fabric of 2,000 hosts and 100+ switches parses, derives,
writes and reads back (no timing asserted; it takes a few seconds)."""
from __future__ import annotations

from slurmtopo.slurmfmt.checks import check_blocks, check_text, check_tree
from slurmtopo.admin.switch_tree import derive_fabric
from slurmtopo.admin.generate import default_block_sizes, leaf_blocks
from bench.ibgen import FatTreeSpec, generate
from slurmtopo.admin.ibnetdiscover import parse_ibnetdiscover
from slurmtopo.slurmfmt.topology_conf import parse_topology_conf
from slurmtopo.slurmfmt.topology_files import render
from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml
from slurmtopo.inventory.model import Fabric

from .conftest import of_kind, run_main

SPEC = FatTreeSpec(hosts=2000, hosts_per_unit=32, rails=4, spines=4, units_per_pod=8, cores=4,
                   sharp=True, storage_hca=True, unnamed_cas=3, extra_hosts=("localhost", "ufm01"),
                   dead_hcas=((5, 1), (77, 3)))


def test_2000_hosts(tmp_path, capsys):
    text = generate(SPEC)
    ib = parse_ibnetdiscover(text, "big.topo")
    assert len(of_kind(ib, "switch")) > 300  # 252 leaves, 63 storage leaves, spines, cores
    d = derive_fabric(ib, None)
    hosts = {h for s in d.fabric.switches for h in s.nodes}
    # no node list: every named host but those named as management hosts
    assert len(hosts) == 2000 and "ufm01" not in hosts
    from slurmtopo.admin.switch_tree import HostSelection
    compute = {f"gpu{i:04d}" for i in range(1, 2001)}
    d = derive_fabric(ib, HostSelection(nodes=compute, rails={0, 1, 2, 3}))
    leaves = [s for s in d.fabric.switches if s.level == 0]
    assert len(leaves) == 63 and sum(len(s.nodes) for s in leaves) == 2000
    assert max(s.level for s in d.fabric.switches) == 2
    assert check_tree(d.fabric, sorted(compute)) == []
    tree = render(d.fabric, "tree")
    assert check_text(tree, "topology.conf") == []
    back = parse_topology_conf(tree)
    assert [(s.name, s.nodes, s.switches) for s in back.switches] == \
        [(s.name, s.nodes, s.switches) for s in d.fabric.switches]
    blocks = leaf_blocks(d.fabric)
    bf = Fabric(blocks=blocks, block_sizes=default_block_sizes(blocks))
    assert check_blocks(bf, sorted(compute)) == []
    assert parse_topology_conf(render(bf, "block")).blocks == bf.blocks
    both = Fabric(switches=d.fabric.switches, blocks=blocks, block_sizes=bf.block_sizes)
    topos = parse_topology_yaml(render(both, "yaml"))
    assert [t[0] for t in topos] == ["tree", "block"]
    # and through the command, twice: the second run changes nothing
    (tmp_path / "big.topo").write_text(text)
    slurm = tmp_path / "slurm.conf"
    slurm.write_text("NodeName=gpu[0001-2000] Gres=gpu:8\n")
    out = tmp_path / "topology.conf"
    args = ["topology", "generate", "--ibnetdiscover", str(tmp_path / "big.topo"), "--hca",
            "mlx5_[0-3]", "--slurm-conf", str(slurm), "-o", str(out)]
    rc, _, err = run_main(args, capsys)
    assert rc == 0, err
    rc, _, err = run_main(args + ["--diff"], capsys)
    assert rc == 0 and "no change" in err
