"""Files written by `slurmtopo topology generate` / `gres generate` are
loaded by a real slurmctld/slurmd (the dev cluster: Slurm 22.05 on Debian
12), the topology through `--reconfigure` itself."""
from __future__ import annotations

import json

import pytest

from tests.integration.helpers import DevClusterError, it_version, node_records, scontrol_topology

from bench.ibgen import FatTreeSpec, generate
from slurmtopo.inventory.model import Gpu, Hardware, Node
from slurmtopo.inventory.schema import node_report

pytestmark = pytest.mark.integration


def _main(args, capsys):
    from slurmtopo.cli import main
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def _fabric_file(tmp_path) -> str:
    """An ibnetdiscover dump of the dev cluster's 4 nodes: 2 units of 2."""
    fabric = tmp_path / "fabric.topo"
    fabric.write_text(generate(FatTreeSpec(hosts=4, hosts_per_unit=2, rails=2, spines=2,
                                           links_per_uplink=2, host_format="node{}", sharp=True,
                                           extra_hosts=("mgmt01",))))
    return str(fabric)


def test_generated_topology_is_loaded_by_reconfigure(devcluster, tmp_path, monkeypatch, capsys):
    fabric = _fabric_file(tmp_path)
    for key, value in devcluster.env.items():
        monkeypatch.setenv(key, value)
    target = devcluster.dir / "etc" / "topology.conf"
    try:
        rc, _, err = _main(["topology", "generate", "--ibnetdiscover", fabric,
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


def _smi_text(affinity_low: str, affinity_high: str) -> str:
    """``nvidia-smi topo -m`` of an 8-GPU NVSwitch node: GPUs 0-3 near
    ``affinity_low`` (NUMA 0), 4-7 near ``affinity_high`` (NUMA 1)."""
    rows = ["\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity"]
    for i in range(8):
        cells = "\t".join("X" if i == j else "NV18" for j in range(8))
        rows.append(f"GPU{i}\t{cells}\t" + (f"{affinity_low}\t0" if i < 4
                                             else f"{affinity_high}\t1"))
    return "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n"


def _agent_reports(devcluster, tmp_path, capsys, smi_text: str, *agent_args: str):
    """One report per dev-cluster node, as `agent discover --from-smi` writes it."""
    smi = tmp_path / "topo.txt"
    smi.write_text(smi_text)
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in devcluster.nodes:
        rc, _, err = _main(["agent", "discover", "--from-smi", str(smi), "--node-name", name,
                            "-o", str(reports / f"{name}.yaml"), *agent_args], capsys)
        assert rc == 0, err
    return reports


def _no_node_invalid(devcluster):
    states = {n["name"]: n["state"] for n in node_records(devcluster)}
    assert not [n for n, s in states.items() if "inval" in s or "drain" in s or "down" in s], \
        states


def test_gres_conf_from_agent_reports_keeps_every_node_valid(devcluster, tmp_path, capsys):
    """Reports of 2 x 8-core SMT machines (CPU ids 0-7,16-23 per socket, as
    Linux numbers them): gres.conf gets Slurm's core indices of the layout
    slurm.conf declares (2 sockets x 8 cores), slurmctld takes it after a
    restart, no node goes INVAL or drained, and a job gets its 8 GPUs."""
    reports = _agent_reports(devcluster, tmp_path, capsys, _smi_text("0-7,16-23", "8-15,24-31"),
                             "--threads-per-core", "2")
    gres = tmp_path / "gres.conf"
    rc, _, err = _main(["gres", "generate", "--reports", str(reports), "--slurm-conf",
                        str(devcluster.conf), "-o", str(gres)], capsys)
    assert rc == 0, err
    lines = [ln for ln in gres.read_text().splitlines() if ln.startswith("NodeName=")]
    assert sorted({ln.split("Cores=")[1].split()[0] for ln in lines}) == ["0-7", "8-15"]
    try:
        devcluster.reconfigure(gres_conf=str(gres))
        _no_node_invalid(devcluster)
        assert {n["gres"] for n in node_records(devcluster)} == {"gpu:8(S:0-1)"}
        job = devcluster.sbatch("--gres=gpu:8", wrap="true")
        assert devcluster.wait_job(job, timeout=30) == "COMPLETED"
    finally:
        devcluster.reset()


def test_gres_conf_for_another_machine_is_refused_before_writing(devcluster, tmp_path, capsys):
    """Reports of 2 x 56-core nodes for a slurm.conf that declares 2 x 8:
    Cores=0-55 made every dev-cluster node INVAL ('invalid GRES core
    specification'). Now nothing is written; were anything written, it is
    installed here, so the test sees what slurmctld makes of it."""
    reports = _agent_reports(devcluster, tmp_path, capsys,
                             _smi_text("0-55,112-167", "56-111,168-223"))
    gres = tmp_path / "gres.conf"
    rc, _, err = _main(["gres", "generate", "--reports", str(reports), "--slurm-conf",
                        str(devcluster.conf), "-o", str(gres)], capsys)
    try:
        if gres.exists():
            devcluster.reconfigure(gres_conf=str(gres))
        _no_node_invalid(devcluster)
        assert rc != 0, err
        last = err.strip().splitlines()[-1]
        assert "node[1-4]" in last and "16 cores" in last and "Cores=0-55" in last, last
        assert not gres.exists()
    finally:
        if gres.exists():
            devcluster.reset()


def test_cores_off_socket_boundaries_are_refused_as_slurm_25_11_drains(devcluster, tmp_path,
                                                                       capsys):
    """GPUs near half a socket (cores 0-3 of 0-7): Slurm 25.11 drains every
    node ("doesn't match socket boundaries"), 22.05 takes it. Refused
    unless --force; what --force writes does what the refusal says."""
    reports = _agent_reports(devcluster, tmp_path, capsys, _smi_text("0-3", "8-15"),
                             "--threads-per-core", "1")
    gres = tmp_path / "gres.conf"
    argv = ["gres", "generate", "--reports", str(reports), "--slurm-conf", str(devcluster.conf),
            "-o", str(gres)]
    rc, _, err = _main(argv, capsys)
    assert rc != 0 and not gres.exists(), err
    assert "socket boundaries" in err and "--force" in err, err
    rc, _, err = _main(argv + ["--force"], capsys)
    assert rc == 0, err
    try:
        try:
            devcluster.reconfigure(gres_conf=str(gres))
            refused = None
        except DevClusterError as exc:
            refused = str(exc)
        if it_version() >= (25, 11):
            assert refused and "socket boundaries" in refused, refused
        else:
            assert refused is None, refused
            _no_node_invalid(devcluster)
    finally:  # drained nodes stay drained with the old file back: resume them
        devcluster.recover()


def test_block_file_for_a_tree_cluster_is_refused_before_writing(devcluster, tmp_path,
                                                                 monkeypatch, capsys):
    """The dev cluster runs topology/tree: a topology/block file made
    slurmctld log fatal: (and --reconfigure then had to put the old file
    back). Now nothing is written and Slurm is never asked; the cluster
    keeps its topology and slurmctld logs no fatal."""
    for key, value in devcluster.env.items():
        monkeypatch.setenv(key, value)
    target = devcluster.dir / "etc" / "topology.conf"
    before, topo_before = target.read_text(), scontrol_topology(devcluster)
    log = devcluster.dir / "log" / "slurmctld.log"
    log_size = log.stat().st_size
    rc, _, err = _main(["topology", "generate", "--ibnetdiscover", _fabric_file(tmp_path),
                        "--format", "block", "--slurm-conf", str(devcluster.conf),
                        "-o", str(target), "--reconfigure"], capsys)
    assert rc != 0, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("slurmtopo: error: not writing topology.conf"), last
    assert "TopologyPlugin=topology/tree" in last and "--format tree" in last, last
    assert "ran: scontrol reconfigure" not in err and "restored" not in err, err
    assert target.read_text() == before
    with open(log, encoding="utf-8", errors="replace") as fh:
        fh.seek(log_size)
        assert "fatal" not in fh.read()
    assert scontrol_topology(devcluster) == topo_before
    _no_node_invalid(devcluster)
