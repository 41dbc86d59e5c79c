"""Helpers the integration test modules share (the fixture is in conftest.py)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_devcluster():
    """scripts/devcluster.py as the module ``slurmtopo_devcluster`` (once)."""
    name = "slurmtopo_devcluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "devcluster.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


devcluster_mod = _load_devcluster()

_SLURM_PREFIX: Dict[str, str] = {}


def it_slurm() -> str:
    """The install prefix of the Slurm under test ("" = the packaged one);
    a tarball in SLURMTOPO_IT_SLURM is built (or found in the cache) once."""
    spec = os.environ.get("SLURMTOPO_IT_SLURM", "")
    if spec not in _SLURM_PREFIX:
        try:
            _SLURM_PREFIX[spec] = devcluster_mod.resolve_slurm(spec)
        except devcluster_mod.DevClusterError as exc:
            pytest.fail(f"SLURMTOPO_IT_SLURM={spec}: {exc}", pytrace=False)
    return _SLURM_PREFIX[spec]


def it_config(**kw):
    """A dev cluster Config for the Slurm under test (see the module doc);
    fails the test with the reason when that Slurm is not installed."""
    prefix = it_slurm()
    missing = devcluster_mod.missing_binaries(prefix)
    if missing:
        pytest.fail(f"integration tests need Slurm: {', '.join(missing)} not found"
                    f"{' in ' + prefix if prefix else ''}. Run: bash scripts/install-deps.sh "
                    "(apt-get install slurmctld slurmd slurm-client munge), or deselect them "
                    "with -m 'not integration'.", pytrace=False)
    kw.setdefault("topology_param", os.environ.get("SLURMTOPO_IT_TOPOLOGY_PARAM", ""))
    return devcluster_mod.Config(slurm=prefix, **kw)


def it_version() -> tuple:
    """(major, minor, micro) of the Slurm under test."""
    return devcluster_mod.version_tuple(devcluster_mod.slurm_version(it_slurm()))




def run_slurmtopo(args, cwd=ROOT, env=None, check=True) -> subprocess.CompletedProcess:
    """Run the slurmtopo CLI as a user would; with ``check``, fail the test
    with its output when it exits non-zero."""
    p = subprocess.run([sys.executable, "-m", "slurmtopo", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"slurmtopo {' '.join(map(str, args))} exited {p.returncode}\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


def scontrol_topology(cluster) -> dict:
    """switch -> {"Nodes": ..., "Switches": ...} from `scontrol show topology`."""
    out = {}
    for line in cluster.run(["scontrol", "show", "topology"]).stdout.splitlines():
        kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "SwitchName" in kv:
            out[kv["SwitchName"]] = kv
    return out


def node_records(cluster) -> list:
    """Slurm's own JSON node records, whatever the version prints them with:
    ``scontrol show nodes --json`` (23.02+), else 22.05's ``sinfo --json``.
    ``state`` is folded to one lower-case string (``idle``, ``idle+drain``)
    because 23.02+ prints a list of flags."""
    p = cluster.run(["scontrol", "show", "nodes", "--json"], check=False)
    if p.returncode != 0:
        p = cluster.run(["sinfo", "--json"])
    import json
    nodes = json.loads(p.stdout)["nodes"]
    for n in nodes:
        if isinstance(n.get("state"), list):
            n["state"] = "+".join(s.lower() for s in n["state"])
    return nodes
