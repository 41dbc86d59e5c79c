"""``nvidia-smi topo -m`` texts pasted into public GitHub issues, read the
way an admin would: ``slurmtopo agent discover --from-smi FILE``.

Each fixture is cited in tests/fixtures/smi/public/SOURCES.md. What each
test asserts is read off the published text by hand (GPU count, link
kinds, the NICs near each GPU, NUMA nodes), not off the reader's output.
"""
from __future__ import annotations

import pytest

from slurmtopo.inventory.schema import load_inventory
from tests.clirun import run_cli

from .conftest import FIXTURES

PUBLIC = FIXTURES / "smi" / "public"


def discover(tmp_path, name):
    """(hardware, report text, stderr) of ``agent discover --from-smi``."""
    out = tmp_path / "n1.yaml"
    code, _, err = run_cli(["agent", "discover", "--from-smi", str(PUBLIC / name),
                            "--node-name", "n1", "-o", str(out)])
    assert code == 0, err
    assert "Traceback" not in err
    return load_inventory(str(out)).node("n1").hardware, out.read_text(), err


def near(hw, gpu):
    """The NICs a GPU shares a PCIe switch with (PIX or PXB)."""
    return [n.name for n in hw.nics if n.gpu_relation[gpu] in ("PIX", "PXB")]


def test_glued_columns_and_cells_of_a_dgx_h100_are_split(tmp_path):
    # header "NIC8NIC9", cells "NODENODE"/"NODEPXB": a tab lost in the copy
    hw, report, err = discover(tmp_path, "vllm13855_dgx_h100_12nic_glued_cells_gpu_rows.txt")
    assert hw.gpu_count == 8
    assert [n.name for n in hw.nics] == [f"NIC{i}" for i in range(12)]
    assert all(hw.links[a][b] == "NV18" for a in range(8) for b in range(8) if a != b)
    assert hw.nvswitch is True
    # GPU5's row reads "...NODE NODE NODEPXB NODE NODE": its PXB NIC is NIC9
    assert [near(hw, g) for g in range(8)] == [["NIC0"], ["NIC3"], ["NIC4"], ["NIC5"],
                                               ["NIC6"], ["NIC9"], ["NIC10"], ["NIC11"]]
    assert [g.numa_node for g in hw.gpus] == [0] * 4 + [1] * 4
    assert hw.gpus[4].cpus == tuple(range(56, 112)) + tuple(range(168, 224))
    # only the GPU rows were pasted: said, not fatal
    assert "have no row of their own" in err


def test_unglue_splits_only_what_is_run_together():
    from slurmtopo.agent.smi import unglue
    assert unglue(["NIC8NIC9", "NIC10"]) == ["NIC8", "NIC9", "NIC10"]
    assert unglue(["NODENODE", "SYSSYS", "NV18PXB", " X "[1]]) == \
        ["NODE", "NODE", "SYS", "SYS", "NV18", "PXB", "X"]
    # one cell, one name, affinity lists: left whole
    assert unglue(["NV12", "NIC11", "0-55,112-167", "N/A", "mlx5_10"]) == \
        ["NV12", "NIC11", "0-55,112-167", "N/A", "mlx5_10"]


def test_two_gpus_with_empty_affinity_cells_inside_a_job(tmp_path):
    hw, report, err = discover(tmp_path, "vllm19607_2gpu_nv12_8nic_empty_affinity.txt")
    assert hw.gpu_count == 2 and hw.links[0][1] == "NV12"
    assert [n.gpu_relation for n in hw.nics] == [("SYS", "SYS")] * 6 + [("PXB", "PXB")] * 2
    assert near(hw, 0) == ["NIC6", "NIC7"]
    # nothing in the CPU cells: no CPU list, no NUMA node invented
    assert [g.cpus for g in hw.gpus] == [(), ()]
    assert [g.numa_node for g in hw.gpus] == [None, None]
    assert "job_capture: true" in report


def test_eight_pcie_gpus_all_sys_with_a_nic_pair(tmp_path):
    hw, report, err = discover(tmp_path, "go_gpuallocator17_8x_rtx4090_2nic_tabs.txt")
    assert hw.gpu_count == 8 and hw.nvswitch is False
    assert {hw.links[a][b] for a in range(8) for b in range(8) if a != b} == {"SYS"}
    assert [n.gpu_relation for n in hw.nics] == [("SYS",) * 6 + ("PHB", "SYS")] * 2
    assert [g.numa_node for g in hw.gpus] == [0] * 4 + [1] * 4
    assert hw.gpus[0].cpus == tuple(range(0, 56)) + tuple(range(112, 168))
    assert hw.cpu is not None and (hw.cpu.sockets, hw.cpu.threads_per_core) == (2, 2)


@pytest.mark.parametrize("cut", ["GPU7\t", "GPU3\t"])
def test_a_gpu_row_missing_is_still_an_error(tmp_path, cut):
    text = (PUBLIC / "vllm13855_dgx_h100_12nic_glued_cells_gpu_rows.txt").read_text()
    bad = tmp_path / "cut.txt"
    bad.write_text("".join(ln for ln in text.splitlines(True) if not ln.startswith(cut)))
    code, _, err = run_cli(["agent", "discover", "--from-smi", str(bad), "--node-name", "n1"])
    assert code != 0 and "Traceback" not in err
    assert f"{bad}:3:" in err and f"column {cut.strip()} has no row of its own" in err


def test_the_p2p_matrix_after_the_table_is_not_read_as_links(tmp_path):
    hw, report, err = discover(tmp_path, "club3090_2x5090_phb_then_p2p_matrix.txt")
    assert hw.gpu_count == 2 and hw.links[0][1] == "PHB" and hw.nics == ()
    assert [g.numa_node for g in hw.gpus] == [0, 0]


def test_the_p2p_matrix_alone_is_refused_with_a_hint(tmp_path):
    text = (PUBLIC / "club3090_2x5090_phb_then_p2p_matrix.txt").read_text()
    p2p = tmp_path / "p2p.txt"
    p2p.write_text(text[text.index(" \tGPU0"):])
    code, _, err = run_cli(["agent", "discover", "--from-smi", str(p2p), "--node-name", "n1"])
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{p2p}:2: row GPU0, column GPU1: unknown link 'GNS'" in err
    assert "nvidia-smi topo -p2p" in err
