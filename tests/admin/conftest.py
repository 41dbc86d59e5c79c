"""Shared helpers for the admin tooling tests: fixtures, model objects, CLI."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, Optional

import pytest

from slurmtopo.inventory.model import Gpu, Hardware, Nic, Node, NvlinkDomain
from slurmtopo.inventory.schema import node_report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ibnetdiscover"
REPO = Path(__file__).resolve().parents[2]


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def of_kind(fabric, kind: str) -> list:
    """The nodes of a parsed ibnetdiscover fabric that are ``kind`` ("ca",
    "switch", "router")."""
    return [n for n in fabric.nodes.values() if n.kind == kind]


def hardware(gpus: int = 8, nics: Iterable[tuple] = (), model: str = "NVIDIA H100 80GB HBM3",
             nvswitch: bool = True) -> Hardware:
    links = tuple(tuple("X" if i == j else "NV18" for j in range(gpus)) for i in range(gpus))
    return Hardware(
        gpus=tuple(Gpu(index=i, model=model, cpus=tuple(range(0, 8)) if i < gpus // 2
                       else tuple(range(8, 16))) for i in range(gpus)),
        links=links, nvswitch=nvswitch,
        nics=tuple(Nic(name=n, role=r) for n, r in nics))


def node(name: str, hw: Optional[Hardware] = None, domain: Optional[tuple] = None) -> Node:
    return Node(name=name, hardware=hw or hardware(),
                nvlink_domain=NvlinkDomain(*domain) if domain else None)


def write_reports(directory, nodes: Iterable[Node],
                  reports: Optional[Dict[str, dict]] = None) -> str:
    os.makedirs(directory, exist_ok=True)
    for n in nodes:
        rep = dict((reports or {}).get(n.name, {"source": "test"}))
        Path(directory, f"{n.name}.yaml").write_text(node_report(n, rep))
    return str(directory)


def fake_gres_lines(node: Node, report=None):
    """One line per GPU with Links (like the agent on a non-NVSwitch node)."""
    n = node.hardware.gpu_count
    out = []
    for i in range(n):
        links = ",".join("-1" if j == i else "4" for j in range(n))
        cores = "0-7" if i < n // 2 else "8-15"
        out.append(f"Name=gpu Type=h100 File=/dev/nvidia{i} Cores={cores} Links={links}")
    return out


def run_main(args, capsys):
    """Run the real entry point (error handling included); (rc, out, err)."""
    from slurmtopo.cli import main
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err
