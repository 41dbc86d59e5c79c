"""Other shapes the fabric arrives in: the ports report of ``ibnetdiscover
-p``, and the outputs of neighbouring tools given by mistake (a node list
of ``ibswitches``/``ibhosts``, ``iblinkinfo``), run through the CLI as an
admin would.

``ibm_pcm_example_as_ports_report.txt`` is the fabric of the real IBM dump
(``ibm_pcm_example_mt43132_2hosts_sdr.topo``) written by hand in the layout
``ibnetdiscover -p`` prints (one line per port: type, LID, port, GUID,
width, speed, then the far port and both node descriptions, or the node
description alone when nothing is cabled), so the two must give the same
topology.conf.
"""
from __future__ import annotations

from slurmtopo.admin.ibnetdiscover import read_ibnetdiscover
from tests.clirun import run_cli

from .conftest import fixture

PORTS = fixture("ibm_pcm_example_as_ports_report.txt")
DUMP = fixture("ibm_pcm_example_mt43132_2hosts_sdr.topo")


def generate(path):
    code, out, err = run_cli(["topology", "generate", "--ibnetdiscover", str(path)])
    return code, out, err


def body(out: str):
    return [ln for ln in out.splitlines() if not ln.startswith("#")]


def test_ports_report_gives_the_same_topology_as_the_dump():
    code, out, err = generate(PORTS)
    assert code == 0, err
    assert body(out) == ["SwitchName=ibsw-0053ee Nodes=compute-00-[00-01] LinkSpeed=10 "
                         "# MT43132 Mellanox Technologies"]
    assert body(out) == body(generate(DUMP)[1])


def test_ports_report_cables_once_each_with_their_speed():
    fab = read_ibnetdiscover(PORTS)
    assert len(fab.links) == 2 and {ln.width for ln in fab.links} == {"4xSDR"}
    assert {(ln.a_port, ln.b_port) for ln in fab.links} == {(1, 1), (2, 2)}
    sw = fab.nodes["000b8cffff0053ee"]
    assert (sw.kind, sw.ports, sw.description) == ("switch", 3, "MT43132 Mellanox Technologies")
    assert {n.description for n in fab.nodes.values() if n.kind == "ca"} == \
        {"compute-00-00 HCA-1", "compute-00-01 HCA-1"}


def one_line_error(tmp_path, text):
    bad = tmp_path / "fab.txt"
    bad.write_text(text)
    code, out, err = generate(bad)
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return str(bad), err


def test_a_bad_line_of_a_ports_report_names_its_line(tmp_path):
    lines = open(PORTS).read().splitlines(True)
    lines[3] = "CA     1  1 0x0002c902002789ad 4x SDR - garbage\n"
    path, err = one_line_error(tmp_path, "".join(lines))
    assert f"{path}:4: cannot read this line of an 'ibnetdiscover -p' report" in err


def test_a_port_cabled_twice_in_a_ports_report_is_refused(tmp_path):
    text = open(PORTS).read() + ("SW     3  1 0x000b8cffff0053ee 4x SDR - CA     9  1 "
                                 "0x0002c90200000001 ( 'MT43132' - 'other HCA-1' )\n")
    path, err = one_line_error(tmp_path, text)
    assert f"{path}:6: port 1 of 000b8cffff0053ee is linked twice" in err


def test_a_node_list_is_refused_with_what_to_run(tmp_path):
    # the layout ibswitches prints (and ibnetdiscover -S)
    path, err = one_line_error(tmp_path, 'Switch\t: 0x000b8cffff0053ee ports 8 '
                                         '"MT43132 Mellanox Technologies" base port 0 lid 3 '
                                         'lmc 0\n')
    assert f"{path}:1: this is a node list" in err and "'ibnetdiscover'" in err


def test_iblinkinfo_is_refused_with_what_to_run(tmp_path):
    # the layout iblinkinfo -l prints
    path, err = one_line_error(
        tmp_path, '0x000b8cffff0053ee "MT43132 Mellanox Technologies"      3    1[  ] '
                  '==( 4X          2.5 Gbps Active/  LinkUp)==>  0x0002c902002789ac      1    '
                  '1[  ] "compute-00-01 HCA-1" ( )\n')
    assert f"{path}:1: this is iblinkinfo output" in err
