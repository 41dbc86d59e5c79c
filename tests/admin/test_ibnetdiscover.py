"""The ibnetdiscover parser: real outputs, hand-written fabrics, bad input."""
from __future__ import annotations

import pytest

from slurmtopo.admin.ibnetdiscover import link_gbps, parse_ibnetdiscover, read_ibnetdiscover
from slurmtopo.errors import InventoryError

from .conftest import fixture, of_kind


def test_ibm_two_hosts():
    fab = read_ibnetdiscover(fixture("ibm_pcm_example_mt43132_2hosts_sdr.topo"))
    assert [n.kind for n in fab.nodes.values()].count("switch") == 1
    cas = {n.description for n in of_kind(fab, "ca")}
    assert cas == {"compute-00-00 HCA-1", "compute-00-01 HCA-1"}
    assert len(fab.links) == 2  # each cable once, though printed from both ends
    assert {ln.width for ln in fab.links} == {"4xSDR"}
    assert fab.nodes["000b8cffff0053ee"].description == "MT43132 Mellanox Technologies"


def test_man_page_example_dual_port_hca_and_grouping_lines():
    fab = read_ibnetdiscover(fixture("man_ibnetdiscover_example_voltaire_isr9024_sdr.topo"))
    assert len(of_kind(fab, "switch")) == 2 and len(of_kind(fab, "ca")) == 4
    # the dual-port HCA is cabled twice to the ISR9024
    dual = [ln for ln in fab.links if "0008f10403960558" in (ln.a, ln.b)]
    assert len(dual) == 2
    # two cables between the two switches
    sw = [ln for ln in fab.links if {ln.a, ln.b} == {"005442ba00003080", "0008f10400410015"}]
    assert len(sw) == 2
    assert fab.skipped_lines == 1  # "Non-Chassis Nodes"


def test_hand_written_fat_tree_counts():
    fab = read_ibnetdiscover(fixture("fat_tree_4x2_dual.topo"))
    assert len(of_kind(fab, "switch")) == 6
    assert len(of_kind(fab, "ca")) == 9  # 8 hosts + a SHARP aggregation node
    # 8 host cables + 4 leaves x 2 spines x 2 cables + SHARP
    assert len(fab.links) == 8 + 16 + 1


@pytest.mark.parametrize("width,gbps", [("4xSDR", 10), ("4xHDR", 200), ("2xNDR", 200),
                                        ("4xNDR", 400), ("1xFDR10", 10), ("4xEDR", 100),
                                        ("bogus", None), (None, None)])
def test_link_rates(width, gbps):
    assert link_gbps(width) == gbps


def test_node_known_only_from_the_far_end():
    text = ('Switch\t8 "S-00000000000000aa"\t\t# "MF0;leaf9:MQM8700/U1" enhanced port 0 lid 1\n'
            '[1]\t"H-00000000000000bb"[1](bb)\t\t# "gpu900 mlx5_0" lid 2 4xHDR\n')
    fab = parse_ibnetdiscover(text)
    assert fab.nodes["00000000000000bb"].description == "gpu900 mlx5_0"
    assert fab.nodes["00000000000000bb"].kind == "ca"


def _error(text):
    with pytest.raises(InventoryError) as exc:
        parse_ibnetdiscover(text, "fab.topo")
    return exc.value.render()


def test_bad_port_line_names_file_and_line():
    msg = _error('Switch\t8 "S-00000000000000aa"\t\t# "x"\n[1]\t"H-zz"[1]\n')
    assert msg.startswith("fab.topo:2: cannot read this port line")
    assert "\n" not in msg


def test_port_line_outside_a_record():
    assert _error('vendid=0x2c9\n[1]\t"S-00000000000000aa"[1]\n').startswith("fab.topo:2:")


def test_node_described_twice():
    rec = 'Switch\t8 "S-00000000000000aa"\t\t# "x"\n'
    assert "described twice" in _error(rec + "\n" + rec)


def test_port_linked_twice():
    msg = _error('Switch\t8 "S-00000000000000aa"\t\t# "x"\n'
                 '[1]\t"H-00000000000000bb"[1]\n[1]\t"H-00000000000000cc"[1]\n')
    assert msg.startswith("fab.topo:3:") and "linked twice" in msg


def test_not_ibnetdiscover_at_all():
    assert "no Switch or Ca records" in _error("SwitchName=s1 Nodes=gpu[1-4]\n")


# -- sizes bounded while reading ---------------------------------------------------

SWITCH = 'Switch\t{ports} "S-b8cffff0053ee"\t\t# "MF0;leaf01:MQM8700/U1" enhanced port 0 lid 3\n'


def _port(port: int, host: int, rport: int = 1) -> str:
    return (f'[{port}]\t"H-{host:016x}"[{rport}]\t\t# "gpu{host:05d} mlx5_0" lid {host + 4} '
            "4xHDR\n")


def test_a_switch_declaring_more_ports_than_infiniband_has():
    text = SWITCH.format(ports=200001) + "".join(_port(p, p) for p in range(1, 4))
    with pytest.raises(InventoryError) as exc:
        parse_ibnetdiscover(text, "dump.topo")
    assert exc.value.render().startswith("dump.topo:1: Switch 000b8cffff0053ee declares "
                                         "200,001 ports; an InfiniBand node has at most 255")


def test_port_numbers_past_255_are_refused_at_their_line():
    text = SWITCH.format(ports=36) + "".join(_port(p, p) for p in range(1, 300))
    with pytest.raises(InventoryError) as exc:
        parse_ibnetdiscover(text, "dump.topo")
    assert exc.value.render().startswith("dump.topo:257: port 256 in the record of "
                                         "000b8cffff0053ee (line 1)")
    far = SWITCH.format(ports=36) + _port(1, 7, rport=4096)
    with pytest.raises(InventoryError, match="port 4,096"):
        parse_ibnetdiscover(far, "dump.topo")


def test_a_record_with_more_port_lines_than_ports():
    text = SWITCH.format(ports=36) + _port(1, 1) * 300  # the same cable, again and again
    with pytest.raises(InventoryError) as exc:
        parse_ibnetdiscover(text, "dump.topo")
    assert exc.value.render().startswith("dump.topo:257: more than 255 port lines")


def test_the_node_count_is_bounded_while_reading(monkeypatch):
    from slurmtopo.admin import ibnetdiscover

    monkeypatch.setattr(ibnetdiscover, "MAX_NODES", 10)
    text = SWITCH.format(ports=36) + "".join(_port(p, p) for p in range(1, 13))
    with pytest.raises(InventoryError) as exc:
        parse_ibnetdiscover(text, "dump.topo")
    # the switch and 9 hosts fit; the 10th host (line 11) is one too many
    assert exc.value.render().startswith("dump.topo:11: more than 10 InfiniBand nodes")
    parse_ibnetdiscover(SWITCH.format(ports=36) + "".join(_port(p, p) for p in range(1, 10)))


def test_one_switch_with_thousands_of_hosts_is_refused_through_the_cli(tmp_path, capsys):
    """bench/ibgen's fat tree with every host on one leaf (the 200,000-host
    dump took about a minute to be refused after parsing; 300 show the rule)."""
    from bench.ibgen import FatTreeSpec, generate
    from .conftest import run_main

    dump = tmp_path / "one-leaf.topo"
    dump.write_text(generate(FatTreeSpec(hosts=300, hosts_per_unit=300, spines=1)))
    out = tmp_path / "topology.conf"
    rc, _o, err = run_main(["topology", "generate", "--ibnetdiscover", str(dump), "-o", str(out)],
                           capsys)
    assert rc == 2 and not out.exists()
    assert err.strip().splitlines() == [err.strip()]
    assert "declares 301 ports; an InfiniBand node has at most 255" in err
