"""slurm.conf reading (NodeName lines) and Slurm's key=value tokenizer."""
from __future__ import annotations

import textwrap

import pytest

from slurmtopo.slurmfmt.gres_strings import gres_by_type
from slurmtopo.slurmfmt.slurm_conf import conf_lines, parse_pairs, read_slurm_conf
from slurmtopo.errors import InventoryError


def test_nodes_defaults_hostnames_gres_include(tmp_path):
    (tmp_path / "nodes.conf").write_text("NodeName=cpu[01-02] CPUs=64\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(textwrap.dedent("""\
        ClusterName=test   # a comment
        TopologyPlugin=topology/tree
        NodeName=DEFAULT Gres=gpu:h100:8 RealMemory=1000
        NodeName=gpu[001-003] Sockets=2 \\
            CoresPerSocket=48
        NodeName=gpu004 NodeHostname=host-004 Gres=gpu:4
        NodeName=login1 Gres=""
        Include nodes.conf
        PartitionName=gpu Nodes=gpu[001-004] Default=YES
        """))
    sc = read_slurm_conf(conf)
    assert sc.node_names() == ["gpu001", "gpu002", "gpu003", "gpu004", "login1", "cpu01", "cpu02"]
    assert sc.nodes["gpu002"]["gres"] == "gpu:h100:8"
    assert sc.nodes["gpu002"]["corespersocket"] == "48"
    assert sc.hostnames == {"host-004": "gpu004"}
    assert sc.topology_plugin == "topology/tree"
    assert [n for n in sc.node_names() if gres_by_type(sc.gres(n))] == \
        ["gpu001", "gpu002", "gpu003", "gpu004"]


@pytest.mark.parametrize("text,line,words", [
    ("NodeName=gpu[1-\n", 1, "bad NodeName"),
    ("ClusterName=x\nNodeName=a[1-2] NodeHostname=h1\n", 2, "NodeHostname lists 1 hosts"),
    ("NodeName=a1 oops\n", 1, "expected Key=Value"),
    ("Include missing-*.conf\n", 1, "no file matches"),
    ("ClusterName=x\n", None, "no NodeName= lines"),
    ("NodeName=a1 Sockets=two\n", 1, "Sockets='two' is not a number"),
    ("NodeName=DEFAULT CoresPerSocket=70000\nNodeName=a1\n", 2, "CoresPerSocket='70000'"),
])
def test_slurm_conf_errors(tmp_path, text, line, words):
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    with pytest.raises(InventoryError) as exc:
        read_slurm_conf(conf)
    msg = exc.value.render()
    assert words in msg
    assert msg.startswith(f"{conf}:{line}:" if line else f"{conf}:")


@pytest.mark.parametrize("line, layout", [
    ("Sockets=2 CoresPerSocket=8 ThreadsPerCore=2", (2, 8, 2)),
    ("CPUs=224", (224, 1, 1)),                       # Sockets inferred from CPUs
    ("CPUs=224 CoresPerSocket=56 ThreadsPerCore=2", (2, 56, 2)),
    ("CPUs=30 CoresPerSocket=8", (1, 8, 1)),          # 30 / 8 does not divide: Boards
    ("Boards=2 SocketsPerBoard=2 CoresPerSocket=4", (4, 4, 1)),
    ("Sockets=3 SocketsPerBoard=2 CoresPerSocket=4", (2, 4, 1)),  # SocketsPerBoard wins
    ("Sockets=0 CoresPerSocket=0 ThreadsPerCore=0", (1, 1, 1)),   # zero reads as one
    ("RealMemory=1000", None),                        # no layout declared
])
def test_declared_cpu_layout_as_slurmctld_infers_it(line, layout):
    from slurmtopo.slurmfmt.slurm_conf import parse_slurm_conf

    got = parse_slurm_conf(f"NodeName=a[1-2] {line}\n").cpu_layout("a2")
    assert (got.sockets, got.cores_per_socket, got.threads_per_core) == layout if layout \
        else got is None


def test_tokenizer_like_slurm():
    assert parse_pairs('A=1 B="two words"  c=x[1-3]') == [("A", "1"), ("B", "two words"),
                                                          ("c", "x[1-3]")]
    lines = list(conf_lines("A=x\\#y # a comment\nB=2\\\n C=3\n", "f"))
    assert lines[0].pairs == (("A", "x#y"),)
    assert lines[0].comment == "a comment"
    assert [cl.line for cl in lines] == [1, 2] and lines[1].pairs == (("B", "2"), ("C", "3"))
    with pytest.raises(ValueError, match="operator"):
        parse_pairs("A+=1")
