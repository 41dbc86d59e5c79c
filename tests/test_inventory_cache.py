"""A big inventory file read through its compiled form (slurmtopo.inventory.cache),
kept where only its user can write (slurmtopo.files.usercache)."""
from __future__ import annotations

import json
import os
import pwd
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from bench.scenarios import cluster
from slurmtopo import api
from slurmtopo.errors import InventoryError
from slurmtopo.files import usercache
from slurmtopo.files.yamlio import load_document
from slurmtopo.inventory import cache as inventory_cache
from slurmtopo.inventory.schema import dump_inventory, load_inventory, parse_inventory

SUFFIX = inventory_cache.SUFFIX


@pytest.fixture(autouse=True)
def _small_is_big_and_a_private_home(monkeypatch, tmp_path):
    """Every inventory here gets a compiled form; the user's cache
    directory is a fresh one."""
    monkeypatch.setattr(inventory_cache, "MIN_NODES", 1)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def write(tmp_path: Path, inv, name="inv.yaml", cost=None) -> Path:
    d = tmp_path / "site"
    d.mkdir(mode=0o755, exist_ok=True)
    path = d / name
    text = dump_inventory(inv)
    if cost:
        text += cost
    path.write_text(text)
    return path


def parsed(path: Path):
    return parse_inventory(load_document(str(path)), str(path))


def built(monkeypatch) -> list:
    """Records each inventory built from a compiled form."""
    calls: list = []
    real = inventory_cache.build
    monkeypatch.setattr(inventory_cache, "build", lambda *a: calls.append(1) or real(*a))
    return calls


def beside(path: Path) -> Path:
    return path.parent / f".{path.name}{SUFFIX}"


def per_user(tmp_path: Path, path: Path) -> Path:
    import hashlib

    digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:32]
    return tmp_path / "cache" / "slurmtopo" / inventory_cache.KIND / (digest + SUFFIX)


@pytest.mark.parametrize("shape,nodes", [("fattree3", 300), ("nvl72", 36), ("mixed", 64)])
def test_the_compiled_form_loads_the_same_inventory(tmp_path, monkeypatch, shape, nodes):
    # node types, NVLink domains, blocks, several types on one tree, a
    # cost block: the inventory from the compiled form equals the file's,
    # and nodes of one type share one hardware object as they do parsed
    path = write(tmp_path, cluster(shape, nodes),
                 cost="cost:\n  oversubscription: {NET_L1: 2}\n")
    first = api.load_cluster(str(path))
    entry = beside(path)
    assert entry.exists() and stat.S_IMODE(entry.stat().st_mode) == 0o600
    calls = built(monkeypatch)
    again = api.load_cluster(str(path))
    assert calls == [1]
    want = parsed(path)
    assert again == want == first
    assert [s.origin for s in again.fabric.switches] == [s.origin for s in want.fabric.switches]
    assert [n.origin for n in again] == [n.origin for n in want]
    shared = lambda inv: sorted(len({n.name for n in inv if n.hardware is hw})  # noqa: E731
                                for hw in {id(n.hardware): n.hardware for n in inv}.values())
    assert shared(again) == shared(want)
    assert again.cost == {"oversubscription": {"NET_L1": 2}}


def test_a_changed_file_is_read_again(tmp_path, monkeypatch):
    path = write(tmp_path, cluster("fattree3", 64))
    api.load_cluster(str(path))
    text = path.read_text()
    assert "type: hgx-h100-8}" in text
    path.write_text(text.replace("type: hgx-h100-8}", "type: hgx-h100-8, features: [x]}"))
    calls = built(monkeypatch)
    inv = api.load_cluster(str(path))
    assert calls == []  # the entry is of the old content: not used
    assert inv.node("n001").features == ("x",) and inv == parsed(path)
    assert api.load_cluster(str(path)) == inv and calls == [1]  # and rebuilt


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "garbage"])
def test_a_damaged_entry_is_rebuilt(tmp_path, monkeypatch, damage):
    path = write(tmp_path, cluster("fattree3", 64))
    api.load_cluster(str(path))
    entry = beside(path)
    data = entry.read_bytes()
    head, _, payload = data.partition(b"\n")
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":  # a node renamed in the payload: the checksum no longer holds
        data = head + b"\n" + payload.replace(b'"n007"', b'"x007"')
    elif damage == "header":
        h = json.loads(head)
        h["format"] = -1
        data = json.dumps(h).encode() + b"\n" + payload
    else:
        data = b"\x00\xff not an entry"
    entry.write_bytes(data)
    calls = built(monkeypatch)
    inv = api.load_cluster(str(path))
    assert calls == [] and inv == parsed(path)
    assert "x007" not in inv.nodes
    assert entry.read_bytes().partition(b"\n")[2] == payload  # written again


def _poison(path: Path, entry: Path) -> None:
    """A well-formed entry for the file's content whose inventory lies (one
    node more), as another user could craft it."""
    text = path.read_text()
    inv = parsed(path)
    extra = dict(inv.nodes)
    extra["evil001"] = replace(inv.node("n001"), name="evil001")
    fake = replace(inv, nodes=extra)
    sha = inventory_cache.sha256_hex(text.encode())
    data = inventory_cache.entry_bytes(fake, str(path), sha, _schema())
    assert data is not None
    entry.write_bytes(data)


def _schema():
    from slurmtopo.inventory.schema import file_schema
    return file_schema()


def test_the_poisoned_entry_would_be_read_if_it_were_the_users_own(tmp_path):
    # the check below means something: a valid entry of this user's is used
    path = write(tmp_path, cluster("fattree3", 64))
    _poison(path, beside(path))
    os.chmod(beside(path), 0o600)
    assert "evil001" in api.load_cluster(str(path)).nodes


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_an_entry_another_user_owns_is_never_read(tmp_path):
    path = write(tmp_path, cluster("fattree3", 64))
    entry = beside(path)
    _poison(path, entry)
    nobody = pwd.getpwnam("nobody")
    os.chown(entry, nobody.pw_uid, nobody.pw_gid)
    inv = api.load_cluster(str(path))
    assert "evil001" not in inv.nodes and inv == parsed(path)
    # replaced by the user's own (the directory is theirs)
    assert entry.stat().st_uid == os.geteuid()


def test_an_entry_others_may_write_is_never_read(tmp_path):
    path = write(tmp_path, cluster("fattree3", 64))
    entry = beside(path)
    _poison(path, entry)
    os.chmod(entry, 0o666)
    assert "evil001" not in api.load_cluster(str(path)).nodes


def test_a_directory_others_may_write_keeps_no_entry(tmp_path):
    # a shared directory: the entry goes to the user's own cache, 0600 in
    # 0700 directories, and an entry planted beside the file is ignored
    path = write(tmp_path, cluster("fattree3", 64))
    os.chmod(path.parent, 0o777)
    _poison(path, beside(path))
    os.chmod(beside(path), 0o600)
    inv = api.load_cluster(str(path))
    assert "evil001" not in inv.nodes
    mine = per_user(tmp_path, path)
    assert mine.exists() and stat.S_IMODE(mine.stat().st_mode) == 0o600
    for d in (mine.parent, mine.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert api.load_cluster(str(path)) == inv


def test_no_symbolic_link_is_followed(tmp_path):
    path = write(tmp_path, cluster("fattree3", 64))
    target = tmp_path / "elsewhere"
    _poison(path, target)
    os.chmod(target, 0o600)
    before = target.read_bytes()
    beside(path).symlink_to(target)
    assert "evil001" not in api.load_cluster(str(path)).nodes  # not read through the link
    assert target.read_bytes() == before  # nor written through it
    assert not beside(path).is_symlink() and beside(path).stat().st_uid == os.geteuid()


def test_a_cache_directory_that_is_a_link_is_not_used(tmp_path):
    path = write(tmp_path, cluster("fattree3", 64))
    os.chmod(path.parent, 0o777)  # so the entry would go to the user's cache
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "slurmtopo").symlink_to(other)
    inv = api.load_cluster(str(path))
    assert inv == parsed(path)
    assert list(other.iterdir()) == []


def test_small_inventories_get_no_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory_cache, "MIN_NODES", 1000)
    path = write(tmp_path, cluster("fattree3", 64))
    api.load_cluster(str(path))
    assert not beside(path).exists()
    assert not (tmp_path / "cache").exists()


def test_a_bad_cost_block_is_located_on_every_load(tmp_path):
    # the compiled form is kept only for an inventory whose cost block
    # holds, so the error keeps its line on the second run too
    path = write(tmp_path, cluster("fattree3", 64),
                 cost="cost:\n  oversubscription: {NET_L1: -2}\n")
    for _ in range(2):
        with pytest.raises(InventoryError) as exc:
            api.load_cluster(str(path))
        assert exc.value.line is not None and "oversubscription" in exc.value.render()
    assert not beside(path).exists()


def test_loaders_without_the_whole_check_keep_no_entry(tmp_path):
    path = write(tmp_path, cluster("fattree3", 64))
    assert load_inventory(str(path)) == parsed(path)
    assert not beside(path).exists()


def test_usercache_slot_refuses_a_home_it_cannot_use(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")
    monkeypatch.setenv("HOME", "")
    d = tmp_path / "shared"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    assert usercache.slot_for(str(d / "x.yaml"), "k") is None


# --------------------------------------------------------------------------
# the derived tables kept in an entry (fabric tree, lower bound's statistics)


def _files(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("shape,nodes", [("fattree3", 300), ("nvl72", 72), ("mixed", 64)])
def test_a_plan_from_the_warm_entry_equals_a_cold_one(tmp_path, monkeypatch, shape, nodes):
    # no entry at all, the first load (which writes the entry), the next
    # (which reads it, tables included): the same outputs and preview
    from tests.clirun import run_cli

    path = write(tmp_path, cluster(shape, nodes))
    out = tmp_path / "out"
    argv = ["plan", "--inventory", str(path), "--tp", "4", "--pp", "2", "--dp", "4",
            "--output-dir", str(out), "--", "python", "train.py"]
    runs = []
    monkeypatch.setattr(inventory_cache, "MIN_NODES", 10 ** 9)
    for label in ("no entry", "cold", "warm"):
        if label == "cold":
            monkeypatch.setattr(inventory_cache, "MIN_NODES", 1)
        code, stdout, stderr = run_cli(argv)
        assert code == 0, stderr
        runs.append((label, stdout, _files(out)))
        assert beside(path).exists() == (label != "no entry")
    calls = built(monkeypatch)
    run_cli(argv)
    assert calls == [1]  # the last run did read the entry
    assert runs[0][1:] == runs[1][1:] == runs[2][1:]


def test_a_warm_load_takes_its_tables_from_the_entry(tmp_path, monkeypatch):
    from slurmtopo.cost import bound
    from slurmtopo.placement import fabric

    path = write(tmp_path, cluster("fattree3", 300))
    cold = api.load_cluster(str(path))
    want_tree, want_stats = fabric.build_tree(cold), bound.InventoryStats(cold)

    def refused(*_):
        raise AssertionError("built again")

    monkeypatch.setattr(fabric, "build_tree", refused)
    monkeypatch.setattr(bound.InventoryStats, "__init__", refused)
    warm = api.load_cluster(str(path))
    assert warm is not cold
    assert fabric.fabric_tree(warm) == want_tree
    assert bound.inventory_stats(warm) == want_stats
    # the tree's node list is the warm inventory's own objects
    assert all(a is b for a, b in zip(fabric.fabric_tree(warm).nodes, warm))


def _rewrite_tables(path: Path, entry: Path, change) -> None:
    """The entry with its tables changed by ``change`` and its checksum made
    to match again (as the user could do by hand)."""
    head, _, payload = entry.read_bytes().partition(b"\n")
    img = json.loads(payload)
    change(img["derived"])
    new = json.dumps(img, separators=(",", ":")).encode()
    h = json.loads(head)
    h["payload_sha256"] = inventory_cache.sha256_hex(new)
    entry.write_bytes(json.dumps(h, separators=(",", ":")).encode() + b"\n" + new)


@pytest.mark.parametrize("damage", ["short tree", "pod out of range", "run", "stats hardware",
                                    "stats count", "not a table"])
def test_tables_that_do_not_fit_the_inventory_are_refused(tmp_path, monkeypatch, damage):
    from slurmtopo.cost import bound
    from slurmtopo.placement import fabric

    path = write(tmp_path, cluster("fattree3", 64))
    api.load_cluster(str(path))
    entry = beside(path)
    good = entry.read_bytes()

    def change(derived):
        tree, stats = derived[fabric.TABLE], derived[bound.STATS_TABLE]
        if damage == "short tree":
            tree["node_pod"][-1][1] -= 1
        elif damage == "pod out of range":
            tree["node_pod"][0][0] = tree["pods"] + 5
        elif damage == "run":
            tree["tree_order"][0][1] = -3
        elif damage == "stats hardware":
            stats["sets"][0][0] = 99
        elif damage == "stats count":
            stats["node_max"] = -1
        else:
            derived[fabric.TABLE] = "x"

    _rewrite_tables(path, entry, change)
    calls = built(monkeypatch)
    inv = api.load_cluster(str(path))
    assert calls == [1]  # read, refused (the build raised) ...
    assert inv == parsed(path)
    assert fabric.fabric_tree(inv) == fabric.build_tree(inv)
    assert bound.inventory_stats(inv) == bound.InventoryStats(inv)
    assert entry.read_bytes() == good  # ... and written again from the file


@pytest.mark.parametrize("shape,nodes", [("fattree3", 300), ("nvl72", 72), ("mixed", 64)])
def test_same_tree_says_what_equality_says(shape, nodes):
    # the one-pass comparison the entry's read-back check uses
    from slurmtopo.placement import fabric

    inv = cluster(shape, nodes)
    tree = fabric.build_tree(inv)

    def copy():
        return fabric.tree_from_json(json.loads(json.dumps(fabric.tree_json(tree))), inv)

    assert fabric.same_tree(tree, copy()) and tree == copy()
    changes = [lambda t: t.pods[-1].members.append(0),
               lambda t: setattr(t.pods[0], "key", list(t.pods[0].key)),
               lambda t: setattr(t.pods[0], "name", t.pods[0].name + "x"),
               lambda t: t.upper[-1].children.reverse(),
               lambda t: t.tree_order.reverse(),
               lambda t: setattr(t, "levels", t.levels + 1),
               lambda t: t.pod_l1.reverse()]
    for change in changes:
        other = copy()
        change(other)
        assert fabric.same_tree(tree, other) == (tree == other)


def test_an_entry_made_by_other_code_is_rebuilt(tmp_path, monkeypatch):
    # an upgrade or an edited module may derive other tables from the same
    # file: the entry names the code that made it and is not used by another
    from slurmtopo.placement import fabric

    path = write(tmp_path, cluster("fattree3", 64))
    with monkeypatch.context() as m:
        m.setattr(inventory_cache, "code_fingerprint", lambda: "other code")
        api.load_cluster(str(path))
    stale = beside(path).read_bytes()
    calls = built(monkeypatch)
    inv = api.load_cluster(str(path))
    assert calls == [] and inv == parsed(path)
    assert fabric.fabric_tree(inv) == fabric.build_tree(inv)
    assert beside(path).read_bytes() != stale  # written again by this code
    api.load_cluster(str(path))
    assert calls == [1]


def test_the_code_fingerprint_reads_the_whole_package(monkeypatch):
    # the module sits in slurmtopo/inventory/, but the tables an entry keeps
    # come from the planner and the cost model too: every module of the
    # package counts, not only its own folder's
    import slurmtopo

    top = os.path.dirname(os.path.abspath(slurmtopo.__file__))
    seen, scandir = [], os.scandir
    monkeypatch.setattr(os, "scandir", lambda d: seen.append(os.path.relpath(d, top))
                        or scandir(d))
    inventory_cache.code_fingerprint()
    assert seen[0] == "."
    assert {"cost", "placement", "plan", "inventory"} <= set(seen)
