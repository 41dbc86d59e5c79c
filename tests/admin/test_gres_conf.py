"""The cluster gres.conf: folding identical nodes, Slurm's Links rule, the
reader, and the checks against slurm.conf."""
from __future__ import annotations

import textwrap

import pytest

from slurmtopo.slurmfmt.checks import REFUSE, WARNING
from slurmtopo.slurmfmt.gres_conf import (check_gres, cluster_gres_conf, describe_changes,
                                          gres_counts, parse_gres_conf)
from slurmtopo.slurmfmt.gres_strings import gres_by_type
from slurmtopo.slurmfmt.slurm_conf import parse_slurm_conf
from slurmtopo.errors import InventoryError

from .conftest import fake_gres_lines, hardware, node


def test_identical_nodes_share_one_block_and_links_lines_stay_single():
    nodes = [node(f"gpu{i:03d}") for i in range(1, 5)] + [node("gpu005", hardware(gpus=4))]
    text, notes = cluster_gres_conf(nodes, lines_of=fake_gres_lines, header=["hi"])
    lines = text.splitlines()
    assert lines[0] == "# hi"
    assert lines[1] == "# 4 node(s), 8 device line(s)"
    assert lines[2] == ("NodeName=gpu[001-004] Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-7 "
                        "Links=-1,4,4,4,4,4,4,4")
    assert sum(1 for ln in lines if ln.startswith("NodeName=gpu[001-004]")) == 8
    assert sum(1 for ln in lines if ln.startswith("NodeName=gpu005")) == 4
    assert notes == []
    parsed = parse_gres_conf(text)
    assert gres_counts(parsed, "gpu003") == {"h100": 8}
    assert gres_counts(parsed, "gpu005") == {"h100": 4}


def test_lines_without_links_merge_into_a_file_range():
    def lines_of(n, report):
        return [f"Name=gpu Type=l40s File=/dev/nvidia{i} Cores={'0-7' if i < 4 else '8-15'}"
                for i in range(8)]
    text, _ = cluster_gres_conf([node("a1"), node("a2")], lines_of=lines_of)
    assert text.splitlines()[1:] == [
        "NodeName=a[1-2] Name=gpu Type=l40s File=/dev/nvidia[0-3] Cores=0-7",
        "NodeName=a[1-2] Name=gpu Type=l40s File=/dev/nvidia[4-7] Cores=8-15"]
    assert gres_counts(parse_gres_conf(text), "a2") == {"l40s": 8}


def test_nodes_without_gpus_are_noted_and_comments_kept_for_single_nodes():
    def lines_of(n, report):
        if n.name == "cpu1":
            return []
        return ["Name=gpu Type=a100_1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21"
                f",/dev/nvidia-caps/nvidia-cap22 Cores=0-7 Links=-1  # UniqueId=MIG-{n.name}"]
    text, notes = cluster_gres_conf([node("cpu1"), node("m1"), node("m2")], lines_of=lines_of)
    assert notes == ["1 node(s) have no GRES lines (no GPUs): cpu1"]
    # m1 and m2 differ only in their comment: folded, comment dropped
    assert "NodeName=m[1-2] Name=gpu" in text and "UniqueId" not in text
    text, _ = cluster_gres_conf([node("m1")], lines_of=lines_of)
    assert text.rstrip().endswith("Links=-1  # UniqueId=MIG-m1")
    assert parse_gres_conf(text)[0].multiple_files[0] == "/dev/nvidia0"


def test_with_the_agent_lines():
    from slurmtopo.slurmfmt.gres_lines import gres_lines
    nodes = [node(f"gpu{i}") for i in range(1, 4)]
    text, _ = cluster_gres_conf(nodes)
    per_node = gres_lines(nodes[0])
    assert len([ln for ln in text.splitlines() if ln.startswith("NodeName=gpu[1-3]")]) == \
        len(per_node)
    assert parse_gres_conf(text)  # reads back
    # a GPU the report says is lost is left out, as slurmd would
    text, _ = cluster_gres_conf(nodes[:1], reports={"gpu1": {"lost_gpus": [3]}})
    assert "/dev/nvidia3" not in text and "/dev/nvidia4" in text


def test_reader():
    lines = parse_gres_conf(textwrap.dedent("""\
        AutoDetect=off
        NodeName=tux[0-15] Name=gpu File=/dev/nvidia[0-3]
        NodeName=tux16 Name=gpu Type=a100 File=/dev/nvidia0 Cores=0-3 Links=-1,2
        Name=mps Count=200 File=/dev/nvidia[0-1]
        NodeName=tux[0-7] Name=bandwidth Type=lustre Count=4G Flags=CountOnly
        """), "g.conf")
    assert lines[0].autodetect == "off" and lines[0].name is None
    assert lines[1].nodes[-1] == "tux15" and len(lines[1].files) == 4
    assert lines[2].links == (-1, 2)
    assert lines[3].devices == 200 and lines[3].nodes is None
    assert lines[4].count == 4 * 1024 ** 3
    assert gres_counts(lines, "tux3") == {None: 4}


@pytest.mark.parametrize("text,words", [
    ("NodeName=a Name=gpu File=/dev/nvidia[0-1] Links=-1,2\n", "single device per line"),
    ("NodeName=a Name=gpu File=/dev/nvidia[0-1] Count=3\n", "Count=3 but File names 2"),
    ("NodeName=a Name=gpu File=/dev/nvidia0 MultipleFiles=/dev/nvidia1\n", "mutually exclusive"),
    ("NodeName=a Name=gpu Colour=red\n", "unknown gres.conf key"),
    ("Name=gpu NodeName=a File=/dev/nvidia0\n", "NodeName must be the first"),
    ("NodeName=a Name=gpu File=/dev/nvidia0 Cores=0-x\n", "bad Cores"),
    ("NodeName=a Name=gpu File=/dev/nvidia0 Links=-1,x\n", "Links must be"),
    ("NodeName=a[1- Name=gpu\n", "bad NodeName"),
    ("NodeName=a File=/dev/nvidia0\n", "needs Name="),
    ("NodeName=a Name=gpu Count=lots\n", "Count must be a number"),
])
def test_reader_errors(text, words):
    with pytest.raises(InventoryError) as exc:
        parse_gres_conf("# first line\n" + text, "gres.conf")
    msg = exc.value.render()
    assert words in msg and msg.startswith("gres.conf:2:"), msg


@pytest.mark.parametrize("gres,want", [
    ("gpu:8", {None: 8}), ("gpu:h100:8", {"h100": 8}), ("gpu:h100:4,gpu:a100:2(S:0)",
                                                        {"h100": 4, "a100": 2}),
    ("gpu", {None: 1}), ("gpu:a100", {"a100": 1}), ("nic:2,gpu:2", {None: 2}), ("", {}),
])
def test_slurm_gres_syntax(gres, want):
    assert gres_by_type(gres) == want


def test_checks_against_slurm_conf():
    slurm = parse_slurm_conf(textwrap.dedent("""\
        NodeName=g[1-2] Gres=gpu:h100:8
        NodeName=g3 Gres=gpu:8
        NodeName=g4 Gres=gpu:a100:8
        NodeName=g5 Gres=gpu:4
        NodeName=c1
        """))
    text, _ = cluster_gres_conf([node(f"g{i}") for i in (1, 2, 3, 4)] + [node("x9")],
                                lines_of=fake_gres_lines)
    problems = check_gres(parse_gres_conf(text), slurm)
    assert [p.severity for p in problems] == [WARNING, REFUSE, REFUSE, WARNING]
    assert "x9" in problems[0].message  # not in slurm.conf
    assert "g3" in problems[3].message  # typed here, untyped in slurm.conf
    assert "g5" in problems[1].message  # GPUs in slurm.conf, none in gres.conf
    assert "g4" in problems[2].message and "g3" not in problems[2].message  # type differs
    ok_text, _ = cluster_gres_conf([node(f"g{i}") for i in (1, 2, 3)], lines_of=fake_gres_lines)
    ok = parse_slurm_conf("NodeName=g[1-3] Gres=gpu:h100:8\n")
    assert check_gres(parse_gres_conf(ok_text), ok) == []
    # untyped in slurm.conf, typed in gres.conf: slurmd takes it, but a job
    # asking for the type would be refused, so say so (not a refusal)
    untyped = parse_slurm_conf("NodeName=g[1-2] Gres=gpu:h100:8\nNodeName=g3 Gres=gpu:8\n")
    problems = check_gres(parse_gres_conf(ok_text), untyped)
    assert [p.severity for p in problems] == [WARNING]
    assert "g3" in problems[0].message and "Type=h100" in problems[0].message


def test_describe_changes():
    old = parse_gres_conf("NodeName=a[1-2] Name=gpu File=/dev/nvidia[0-1]\n")
    new = parse_gres_conf("NodeName=a1 Name=gpu File=/dev/nvidia[0-1]\n"
                          "NodeName=a[2-3] Name=gpu File=/dev/nvidia[0-3]\n")
    assert describe_changes(old, new) == ["nodes added: a3", "nodes changed: a2"]


# -- Cores= are Slurm's core indices of the node slurm.conf declares -------------

from slurmtopo.slurmfmt.checks import ERROR  # noqa: E402
from slurmtopo.inventory.model import CpuTopology, Gpu, Hardware  # noqa: E402

from .conftest import run_main, write_reports  # noqa: E402

#: the dev cluster's nodes: 2 sockets of 8 cores, one thread each
DEV_SLURM_CONF = ("NodeName=node[1-4] Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 "
                  "Gres=gpu:8\n")


def _smt_node(name: str, cpu=None) -> "Node":
    """8 GPUs, GPUs 0-3 near CPUs 0-7 and their SMT siblings 16-23 (a
    2 x 8 x 2 machine in the usual Linux numbering), 4-7 near the rest."""
    return node(name, Hardware(
        gpus=tuple(Gpu(index=i, model="NVIDIA H100 80GB HBM3",
                       cpus=(*range(0, 8), *range(16, 24)) if i < 4
                       else (*range(8, 16), *range(24, 32))) for i in range(8)),
        links=tuple(tuple("X" if i == j else "NV18" for j in range(8)) for i in range(8)),
        nvswitch=True, cpu=cpu))


def _write(tmp_path, text: str, name: str = "slurm.conf") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_cpu_ids_become_core_indices_with_slurm_confs_threads(tmp_path, capsys):
    """A report without a CPU layout: its CPU ids are numbered into cores
    with the threads per core slurm.conf declares (Cores=0-7, not
    Cores=0-7,16-23, which is past the node's 16 cores)."""
    reports = write_reports(tmp_path / "r", [_smt_node("node1"), _smt_node("node2")])
    slurm = _write(tmp_path, "NodeName=node[1-2] Sockets=2 CoresPerSocket=8 ThreadsPerCore=2 "
                             "Gres=gpu:8\n")
    out = tmp_path / "gres.conf"
    rc, _o, err = run_main(["gres", "generate", "--reports", reports, "--slurm-conf", slurm,
                            "-o", str(out)], capsys)
    assert rc == 0, err
    cores = sorted({ln.cores for ln in parse_gres_conf(out.read_text())})
    assert cores == ["0-7", "8-15"]


def test_cores_past_the_declared_layout_are_refused_before_writing(tmp_path, capsys):
    """Reports of a 2 x 56 x 2 machine, slurm.conf declaring 2 x 8 (the dev
    cluster): Cores=0-55 would make every node INVAL. Nothing is written,
    not even with --force; the message names the nodes and both numbers."""
    big = CpuTopology(sockets=2, cores_per_socket=56, threads_per_core=2)
    hw = Hardware(gpus=tuple(Gpu(index=i, model="NVIDIA H100 80GB HBM3",
                                 cpus=(*range(0, 56), *range(112, 168)) if i < 4
                                 else (*range(56, 112), *range(168, 224))) for i in range(8)),
                  links=tuple(tuple("X" if i == j else "NV18" for j in range(8))
                              for i in range(8)), nvswitch=True, cpu=big)
    reports = write_reports(tmp_path / "r", [node(f"node{i}", hw) for i in range(1, 5)])
    slurm = _write(tmp_path, DEV_SLURM_CONF)
    out = tmp_path / "gres.conf"
    for extra in ([], ["--force"]):
        rc, _o, err = run_main(["gres", "generate", "--reports", reports, "--slurm-conf", slurm,
                                "-o", str(out), *extra], capsys)
        assert rc != 0 and not out.exists(), err
        last = err.strip().splitlines()[-1]
        assert last.startswith("slurmtopo: error: not writing gres.conf"), err
        for words in ("node[1-4]", "Cores=0-55", "16 cores", "0-15", "INVAL"):
            assert words in last, last
        assert "the node reports say 2 socket(s) x 56 core(s)" in err


def test_a_report_without_layout_that_slurm_conf_cannot_hold(tmp_path, capsys):
    reports = write_reports(tmp_path / "r", [_smt_node("node1")])
    slurm = _write(tmp_path, "NodeName=node1 Sockets=2 CoresPerSocket=4 ThreadsPerCore=1 "
                             "Gres=gpu:8\n")
    out = tmp_path / "gres.conf"
    rc, _o, err = run_main(["gres", "generate", "--reports", reports, "--slurm-conf", slurm,
                            "-o", str(out)], capsys)
    assert rc != 0 and not out.exists()
    assert err.strip().splitlines() == [
        "slurmtopo: error: node node1: GPU 0's CPUs 0-7,16-23 go past the 8 CPUs slurm.conf "
        "declares for it (2 socket(s) x 4 core(s) x 1 thread(s)): the report and slurm.conf's "
        "NodeName line describe different machines; fix the NodeName line (slurmd -C prints "
        "the real one)"]


@pytest.mark.parametrize("cores, severity", [
    ("0-7", None), ("8-15", None), ("0-15", None),      # a socket, or all of them
    ("0-3", REFUSE), ("4-11", REFUSE), ("0-7,12", REFUSE),  # not socket boundaries
    ("0-16", ERROR), ("16", ERROR), ("0-55", ERROR),    # past the 16 cores
])
def test_check_cores_against_the_declared_sockets(cores, severity):
    slurm = parse_slurm_conf(DEV_SLURM_CONF)
    lines = parse_gres_conf(f"NodeName=node[1-4] Name=gpu File=/dev/nvidia[0-7] Cores={cores}\n")
    problems = check_gres(lines, slurm, "gres.conf")
    assert [p.severity for p in problems] == ([severity] if severity else [])
    if severity:
        assert problems[0].origin == "gres.conf:1"
        assert f"Cores={cores} for node[1-4]" in problems[0].message


def test_cores_unchecked_where_slurm_conf_declares_no_layout():
    slurm = parse_slurm_conf("NodeName=node[1-2] Gres=gpu:8\n")
    lines = parse_gres_conf("NodeName=node[1-2] Name=gpu File=/dev/nvidia[0-7] Cores=0-200\n")
    assert check_gres(lines, slurm) == []
    # from CPUs= alone Slurm's sockets are a guess: the count is checked,
    # socket boundaries are not
    slurm = parse_slurm_conf("NodeName=node[1-2] CPUs=32 Gres=gpu:8\n")
    assert check_gres(parse_gres_conf("Name=gpu File=/dev/nvidia[0-7] Cores=0-3\n"), slurm) == []
    assert [p.severity for p in check_gres(
        parse_gres_conf("Name=gpu File=/dev/nvidia[0-7] Cores=0-32\n"), slurm)] == [ERROR]


def test_gres_check_refuses_cores_past_the_layout(tmp_path, capsys):
    slurm = _write(tmp_path, DEV_SLURM_CONF)
    gres = _write(tmp_path, "NodeName=node[1-4] Name=gpu File=/dev/nvidia[0-3] Cores=0-55\n"
                            "NodeName=node[1-4] Name=gpu File=/dev/nvidia[4-7] Cores=8-15\n",
                  "gres.conf")
    rc, _o, err = run_main(["gres", "check", gres, "--slurm-conf", slurm], capsys)
    assert rc != 0
    assert err.splitlines()[0].startswith(f"error: {gres}:1: Cores=0-55 for node[1-4]"), err
