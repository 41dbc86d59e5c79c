"""Files written by `slurmtopo topology generate` / `gres generate` are
loaded by a real slurmctld/slurmd (the dev cluster: Slurm 22.05 on Debian
12), the topology through `--reconfigure` itself."""
from __future__ import annotations

import json

import pytest

from tests.integration.helpers import node_records, scontrol_topology

from bench.ibgen import FatTreeSpec, generate
from slurmtopo.inventory import node_report
from slurmtopo.model import Gpu, Hardware, Node

pytestmark = pytest.mark.integration


def _main(args, capsys):
    from slurmtopo.cli import main
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_generated_topology_is_loaded_by_reconfigure(devcluster, tmp_path, monkeypatch, capsys):
    fabric = tmp_path / "fabric.topo"
    fabric.write_text(generate(FatTreeSpec(hosts=4, hosts_per_unit=2, rails=2, spines=2,
                                           links_per_uplink=2, host_format="node{}", sharp=True,
                                           extra_hosts=("mgmt01",))))
    for key, value in devcluster.env.items():
        monkeypatch.setenv(key, value)
    target = devcluster.dir / "etc" / "topology.conf"
    try:
        rc, _, err = _main(["topology", "generate", "--ibnetdiscover", str(fabric),
                            "--slurm-conf", str(devcluster.conf), "-o", str(target),
                            "--reconfigure"], capsys)
        assert rc == 0, err
        assert "ran: scontrol reconfigure" in err
        topo = scontrol_topology(devcluster)
        assert set(topo) == {"su001", "su002", "spine"}
        assert topo["su001"]["Nodes"] == "node[1-2]" and topo["su002"]["Nodes"] == "node[3-4]"
        assert topo["spine"]["Switches"] == "su[001-002]" and topo["spine"]["Level"] == "1"
        # Slurm places a --switches=1 job of two nodes on one unit
        job = devcluster.sbatch("-N2", "--switches=1", wrap="true")
        assert devcluster.wait_job(job, timeout=30) == "COMPLETED"
        nodes = devcluster.job(job)["NodeList"]
        assert nodes in ("node[1-2]", "node[3-4]"), nodes
    finally:
        devcluster.reset()


def test_generated_gres_conf_is_loaded(devcluster, tmp_path, capsys):
    hw = Hardware(gpus=tuple(Gpu(index=i, model="NVIDIA H100 80GB HBM3",
                                 cpus=tuple(range(0, 8)) if i < 4 else tuple(range(8, 16)))
                             for i in range(8)),
                  links=tuple(tuple("X" if i == j else "NV18" for j in range(8))
                              for i in range(8)), nvswitch=True)
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in devcluster.nodes:
        (reports / f"{name}.yaml").write_text(node_report(Node(name, hw), {"source": "test"}))
    gres = tmp_path / "gres.conf"
    rc, _, err = _main(["gres", "generate", "--reports", str(reports), "--slurm-conf",
                        str(devcluster.conf), "-o", str(gres)], capsys)
    assert rc == 0, err
    assert gres.read_text().count("NodeName=node[1-4] Name=gpu") == 8
    try:
        devcluster.reconfigure(gres_conf=str(gres))
        nodes = node_records(devcluster)
        # slurm.conf says Gres=gpu:8 (untyped); the typed lines fit it, Cores= taken
        assert {n["gres"] for n in nodes} == {"gpu:8(S:0-1)"}
        job = devcluster.sbatch("--gres=gpu:8", wrap="true")
        assert devcluster.wait_job(job, timeout=30) == "COMPLETED"
    finally:
        devcluster.reset()
