"""The inventory schema: loading, validation errors with file:line, round trips."""
from __future__ import annotations

import glob
import os
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo.errors import InventoryError
from slurmtopo.files.yamlio import parse_text
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import CpuTopology, format_cpulist, parse_cpulist
from slurmtopo.inventory.presets import PRESETS, preset
from slurmtopo.inventory.schema import (dump_inventory, load_inventory, merge_inventories,
                                        node_report, parse_inventory)
from slurmtopo.inventory.state import load_state
from slurmtopo.inventory.topology import nvlink_islands, ring_class

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "etc", "examples")


def write(tmp_path, text, name="inv.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def load_error(tmp_path, text) -> str:
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    msg = info.value.render()
    assert "\n" not in msg
    return msg


# -- examples ------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(p for p in glob.glob(os.path.join(EXAMPLES, "*.yaml"))
                                        if "state" not in os.path.basename(p)))
def test_examples_load_and_round_trip(path):
    inv = load_inventory(path)
    assert len(inv) > 0
    again = parse_inventory(parse_text(dump_inventory(inv)), "<dump>")
    assert list(again.nodes) == list(inv.nodes)
    for name, node in inv.nodes.items():
        assert again.nodes[name].hardware == node.hardware
        assert again.nodes[name].nvlink_domain == node.nvlink_domain
    assert again.fabric == inv.fabric
    # JSON carries the same content
    again_json = parse_inventory(parse_text(dump_inventory(inv, fmt="json")), "<json>")
    assert again_json.fabric == inv.fabric
    assert [n.hardware for n in again_json] == [n.hardware for n in inv]


def test_example_sizes():
    assert load_inventory(os.path.join(EXAMPLES, "h100-4node-2leaf.yaml")).gpu_count == 32
    assert load_inventory(os.path.join(EXAMPLES, "h100-32node-fattree.yaml")).gpu_count == 256
    rack = load_inventory(os.path.join(EXAMPLES, "gb200-nvl72-rack.yaml"))
    assert rack.gpu_count == 72 and rack.fabric.blocks[0].nodes == tuple(rack.nodes)


def test_state_snapshot_places_busy_gpus():
    inv = load_inventory(os.path.join(EXAMPLES, "h100-32node-fattree.yaml"))
    st_ = load_state(os.path.join(EXAMPLES, "h100-32node-state.yaml"), inv)
    assert st_.free_gpus(inv.node("dgx001")) == ()
    assert st_.free_gpus(inv.node("dgx006")) == (4, 5, 6, 7)
    assert st_.free_gpus(inv.node("dgx007")) == (1, 3, 4, 6, 7)
    assert st_.free_gpus(inv.node("dgx010")) == ()  # drained
    assert st_.free_gpus(inv.node("dgx030")) == ()  # down
    assert st_.free_gpus(inv.node("dgx031")) == tuple(range(8))  # not listed = idle


def test_types_share_hardware_object():
    inv = load_inventory(os.path.join(EXAMPLES, "h100-32node-fattree.yaml"))
    hws = {id(n.hardware) for n in inv}
    assert len(hws) == 1


def test_directory_of_reports_merges_with_fabric(tmp_path):
    hw_node = load_inventory(os.path.join(EXAMPLES, "dgx1-v100-pair.yaml")).node("dgx1-1")
    d = tmp_path / "reports"
    d.mkdir()
    from dataclasses import replace
    for name in ("n1", "n2"):
        (d / f"{name}.yaml").write_text(node_report(replace(hw_node, name=name), {"source": "test"}))
    (d / "fabric.yaml").write_text("slurmtopo: fabric\nfabric:\n  switches:\n"
                                   "    - {name: leaf, nodes: 'n[1-2]'}\n")
    inv = load_inventory(str(d))
    assert sorted(inv.nodes) == ["n1", "n2"]
    assert inv.reports["n1"] == {"source": "test"}
    assert inv.fabric.switches[0].nodes == ("n1", "n2")


def test_two_reports_for_one_node_is_an_error(tmp_path):
    hw_node = load_inventory(os.path.join(EXAMPLES, "dgx1-v100-pair.yaml")).node("dgx1-1")
    d = tmp_path / "reports"
    d.mkdir()
    (d / "a.yaml").write_text(node_report(hw_node, {}))
    (d / "b.yaml").write_text(node_report(hw_node, {}))
    with pytest.raises(InventoryError, match="defined in two documents"):
        load_inventory(str(d))


# -- validation: one clear line with file:line -------------------------------------

def test_unknown_key_names_line(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - name: a
            type: hgx-h100-8
            gpu_count: 8
        """)
    assert msg.endswith("unknown key 'gpu_count' in node (allowed: cpu, features, gpus, gres_type, "
                        "links, name, nccl_topo_file, nics, nvlink_domain, nvlink_lane_gbps, "
                        "nvswitch, pcie_gbps, type, virtualised)")
    assert ":4:" in msg


def test_matrix_not_square(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - name: a
            gpus: [{index: 0}, {index: 1}]
            links:
              - "X NV4"
              - "NV4 X PIX"
        """)
    assert ":6:" in msg and "links row 1 has 3 entries for 2 GPUs" in msg


def test_matrix_not_symmetric(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - name: a
            gpus: [{index: 0}, {index: 1}, {index: 2}]
            links:
              - "X   NV4 SYS"
              - "NV4 X   PIX"
              - "SYS PXB X"
        """)
    assert "not symmetric: GPU1-GPU2 is PIX but GPU2-GPU1 is PXB" in msg
    assert ":7:" in msg


def test_bad_link_token(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - name: a
            gpus: [{index: 0}, {index: 1}]
            links: ["X FAST", "FAST X"]
        """)
    assert "unknown link 'FAST'" in msg


def test_gpu_listed_twice(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - name: a
            gpus:
              - {index: 0}
              - {index: 0}
            links: ["X NV1", "NV1 X"]
        """)
    assert ":5:" in msg and "GPU index 0 listed twice" in msg


def test_fabric_names_unknown_node(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - {name: "gpu[1-2]", type: hgx-h100-8}
        fabric:
          switches:
            - {name: leaf1, nodes: "gpu[1-3]"}
        """)
    assert ":5:" in msg and "switch 'leaf1' names node 'gpu3', which is not defined" in msg


def test_fabric_unknown_child_switch_and_loop(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - {name: n1, type: hgx-h100-8}
        fabric:
          switches:
            - {name: leaf1, nodes: n1}
            - {name: spine, switches: "leaf1,leaf9"}
        """)
    assert "child switch 'leaf9', which is not defined" in msg
    msg = load_error(tmp_path, """\
        nodes:
          - {name: n1, type: hgx-h100-8}
        fabric:
          switches:
            - {name: a, nodes: n1, switches: b}
            - {name: b, switches: a}
        """)
    assert "switch loop" in msg


def test_duplicate_node_and_unknown_type(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - {name: "n[1-2]", type: hgx-h100-8}
          - {name: n2, type: hgx-h100-8}
        """)
    assert "node 'n2' defined twice" in msg and ":3:" in msg
    msg = load_error(tmp_path, """\
        nodes:
          - {name: n1, type: hgx-h900}
        """)
    assert "unknown node type 'hgx-h900'" in msg and ":2:" in msg


def test_yaml_syntax_error_and_duplicate_key(tmp_path):
    msg = load_error(tmp_path, "nodes:\n  - {name: n1\n")
    assert msg.startswith(str(tmp_path)) and "invalid YAML" in msg
    msg = load_error(tmp_path, "nodes: []\nnodes: []\n")
    assert "duplicate key 'nodes'" in msg and ":2:" in msg


def test_newer_schema_rejected(tmp_path):
    msg = load_error(tmp_path, "version: 99\nnodes: []\n")
    assert "newer than this slurmtopo understands" in msg


def test_pci_bus_id_stays_a_string(tmp_path):
    path = write(tmp_path, """\
        nodes:
          - name: a
            gpus: [{index: 0, pci_bus_id: 00000000:18:00.0}]
        """)
    assert load_inventory(path).node("a").gpus[0].pci_bus_id == "00000000:18:00.0"


def test_nic_relation_length_checked(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - name: a
            type: pcie-l40s-8
            nics: [{name: mlx5_0, gpu_relation: "PIX PIX"}]
        """)
    assert "gpu_relation has 2 entries for 8 GPUs" in msg


def test_state_errors_name_line(tmp_path):
    inv = load_inventory(os.path.join(EXAMPLES, "h100-4node-2leaf.yaml"))
    p = write(tmp_path, "slurmtopo: state\nnodes:\n  - {name: gpu01, busy_gpus: '7-9'}\n", "s.yaml")
    with pytest.raises(InventoryError, match=r"s.yaml:3: .*busy_gpus names \[8, 9\]"):
        load_state(p, inv)
    p = write(tmp_path, "slurmtopo: state\nnodes:\n  - {name: gpu99}\n", "s2.yaml")
    with pytest.raises(InventoryError, match="s2.yaml:3: node 'gpu99' is not in the inventory"):
        load_state(p, inv)


# -- presets and derived topology -------------------------------------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_consistent(name):
    hw = preset(name)
    n = hw.gpu_count
    assert len(hw.links) == n
    for a in range(n):
        for b in range(n):
            assert hw.links[a][b] == hw.links[b][a]
    for nic in hw.nics:
        assert len(nic.gpu_relation) == n
    if hw.cpu is not None:
        all_cpus = set(hw.cpu.core_of_cpu())
        for g in hw.gpus:
            assert set(g.cpus) <= all_cpus


def test_islands_and_rings():
    assert nvlink_islands(preset("hgx-h100-8")) == (tuple(range(8)),)
    assert nvlink_islands(preset("pcie-a6000-8-nvlink-pairs")) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert len(nvlink_islands(preset("pcie-l40s-8"))) == 8
    dgx1 = preset("dgx1-v100")
    # cube-mesh: 8 GPUs form an NVLink ring although GPU0-GPU5 have no link
    assert dgx1.link(0, 5) == LinkClass.SYS
    assert ring_class(dgx1, tuple(range(8))) == LinkClass.NVLINK
    assert ring_class(dgx1, (0, 5)) == LinkClass.SYS
    a6000 = preset("pcie-a6000-8-nvlink-pairs")
    assert ring_class(a6000, (0, 1)) == LinkClass.NVLINK
    assert ring_class(a6000, (0, 1, 2, 3)) == LinkClass.PXB
    assert ring_class(a6000, (0, 1, 4, 5)) == LinkClass.SYS


def test_cpu_topology_abstract_cores():
    topo = CpuTopology(sockets=2, cores_per_socket=4, threads_per_core=2)
    core = topo.core_of_cpu()
    assert core[0] == 0 and core[8] == 0 and core[7] == 7 and core[15] == 7


@given(st.sets(st.integers(min_value=0, max_value=300), max_size=60))
@settings(max_examples=200)
def test_cpulist_round_trip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


def test_merge_rejects_two_switch_trees(tmp_path):
    a = parse_inventory(parse_text("slurmtopo: fabric\nfabric: {switches: [{name: s1, nodes: n1}]}"), "a")
    b = parse_inventory(parse_text("slurmtopo: fabric\nfabric: {switches: [{name: s2, nodes: n1}]}"), "b")
    with pytest.raises(InventoryError, match="two documents describe switches"):
        merge_inventories([a, b])


def test_wrong_value_type_is_named_plainly(tmp_path):
    msg = load_error(tmp_path, """\
        nodes:
          - {name: b, type: [1]}
        """)
    assert msg.endswith(":2: node: bad 'type' (expected a string, got a list)")


def test_rack_presets_one_line_per_node_range():
    # docs/schema.md's example: a GB300 rack, a P6e-GB200 UltraServer and
    # P6-B200 nodes, one line each; trays of a rack share their domain
    text = ("slurmtopo: inventory\nversion: 1\nnodes:\n"
            "  - {name: 'gb300-r01t[01-18]', type: gb300-nvl72-tray,\n"
            "     nvlink_domain: {cluster_uuid: 7f3c2a10-0000-4000-8000-000000000001, "
            "clique_id: 1}}\n"
            "  - {name: 'p6e-u01i[01-09]', type: aws-p6e-gb200.36xlarge,\n"
            "     nvlink_domain: {cluster_uuid: 0c1d2e3f-0000-4000-8000-0000000000a1, "
            "clique_id: 1}}\n"
            "  - {name: 'p6b[001-004]', type: aws-p6-b200.48xlarge}\n")
    inv = parse_inventory(parse_text(text, "racks.yaml"), "racks.yaml")
    assert len(inv) == 18 + 9 + 4
    racks = {n.nvlink_domain.key for n in inv if n.nvlink_domain is not None}
    assert len(racks) == 2
    gb300 = inv.nodes["gb300-r01t07"].hardware
    assert gb300.gpu_count == 4 and gb300.gpus[0].model == "NVIDIA GB300"
    assert [n.rate_gbps for n in gb300.compute_nics()] == [800] * 4
    p6e = inv.nodes["p6e-u01i03"].hardware
    assert p6e.gpu_count == 4 and {n.link_layer for n in p6e.nics} == {"Ethernet"}
    p6b = inv.nodes["p6b002"].hardware
    assert p6b.gpu_count == 8 and sum(n.rate_gbps for n in p6b.compute_nics()) == 3200
    assert not p6b.virtualised and inv.nodes["p6b002"].nvlink_domain is None


@pytest.mark.parametrize("name,ok", [
    ("mlx5_0", True), ("ibp12s0", True), ("rdmap16s27", True), ("enp1s0f0:1", True),
    ("mlx5_0;reboot", False), ("mlx5 0", False), ("a\nb", False), ("-x", False), ("", False),
])
def test_nic_names_are_plain(tmp_path, name, ok):
    """A NIC's name goes into NCCL_IB_HCA, env.json and every task's
    environment: the kernel's names pass, anything with a separator, a
    blank or a control character is refused at its line."""
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent(f"""\
        slurmtopo: inventory
        version: 1
        node_types:
          t:
            gpus: [{{index: 0, model: H100}}]
            nics: [{{name: {name!r}, rate_gbps: 400}}]
        nodes: [{{name: n1, type: t}}]
        """).replace("'", '"') if "\n" not in name else textwrap.dedent("""\
        slurmtopo: inventory
        version: 1
        node_types:
          t:
            gpus: [{index: 0, model: H100}]
            nics: [{name: "a\\nb", rate_gbps: 400}]
        nodes: [{name: n1, type: t}]
        """))
    if ok:
        assert load_inventory(str(path), write_cache=False).nodes["n1"].hardware.nics[0].name \
            == name
    else:
        with pytest.raises(InventoryError, match=r"inv.yaml:6: NIC: bad 'name'"):
            load_inventory(str(path), write_cache=False)
