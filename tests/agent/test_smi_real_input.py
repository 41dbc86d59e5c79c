"""``nvidia-smi topo -m`` as admins really capture it: in a batch job (an
underlined header, CPU lists cut to the job's CPUs), on a GB200 tray (NUMA
lists), on POWER9 (SMT4 numbered per core), with NICs it cannot name; and
the NIC link layer and MIG lines by Slurm release.

The fixtures were written for these tests in the shape of real outputs
(tabs, the empty cell nvidia-smi leaves before ``GPU NUMA ID``, legends).
"""
from __future__ import annotations

import pytest

from slurmtopo.agent.cpulayout import infer_cpu_layout
from slurmtopo.slurmfmt.gres_lines import gres_lines, gres_text, parse_slurm_version
from slurmtopo.agent.smi import cpu_side_numa, place_trailing, smi_discovery, strip_ansi
from slurmtopo.agent.sysfs import Sysfs
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.testing.fake_sysfs import build_sysfs

from .conftest import FIXTURES, REAL_SMI

SMI = FIXTURES / "smi"
TRAILING = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]


def one(name, **kw):
    path = SMI / name if "/" not in str(name) else name
    (d,) = smi_discovery(path.read_text(), str(path), node_name="n1", **kw)
    return d


def cores(d, **kw):
    return [next(f for f in line.split() if f.startswith("Cores=")) if "Cores=" in line else None
            for line in gres_lines(d.node, **kw)]


# -- ANSI escapes, empty cells ---------------------------------------------------


def test_underlined_header_of_a_batch_job_is_read():
    text = (SMI / "job_step_ansi_empty_affinity.txt").read_text()
    assert "\x1b[4mGPU0\x1b[0m" in text
    d = one("job_step_ansi_empty_affinity.txt")
    assert d.node.hardware.gpu_count == 8
    assert [n.name for n in d.node.hardware.nics] == ["mlx5_0", "mlx5_bond_0"]
    assert strip_ansi("\x1b[4mCPU Affinity\x1b[0m\t\x1b[1;31mX\x1b[m") == "CPU Affinity\tX"


def test_an_empty_cpu_affinity_cell_does_not_shift_the_columns():
    d = one("job_step_ansi_empty_affinity.txt")
    gpus = d.node.hardware.gpus
    assert [g.numa_node for g in gpus] == [0] * 4 + [1] * 4  # not None, not shifted
    assert "0" not in {str(c) for g in gpus[4:] for c in g.cpus}


@pytest.mark.parametrize("values,expect", [
    (["0-15", "0", "N/A"], ("0-15", "0", "N/A")),
    (["0", "N/A"], (None, "0", "N/A")),
    (["1", "2"], (None, "1", "2")),
    (["0-7"], ("0-7", None, None)),
    ([], (None, None, None)),
])
def test_trailing_values_find_their_columns(values, expect):
    got = place_trailing(values, TRAILING)
    assert tuple(got[c] for c in TRAILING) == expect


# -- captured inside a job -------------------------------------------------------


@pytest.mark.parametrize("name", ["job_step_ansi_empty_affinity.txt", "cgroup_job_all_sys.txt"])
def test_job_capture_is_detected_and_gives_no_cores(name):
    d = one(name)
    assert d.report.get("job_capture") is True
    assert any(p.startswith("captured inside a cgroup-restricted job") for p in d.problems)
    assert all(not g.cpus for g in d.node.gpus)
    assert set(cores(d)) == {None}
    text = gres_text(d.node, d.report)
    assert not [ln for ln in text.splitlines() if "Cores=" in ln and not ln.startswith("#")]
    assert "# no Cores=: the source was captured inside a cgroup-restricted job" in text


def test_cgroup_capture_names_its_signs():
    d = one("cgroup_job_all_sys.txt")
    problem = next(p for p in d.problems if p.startswith("captured"))
    assert "GPUs on different NUMA nodes share CPUs" in problem
    assert "every GPU pair is SYS although GPUs share a NUMA node" in problem


@pytest.mark.parametrize("path", REAL_SMI, ids=lambda p: p.stem)
def test_real_outputs_are_not_taken_for_job_captures(path):
    (d,) = smi_discovery(path.read_text(), str(path), node_name="n1")
    assert "job_capture" not in d.report
    assert all(g.cpus for g in d.node.gpus)


def test_a_vm_like_all_sys_output_is_only_suspicious():
    d = one(SMI / "real" / "xuesongtap_4x_a10_pcie_2mlx5.txt")
    assert any(p.startswith("suspicious: every GPU pair is SYS") for p in d.problems)
    assert cores(d)[0] == "Cores=0-63"


# -- NUMA lists ----------------------------------------------------------------


def test_multi_node_numa_affinity_keeps_the_cpu_side_node():
    d = one("gb200_tray_numa_lists_no_legend.txt")
    assert [g.numa_node for g in d.node.gpus] == [0, 0, 1, 1]
    assert d.report["gpu_numa_ids"] == [2, 10, 18, 26]
    assert any("NUMA Affinity 0,2-17: node 0" in n for n in d.report["notes"])
    assert cpu_side_numa("0,2-17", [2, 10]) == 0
    assert cpu_side_numa("2-17,1", [2, 10, 18]) == 1
    assert cpu_side_numa("N/A", []) is None and cpu_side_numa("3", []) == 3


# -- CPU layout ---------------------------------------------------------------


def test_power9_smt4_gives_cores_per_socket():
    d = one("power9_ac922_4x_v100_smt4.txt")
    cpu = d.node.hardware.cpu
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 16, 4)
    assert cores(d) == ["Cores=0-15"] * 2 + ["Cores=16-31"] * 2
    assert any(p.startswith("guess: NUMA nodes 0 and 8 (IBM POWER9)") for p in d.problems)


def test_threads_per_core_4_with_contiguous_lists_numbers_threads_per_core(tmp_path):
    text = (SMI / "power9_ac922_4x_v100_smt4.txt").read_text()
    # the same machine without its NUMA column: nothing says POWER9
    plain = "\n".join(line.rsplit(None, 1)[0] if line.startswith("GPU") else
                      line.replace("NUMA Affinity", "") for line in text.splitlines())
    (d,) = smi_discovery(plain, "p.txt", node_name="n1")
    assert cores(d) == ["Cores=0-63"] * 2 + ["Cores=64-127"] * 2
    assert any(p.startswith("guess: threads per core unknown") for p in d.problems)
    (d,) = smi_discovery(plain, "p.txt", node_name="n1", threads_per_core=4)
    assert cores(d) == ["Cores=0-15"] * 2 + ["Cores=16-31"] * 2
    assert not any(p.startswith("guess: threads") for p in d.problems)
    out = tmp_path / "n1.yaml"
    out.write_text(d.render())
    assert load_inventory(str(out)).node("n1").hardware == d.node.hardware


def test_two_numa_nodes_on_disjoint_cpus_are_two_sockets():
    d = one(SMI / "real" / "stas00_h100_sxm_8gpu_2numa_ht.txt")
    cpu = d.node.hardware.cpu
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 52, 2)
    assert cores(d)[4] == "Cores=52-103"
    assert not any(p.startswith("guess:") for p in d.problems)


def test_guesses_are_flagged():
    full = infer_cpu_layout([tuple(range(48))] * 4, [0] * 4)
    assert full.cpu.threads_per_core == 2 and "says nothing about SMT" in full.guesses[0]
    nps4 = infer_cpu_layout([tuple(range(16 * k, 16 * k + 16)) for k in range(4)], [0, 1, 2, 3])
    assert nps4.cpu.sockets == 2 and any("NPS/SNC" in g for g in nps4.guesses)
    # GPUs on socket 0 only of 2x8 cores with SMT: CPUs 8-15 and 24-31 are unseen
    one_numa = infer_cpu_layout([tuple(range(0, 8)) + tuple(range(16, 24))], [0])
    assert (one_numa.cpu.cores, one_numa.cpu.threads_per_core) == (16, 2)
    assert one_numa.cpu.core_of_cpu()[20] == 4
    assert any("CPUs 8-15,24-31 are near no GPU" in g for g in one_numa.guesses)


# -- NICs ----------------------------------------------------------------------


def test_nic_link_layer_is_never_assumed_from_smi():
    d = one("job_step_ansi_empty_affinity.txt")
    layers = {n.name: n.link_layer for n in d.node.hardware.nics}
    assert layers == {"mlx5_0": "unknown", "mlx5_bond_0": "Ethernet"}  # a bond is RoCE LAG


def test_nic_columns_without_a_legend_are_flagged():
    d = one("gb200_tray_numa_lists_no_legend.txt")
    assert [n.name for n in d.node.hardware.nics] == ["NIC0", "NIC1"]
    assert any(p.startswith("NIC columns NIC0, NIC1 have no NIC Legend") for p in d.problems)
    assert not any("NIC Legend" in p for p in one("job_step_ansi_empty_affinity.txt").problems)


def test_link_layer_from_sysfs_and_unknown_without_it(tmp_path):
    build_sysfs(str(tmp_path), {
        "pci_numa": {"pci0000:00": 0}, "gpus": [], "cpu": None, "nics": [
            {"name": "mlx5_bond_0", "netdev": "bond0", "link_layer": "Ethernet",
             "path": "pci0000:00/0000:00:01.0/0000:01:00.0"},
            {"name": "mlx5_0", "netdev": "ibp2s0", "path": "pci0000:00/0000:00:02.0/0000:02:00.0"},
            {"name": "mlx5_1", "link_layer": None, "path": "pci0000:00/0000:00:03.0/0000:03:00.0"},
        ]})
    got = {n.name: n.link_layer for n in Sysfs(str(tmp_path)).nics()}
    assert got == {"mlx5_0": "InfiniBand", "mlx5_1": "unknown", "mlx5_bond_0": "Ethernet"}


# -- MIG and the Slurm release --------------------------------------------------




def test_mig_lines_follow_the_slurm_release(machine):
    d = machine("a100_mig").discover()
    current = [ln for ln in gres_lines(d.node) if "MultipleFiles" in ln]
    assert current and all("Links=" not in ln for ln in current)
    assert gres_lines(d.node, slurm_version=parse_slurm_version("23.11")) == gres_lines(d.node)
    assert gres_lines(d.node, slurm_version=parse_slurm_version("23.02.7")) == gres_lines(d.node)
    old = [ln for ln in gres_lines(d.node, slurm_version=parse_slurm_version("23.02.6"))
           if "MultipleFiles" in ln]
    assert [ln.rsplit(" ", 1)[1] for ln in old] == ["Links=-1,0,0", "Links=0,-1,0",
                                                    "Links=0,0,-1"]
    plain = [ln for ln in gres_lines(d.node) if "MultipleFiles" not in ln]
    assert all("Links=" in ln for ln in plain)  # whole GPUs keep theirs


@pytest.mark.parametrize("text,version", [("23.02.7", (23, 2, 7)), ("24.05", (24, 5, 0)),
                                          ("22.05.11", (22, 5, 11))])
def test_parse_slurm_version(text, version):
    assert parse_slurm_version(text) == version


@pytest.mark.parametrize("bad", ["23", "23.x", "v23.11", "23.11.1.2", ""])
def test_bad_slurm_version(bad):
    with pytest.raises(ValueError):
        parse_slurm_version(bad)
