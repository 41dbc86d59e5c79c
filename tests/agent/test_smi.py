"""``--from-smi``: the text of ``nvidia-smi topo -m``, real and written."""
from __future__ import annotations

import pytest

from slurmtopo.slurmfmt.gres_lines import gres_lines, gres_text
from slurmtopo.agent.cpulayout import infer_cpu_layout
from slurmtopo.agent.smi import (looks_like_nvswitch, parse_matrix,
                                 smi_discovery, split_hosts)
from slurmtopo.errors import InventoryError
from slurmtopo.inventory.schema import load_inventory

from .conftest import FIXTURES, REAL_SMI, load_machine, split

SMI = FIXTURES / "smi"
WRITTEN = ["dgx_a100", "hgx_h100", "dgx1_v100", "a6000_nvlink_pairs", "l40s_pcie",
           "gb200_tray", "a100_mig"]


def one(path, **kw):
    (d,) = smi_discovery(path.read_text(), str(path), node_name="n1", **kw)
    return d


@pytest.mark.parametrize("name", WRITTEN)
def test_written_outputs_match_the_machine(name):
    """Each written text describes its NVML fixture's machine: same links,
    same NIC relations (compute NICs: the mlx5 ones)."""
    spec = load_machine(name)
    d = one(SMI / f"{name}.txt")
    hw = d.node.hardware
    assert [list(r) for r in hw.links] == split(spec["expect"]["links"])
    assert hw.nvswitch is spec["expect"]["nvswitch"]
    want = {k: v.split() for k, v in spec["expect"]["nics"].items() if k.startswith("mlx5")}
    assert {n.name: list(n.gpu_relation) for n in hw.nics} == want
    specs = [{**spec.get("gpu_defaults", {}), **g} for g in spec["gpus"]]
    assert [g.cpus for g in hw.gpus] == [
        tuple(sorted(_cpus(s["cpus"]))) for s in specs]
    if name != "dgx1_v100":  # the old format has no NUMA column
        assert [g.numa_node for g in hw.gpus] == spec["expect"]["numa_nodes"]
    assert d.report["source"] == "nvidia-smi topo -m"


def _cpus(text):
    from slurmtopo.inventory.model import parse_cpulist
    return parse_cpulist(text)


@pytest.mark.parametrize("name", ["dgx_a100", "hgx_h100", "dgx1_v100", "a6000_nvlink_pairs",
                                  "l40s_pcie", "gb200_tray"])
def test_gres_from_smi_equals_gres_from_nvml_when_minors_follow_the_index(name):
    spec = load_machine(name)
    model = (spec.get("gpu_defaults") or {}).get("name")
    d = one(SMI / f"{name}.txt", model=model)
    want = spec["expect"]["gres"].splitlines()
    if name == "dgx_a100":  # scrambled minors: the text cannot know them
        want = [w.replace(w.split()[2], f"File=/dev/nvidia{i}") for i, w in enumerate(want)]
    if name == "dgx1_v100":  # no NVLink port detail, lanes come from NV#
        pass
    assert gres_lines(d.node) == want


def test_gb200_gpu_numa_ids_and_legend():
    d = one(SMI / "gb200_tray.txt")
    assert d.report["gpu_numa_ids"] == [2, 10, 18, 26]
    assert [n.name for n in d.node.hardware.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def test_crlf_and_mlx5_column_names():
    raw = (SMI / "hgx_h100.txt").read_bytes()
    assert b"\r\n" in raw
    d = one(SMI / "hgx_h100.txt")
    assert [n.name for n in d.node.hardware.nics][:2] == ["mlx5_0", "mlx5_1"]


def test_messy_whitespace_and_prompt_line():
    text = (SMI / "l40s_pcie.txt").read_text()
    assert text.startswith("$ nvidia-smi topo -m")
    d = one(SMI / "l40s_pcie.txt")
    assert d.node.hardware.gpu_count == 8 and d.node.hardware.links[0][1] == "PIX"


# -- the six real outputs ------------------------------------------------------

REAL = {
    # file stem: (gpus, nic names, nvswitch, GPU0 cpus (first, last), numa of GPUs, GPU0 Cores)
    "aws_g6e_12xlarge_4x_l40s_vm": (4, [], False, (0, 47), [0] * 4, "0-23"),
    "berkeley_savio4_n0123_8x_rtxa5000_pcie_switch_2mlx5": (
        8, ["mlx5_0", "mlx5_1"], False, (0, 15), [0] * 4 + [1] * 4, "0-15"),
    "dgx1_v100_oneflow_dlperf_mlx5x1": (8, ["mlx5_0"], False, (0, 35), [None] * 8, "0-11"),
    "oci_bm_gpu4_8_a100_nv12_18nic_nps4": (
        8, [f"mlx5_{i}" for i in range(18)], True, (48, 63), [3, 3, 1, 1, 7, 7, 5, 5], "48-63"),
    "stas00_h100_sxm_8gpu_2numa_ht": (8, [], True, (0, 155), [0] * 4 + [1] * 4, "0-51"),
    "xuesongtap_4x_a10_pcie_2mlx5": (4, ["mlx5_0", "mlx5_1"], False, (0, 127), [0] * 4, "0-63"),
}


def test_every_real_output_is_covered():
    assert {p.stem for p in REAL_SMI} == set(REAL)


@pytest.mark.parametrize("path", REAL_SMI, ids=lambda p: p.stem)
def test_real_outputs(path, tmp_path):
    gpus, nics, nvswitch, (lo, hi), numa, cores = REAL[path.stem]
    d = one(path)
    hw = d.node.hardware
    assert hw.gpu_count == gpus
    assert [n.name for n in hw.nics] == nics
    assert hw.nvswitch is nvswitch
    assert (min(hw.gpus[0].cpus), max(hw.gpus[0].cpus)) == (lo, hi)
    assert [g.numa_node for g in hw.gpus] == numa
    assert gres_lines(d.node)[0].split()[2] == f"Cores={cores}"
    out = tmp_path / "n1.yaml"
    out.write_text(d.render())
    assert load_inventory(str(out)).node("n1").hardware == hw


def test_real_dgx1_cube_mesh_links_and_nic():
    d = one(SMI / "real" / "dgx1_v100_oneflow_dlperf_mlx5x1.txt",
            model="Tesla V100-SXM2-16GB")
    hw = d.node.hardware
    assert hw.links[0][3] == "NV2" and hw.links[0][5] == "SYS"
    assert hw.nics[0].gpu_relation == ("NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS")
    assert gres_lines(d.node)[0] == ("Name=gpu Type=tesla_v100-sxm2-16gb File=/dev/nvidia0 "
                                     "Cores=0-11 Links=-1,1,1,2,2,0,0,0")
    assert hw.cpu.threads_per_core == 2 and hw.cpu.cores == 24


def test_real_h100_gres_says_slurm_is_blind_to_nvswitch():
    d = one(SMI / "real" / "stas00_h100_sxm_8gpu_2numa_ht.txt", model="NVIDIA H100 80GB HBM3")
    text = gres_text(d.node, d.report)
    assert "# NVSwitch" in text and "NV18" in text
    assert "Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia4 Cores=52-103 " \
           "Links=0,0,0,0,-1,0,0,0" in text
    assert "Cores=0-51" in text


def test_real_oci_nic_legend_and_pxb_pairs():
    d = one(SMI / "real" / "oci_bm_gpu4_8_a100_nv12_18nic_nps4.txt")
    nics = {n.name: n.gpu_relation for n in d.node.hardware.nics}
    assert nics["mlx5_5"][:2] == ("PXB", "PXB") and set(nics["mlx5_0"]) == {"SYS"}
    assert d.node.hardware.cpu.threads_per_core == 1


def test_missing_trailing_columns_and_na():
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNV4\t0-7\tN/A\t\tN/A\n"
            "GPU1\tNV4\t X \n")
    (d,) = smi_discovery(text, "t.txt", node_name="x")
    assert d.node.gpus[0].cpus == tuple(range(8)) and d.node.gpus[0].numa_node is None
    assert d.node.gpus[1].cpus == ()
    assert "gpu_numa_ids" not in d.report


def test_threads_per_core_override():
    d = one(SMI / "real" / "aws_g6e_12xlarge_4x_l40s_vm.txt", threads_per_core=1)
    assert gres_lines(d.node)[0].split()[1:3] == ["File=/dev/nvidia0", "Cores=0-47"]  # no Type


# -- errors name the line ------------------------------------------------------

GOOD = ("\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tNV2\tPIX\t0-7\n"
        "GPU1\tNV2\t X \tSYS\t8-15\n"
        "mlx5_0\tPIX\tSYS\t X \n")


def test_good_sample_parses():
    (d,) = smi_discovery(GOOD, "t.txt", node_name="x")
    assert d.node.hardware.nics[0].gpu_relation == ("PIX", "SYS")


@pytest.mark.parametrize("bad,line,words", [
    (GOOD.replace("NV2\tPIX", "NV2\tFOO"), 2, "unknown link 'FOO'"),
    (GOOD.replace("GPU1\tNV2\t X \tSYS\t8-15", "GPU1\tNV2\t X "), 3, "2 link cells, expected 3"),
    (GOOD.replace("GPU1\tNV2\t X ", "GPU1\tNV4\t X "), 3, "symmetric"),
    (GOOD.replace("GPU0\t X ", "GPU0\tPIX"), 2, "expected X on the diagonal"),
    (GOOD.replace("\tGPU0\tGPU1", "\tGPU0\tGPU2"), 1, "GPU0..GPU1 in order"),
    (GOOD.replace("GPU1\tNV2\t X \tSYS\t8-15\n", ""), 1, "GPU1 has no row"),
    (GOOD.replace("mlx5_0\tPIX", "mlx5_9\tPIX"), 4, "not a column"),
    (GOOD.replace("0-7\n", "0-7\t3\t4\n"), 2, "more values than the header"),
    (GOOD.replace("0-7\n", "7-0\n"), 2, "bad CPU Affinity"),
    (GOOD + "GPU0\t X \tNV2\tPIX\t0-7\n", 5, "appears twice (first on line 2)"),
    (GOOD + "\nGPU0\t X \tNV2\tPIX\t0-7\n", None, None),  # after the table: ignored
])
def test_bad_text_is_a_clear_error_naming_the_line(bad, line, words):
    if line is None:
        smi_discovery(bad, "t.txt", node_name="x")
        return
    with pytest.raises(InventoryError) as ei:
        smi_discovery(bad, "t.txt", node_name="x")
    assert ei.value.line == line and ei.value.path == "t.txt"
    assert words in ei.value.message
    assert ei.value.render().startswith(f"t.txt:{line}: ")


def test_no_table_at_all():
    with pytest.raises(InventoryError, match="no 'nvidia-smi topo -m' table"):
        smi_discovery("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                      "driver.\n", "t.txt", node_name="x")


# -- pdsh ------------------------------------------------------------------------


def test_pdsh_output_with_two_hosts_is_split():
    path = SMI / "pdsh_two_hosts.txt"
    found = smi_discovery(path.read_text(), str(path))
    assert [d.node.name for d in found] == ["gpu-a100-01", "gpu-l40s-07"]
    assert [d.node.hardware.gpu_count for d in found] == [2, 8]
    assert found[1].node.hardware.links == load_inventory_links("l40s_pcie")
    assert found[0].report["hostname"] == "gpu-a100-01"


def load_inventory_links(name):
    return tuple(tuple(r) for r in split(load_machine(name)["expect"]["links"]))


def test_pdsh_errors_keep_the_file_line_numbers():
    text = "h1: \tGPU0\tGPU1\nh2: \tGPU0\nh1: GPU0\t X \tNV1\nh2: GPU0\t X \nh1: GPU1\tNV1\tBAD\n"
    with pytest.raises(InventoryError) as ei:
        smi_discovery(text, "p.txt")
    assert ei.value.line == 5


def test_pdsh_with_node_name_is_refused():
    path = SMI / "pdsh_two_hosts.txt"
    with pytest.raises(InventoryError, match="2 hosts"):
        smi_discovery(path.read_text(), str(path), node_name="x")


def test_split_hosts_without_prefixes():
    assert split_hosts("\tGPU0\nGPU0\t X \n")[0][0] is None


# -- inference helpers --------------------------------------------------------------


def infer_cpu_topology(affinities):
    return infer_cpu_layout(affinities, (), None).cpu


def test_infer_cpu_topology():
    ht = infer_cpu_topology([tuple(range(0, 52)) + tuple(range(104, 156)),
                             tuple(range(52, 104)) + tuple(range(156, 208))])
    assert (ht.cores, ht.threads_per_core) == (104, 2)
    flat = infer_cpu_topology([tuple(range(0, 16)), tuple(range(16, 32))])
    assert (flat.cores, flat.threads_per_core) == (32, 1)
    assert infer_cpu_topology([(), ()]) is None


def test_looks_like_nvswitch():
    assert looks_like_nvswitch([["X", "NV12", "NV12"], ["NV12", "X", "NV12"],
                                ["NV12", "NV12", "X"]])
    four = [["X" if a == b else "NV4" for b in range(4)] for a in range(4)]
    assert not looks_like_nvswitch(four)  # HGX-4 A100: direct links, 12 ports
    assert not looks_like_nvswitch([["X", "NV18"], ["NV18", "X"]])
    assert not looks_like_nvswitch([["X", "NV1", "SYS"], ["NV1", "X", "NV1"],
                                    ["SYS", "NV1", "X"]])


def test_parse_matrix_keeps_extras():
    mx = parse_matrix(GOOD)
    assert mx.columns == ["GPU0", "GPU1", "mlx5_0"] and mx.gpus == 2
    assert mx.extras["GPU1"] == {"CPU Affinity": "8-15"}


def test_a_paste_without_its_header_line_is_refused():
    text = "".join(GOOD.splitlines(keepends=True)[1:])
    with pytest.raises(InventoryError, match="no 'nvidia-smi topo -m' table"):
        smi_discovery(text, "t.txt", node_name="x")
