"""A directory of node reports read through its compiled form."""
from __future__ import annotations

import json
import os
import pwd
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmtopo.errors import InventoryError
from slurmtopo.files.yamlio import dump_yaml
from slurmtopo.inventory import compiled
from slurmtopo.inventory.compiled import COMPILED_NAME, cache_slot, without_uuids
from slurmtopo.inventory.schema import (inventory_dict, load_inventory, node_report,
                                        report_dir_schema)

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"


def _write_reports(d: Path, odd=("dgx006",), mig=()):
    """A report per node of the 32-node example, every GPU with its own
    UUID; ``odd`` nodes have their first NIC down; plus the fabric file."""
    inv = load_inventory(EXAMPLES / "h100-32node-fattree.yaml")
    d.mkdir(exist_ok=True)
    for n in inv:
        hw = replace(n.hardware, gpus=tuple(replace(g, uuid=f"GPU-{n.name}-{g.index}")
                                            for g in n.hardware.gpus))
        if n.name in odd:
            hw = replace(hw, nics=tuple(replace(x, state="down") if i == 0 else x
                                        for i, x in enumerate(hw.nics)))
        if n.name in mig:
            from slurmtopo.inventory.model import MigDevice
            gpus = list(hw.gpus)
            gpus[0] = replace(gpus[0], mig_mode=True, mig=(MigDevice(
                gi_id=1, ci_id=0, profile="3g.40gb", uuid=f"MIG-{n.name}"),))
            hw = replace(hw, gpus=tuple(gpus))
        (d / f"{n.name}.yaml").write_text(node_report(replace(n, hardware=hw),
                                                      {"hostname": n.name, "source": "test"}))
    (d / "fabric.yaml").write_text(dump_yaml({"slurmtopo": "fabric", "version": 1,
                                              "fabric": inventory_dict(inv)["fabric"]}))
    return inv


def _uncompiled(d: Path):
    """The directory as merged documents, without the compiled form."""
    from slurmtopo.files.yamlio import load_document
    from slurmtopo.inventory.schema import merge_inventories, parse_inventory

    files = sorted(f for f in os.listdir(d) if f.endswith(".yaml"))
    return merge_inventories([parse_inventory(load_document(str(d / f)), str(d / f))
                              for f in files])


def test_reports_fold_into_one_type_with_an_override(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d)
    inv = load_inventory(str(d))
    doc = json.loads((d / COMPILED_NAME).read_text())
    assert list(doc["node_types"]) == ["h100-80gb-hbm3-8"]
    entries = {e["name"]: e for e in doc["nodes"]}
    assert set(entries) == {"dgx[001-005]", "dgx006", "dgx[007-032]"}
    assert entries["dgx006"]["type"] == "h100-80gb-hbm3-8"
    assert entries["dgx006"]["nics"][0]["state"] == "down"      # the difference only
    assert "gpus" not in entries["dgx006"] and "links" not in entries["dgx006"]
    # the same cluster as the reports read one by one, GPU UUIDs aside
    ref = _uncompiled(d)
    assert list(inv.nodes) == list(ref.nodes)
    for name, node in ref.nodes.items():
        assert inv.nodes[name].hardware == without_uuids(node.hardware), name
    assert inv.reports == ref.reports and inv.fabric == ref.fabric
    # nodes of one build share one hardware object (what the planner caches on)
    assert inv.nodes["dgx001"].hardware is inv.nodes["dgx032"].hardware
    assert inv.nodes["dgx006"].hardware is not inv.nodes["dgx001"].hardware


def test_only_changed_reports_are_read_again(tmp_path, monkeypatch):
    d = tmp_path / "reports"
    _write_reports(d)
    load_inventory(str(d))
    first = (d / COMPILED_NAME).read_text()
    read = []
    real = compiled._parse_files
    monkeypatch.setattr(compiled, "_parse_files", lambda paths, r: read.extend(
        os.path.basename(p) for p in paths) or real(paths, r))
    _, log = compiled.load_report_dir(str(d), report_dir_schema())
    assert read == ["fabric.yaml"] and log == []               # nothing to rebuild
    assert (d / COMPILED_NAME).read_text() == first
    # one report changes (size and time): only it is read, the result follows it
    path = d / "dgx010.yaml"
    path.write_text(path.read_text().replace("source: test", "source: test-again"))
    os.utime(path, ns=(1, 1))
    read.clear()
    inv = load_inventory(str(d))
    assert sorted(read) == ["dgx010.yaml", "fabric.yaml"]
    assert inv.reports["dgx010"]["source"] == "test-again"


def test_removed_report_drops_the_node(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d)
    load_inventory(str(d))
    (d / "dgx032.yaml").unlink()
    (d / "fabric.yaml").write_text((d / "fabric.yaml").read_text().replace("dgx[025-032]",
                                                                           "dgx[025-031]"))
    assert "dgx032" not in load_inventory(str(d)).nodes


def test_compiled_form_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write_reports(a)
    _write_reports(b)
    load_inventory(str(a))
    load_inventory(str(b))
    ta = json.loads((a / COMPILED_NAME).read_text())
    tb = json.loads((b / COMPILED_NAME).read_text())
    for doc in (ta, tb):  # modification times and the path differ by construction
        doc["compiled"] = {k: v for k, v in doc["compiled"].items() if k not in ("files", "from")}
    assert ta == tb


def test_mig_nodes_keep_their_uuids(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d, odd=(), mig=("dgx003",))
    inv = load_inventory(str(d))
    g0 = inv.nodes["dgx003"].hardware.gpus[0]
    assert g0.uuid == "GPU-dgx003-0" and g0.mig[0].uuid == "MIG-dgx003"
    assert inv.nodes["dgx004"].hardware.gpus[0].uuid is None


def test_a_shared_directory_uses_the_user_cache(tmp_path, monkeypatch):
    # a directory others may write in: the compiled form goes to the user's
    # own cache, 0600 in 0700 directories, and is read back from there
    d = tmp_path / "reports"
    _write_reports(d)
    os.chmod(d, 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, log = compiled.load_report_dir(str(d), report_dir_schema())
    assert not (d / COMPILED_NAME).exists()
    with cache_slot(str(d)) as slot:
        mine = Path(slot.where)
    assert mine.exists() and str(mine) in log[0]
    assert mine.is_relative_to(tmp_path / "cache" / "slurmtopo")
    assert stat.S_IMODE(mine.stat().st_mode) == 0o600
    for p in (mine.parent, mine.parent.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700
    _, log = compiled.load_report_dir(str(d), report_dir_schema())  # and is read back from there
    assert log == []


def test_the_compiled_form_is_private_whatever_the_umask(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d)
    old = os.umask(0)
    try:
        load_inventory(str(d))
    finally:
        os.umask(old)
    assert stat.S_IMODE((d / COMPILED_NAME).stat().st_mode) == 0o600


def _poison(d: Path) -> None:
    """A compiled form that matches the reports on disk but lies (one node
    more), as another user could write it."""
    load_inventory(str(d))
    doc = json.loads((d / COMPILED_NAME).read_text())
    evil = dict(doc["nodes"][0], name="evil001")
    doc["nodes"].append(evil)
    (d / COMPILED_NAME).unlink()
    (d / COMPILED_NAME).write_text(json.dumps(doc))
    os.chmod(d / COMPILED_NAME, 0o600)


def test_the_poisoned_compiled_form_would_be_read_if_it_were_the_users_own(tmp_path):
    # the checks below mean something: a compiled form of this user's is used
    d = tmp_path / "reports"
    _write_reports(d)
    _poison(d)
    assert "evil001" in load_inventory(str(d)).nodes


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_compiled_form_another_user_owns_is_never_read(tmp_path):
    d = tmp_path / "reports"
    want = _write_reports(d)
    _poison(d)
    nobody = pwd.getpwnam("nobody")
    os.chown(d / COMPILED_NAME, nobody.pw_uid, nobody.pw_gid)
    inv = load_inventory(str(d))
    assert "evil001" not in inv.nodes and set(inv.nodes) == set(want.nodes)
    assert (d / COMPILED_NAME).stat().st_uid == os.geteuid()  # replaced by the user's own


@pytest.mark.parametrize("mode", [0o620, 0o602])
def test_a_compiled_form_others_may_write_is_never_read(tmp_path, mode):
    d = tmp_path / "reports"
    _write_reports(d)
    _poison(d)
    os.chmod(d / COMPILED_NAME, mode)
    assert "evil001" not in load_inventory(str(d)).nodes
    assert stat.S_IMODE((d / COMPILED_NAME).stat().st_mode) == 0o600


def test_a_compiled_form_planted_in_a_shared_directory_is_never_read(tmp_path, monkeypatch):
    d = tmp_path / "reports"
    _write_reports(d)
    _poison(d)
    os.chmod(d, 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert "evil001" not in load_inventory(str(d)).nodes


def test_no_symbolic_link_is_followed(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d)
    _poison(d)
    target = tmp_path / "elsewhere.json"
    os.replace(d / COMPILED_NAME, target)
    before = target.read_bytes()
    (d / COMPILED_NAME).symlink_to(target)
    assert "evil001" not in load_inventory(str(d)).nodes  # not read through the link
    assert target.read_bytes() == before  # nor written through it
    assert not (d / COMPILED_NAME).is_symlink()


def test_a_damaged_compiled_form_is_rebuilt(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d)
    load_inventory(str(d))
    (d / COMPILED_NAME).write_text("{not json")
    inv = load_inventory(str(d))
    assert len(inv.nodes) == 32
    assert json.loads((d / COMPILED_NAME).read_text())["compiled"]["version"] == 1


def test_a_bad_report_is_one_located_error(tmp_path):
    d = tmp_path / "reports"
    _write_reports(d)
    (d / "dgx002.yaml").write_text("slurmtopo: node-report\nversion: 1\nnodes: [}\n")
    with pytest.raises(InventoryError, match="dgx002.yaml"):
        load_inventory(str(d))


def test_compile_command_writes_one_file(tmp_path):
    from slurmtopo.cli import cli

    d = tmp_path / "reports"
    _write_reports(d)
    out = tmp_path / "cluster.json"
    res = CliRunner().invoke(cli, ["inventory", "compile", str(d), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "32 node(s) -> 1 node type(s)" in res.output
    inv = load_inventory(str(out))             # the one file holds nodes and fabric
    assert len(inv.nodes) == 32 and inv.fabric.switches
    assert inv.reports["dgx006"]["hostname"] == "dgx006"
    res = CliRunner().invoke(cli, ["inventory", "compile", str(tmp_path / "nope")])
    assert res.exit_code != 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the entry away")
def test_an_entry_someone_else_owns_in_the_user_cache_is_not_read(tmp_path, monkeypatch):
    """A compiled inventory in the user's cache that another user wrote
    (through a cache directory they could write) must be rebuilt, not read;
    and the cache's directories stay private under umask 002."""
    d = tmp_path / "reports"
    _write_reports(d)
    os.chmod(d, 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old = os.umask(0o002)
    try:
        compiled.load_report_dir(str(d), report_dir_schema())
    finally:
        os.umask(old)
    with cache_slot(str(d)) as slot:
        entry = Path(slot.where)
    for p in (entry.parent, entry.parent.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    os.chown(entry, 4242, -1)
    _, log = compiled.load_report_dir(str(d), report_dir_schema())
    assert log and log[0].startswith("compiled ")      # rebuilt, not read


def test_many_reports_are_read_in_worker_processes(tmp_path, monkeypatch):
    """From PARALLEL_FILES reports up the reports are parsed in a process
    pool; the inventory is the one one process reads."""
    d = tmp_path / "reports"
    _write_reports(d)
    serial = inventory_dict(load_inventory(str(d), write_cache=False))
    monkeypatch.setattr(compiled, "PARALLEL_FILES", 2)
    monkeypatch.setattr(compiled.os, "cpu_count", lambda: 2)
    pooled = inventory_dict(load_inventory(str(d), write_cache=False))
    assert pooled == serial
