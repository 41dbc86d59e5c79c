"""Broken and hostile input, everywhere: one line, a non-zero exit, no
traceback, bounded time and memory, and outputs written all or not at all.

Permission failures are made so that they fail for root too (tests run as
root): a path under a regular file (ENOTDIR), an output name taken by a
directory (EISDIR), or a forked child that drops to ``nobody``.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.clirun import one_line_error, run_cli, run_cli_unprivileged

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"
INV = str(EXAMPLES / "h100-4node-2leaf.yaml")
STATE = str(EXAMPLES / "h100-32node-state.yaml")
PLAN = ["plan", "--inventory", INV, "--tp", "8", "--dp", "2"]
PLAN_FILES = ("rankmap.json", "rankmap.csv", "env.json", "job.sbatch")


def _snapshot(directory: Path):
    return {p.name: (p.read_bytes() if p.is_file() else "dir")
            for p in sorted(directory.iterdir())}


# -- no traceback, ever ----------------------------------------------------

def test_plan_output_dir_under_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    code, _out, err = run_cli(PLAN + ["-o", str(tmp_path / "f" / "plan"), "--", "python", "t.py"])
    one_line_error(code, err, str(tmp_path / "f" / "plan"), "cannot create the output directory")


def test_plan_output_dir_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    code, _out, err = run_cli(PLAN + ["-o", str(tmp_path / "f")])
    one_line_error(code, err, str(tmp_path / "f"))
    assert (tmp_path / "f").read_text() == "x"


@pytest.fixture
def shared_dir():
    """A directory root owns and others may enter but not write (0755)."""
    d = tempfile.mkdtemp(prefix="slurmtopo-ro-")
    os.chmod(d, 0o755)
    yield Path(d)
    import shutil
    shutil.rmtree(d)


def test_plan_unwritable_output_dir_names_the_target(shared_dir):
    out = shared_dir / "plan"
    out.mkdir()
    code, _o, err = run_cli(PLAN + ["-o", str(out), "--", "python", "t.py"])  # imports all
    assert code == 0, err
    before = _snapshot(out)
    code, err = run_cli_unprivileged(PLAN + ["-o", str(out), "--", "python", "t.py"])
    line = one_line_error(code, err, "Permission denied")
    assert any(str(out / f) in line for f in PLAN_FILES), line
    assert ".tmp" not in line and ".bak" not in line and ".old" not in line
    assert _snapshot(out) == before


def test_plan_output_dir_nobody_may_not_create(shared_dir):
    run_cli(PLAN + ["-o", str(shared_dir / "warm")])
    code, err = run_cli_unprivileged(PLAN + ["-o", str(shared_dir / "new")])
    one_line_error(code, err, str(shared_dir / "new"), "Permission denied")
    assert not (shared_dir / "new").exists()


def test_daemon_spool_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    code, _o, err = run_cli(["daemon", "run", "--inventory", INV, "--spool",
                             str(tmp_path / "f"), "--once"])
    one_line_error(code, err, str(tmp_path / "f"), "spool directory is not a directory")
    code, _o, err = run_cli(["daemon", "run", "--inventory", INV, "--spool",
                             str(tmp_path / "f" / "sub"), "--once"])
    one_line_error(code, err, str(tmp_path / "f" / "sub"), "cannot create the spool directory")


def test_daemon_spool_unwritable_for_a_user(shared_dir):
    import slurmtopo.daemon.loop  # noqa: F401 - imported before dropping privileges
    import slurmtopo.daemon.scheduler  # noqa: F401
    import slurmtopo.commands.daemon  # noqa: F401
    from slurmtopo.inventory import load_inventory
    load_inventory(INV)
    code, err = run_cli_unprivileged(["daemon", "run", "--inventory", INV, "--spool",
                                      str(shared_dir), "--once"])
    # root's spool: refused before anything is written (docs/security.md)
    one_line_error(code, err, str(shared_dir), "belongs to uid 0, not to the daemon's user")
    assert list(shared_dir.iterdir()) == []
    # the default spool (/var/spool/slurmtopo) for a user: missing or root's
    code, err = run_cli_unprivileged(["daemon", "run", "--inventory", INV, "--once"])
    one_line_error(code, err, "/var/spool/slurmtopo")


# -- all or nothing ----------------------------------------------------------

def test_plan_writes_all_outputs_or_none(tmp_path):
    out = tmp_path / "plan"
    code, _o, err = run_cli(PLAN + ["-o", str(out), "--job-name", "first", "--",
                                    "python", "t.py"])
    assert code == 0, err
    (out / "env.json").unlink()
    (out / "env.json").mkdir()  # one output cannot be written
    before = _snapshot(out)
    code, _o, err = run_cli(["plan", "--inventory", INV, "--tp", "4", "--dp", "2",
                             "-o", str(out), "--job-name", "second", "--", "python", "t.py"])
    one_line_error(code, err, str(out / "env.json"))
    assert _snapshot(out) == before  # the other three are the first plan's still


def test_write_all_rolls_back_when_a_rename_fails(tmp_path, monkeypatch):
    from slurmtopo import fileio
    from slurmtopo.errors import SlurmtopoError

    for name in ("a", "b"):
        (tmp_path / name).write_text(f"old {name}\n")
    real_replace = os.replace

    def replace(src, dst):
        if os.fspath(dst).endswith("/c") and os.fspath(src).endswith(".tmp"):
            raise PermissionError(13, "Permission denied")
        return real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "replace", replace)
    outs = [fileio.Output(str(tmp_path / n), f"new {n}\n") for n in ("a", "b", "c")]
    with pytest.raises(SlurmtopoError) as exc:
        fileio.write_all(outs)
    assert exc.value.path == str(tmp_path / "c") and "Permission denied" in exc.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert (tmp_path / "a").read_text() == "old a\n"
    assert (tmp_path / "b").read_text() == "old b\n"


def test_write_all_keeps_backups_and_no_temporaries(tmp_path):
    from slurmtopo import fileio

    (tmp_path / "a").write_text("old\n")
    backups = fileio.write_all([fileio.Output(str(tmp_path / "a"), "new\n"),
                                fileio.Output(str(tmp_path / "b"), "b\n", mode=0o777)],
                               backup=True, stamp="20250101-000000")
    assert backups == {str(tmp_path / "a"): str(tmp_path / "a.20250101-000000.bak"),
                       str(tmp_path / "b"): None}
    assert (tmp_path / "a.20250101-000000.bak").read_text() == "old\n"
    assert (tmp_path / "a").read_text() == "new\n"
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o775  # never world-writable
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a.20250101-000000.bak", "b"]


@pytest.mark.parametrize("sync", [True, False])
def test_write_all_fsyncs_unless_told_not_to(tmp_path, monkeypatch, sync):
    """sync=False (a job's run directory) writes the same files, all or
    none, without one fsync; the default flushes every file and directory."""
    from slurmtopo import fileio

    synced = []
    monkeypatch.setattr(fileio.os, "fsync", lambda fd: synced.append(fd))
    (tmp_path / "a").write_text("old\n")
    fileio.write_all([fileio.Output(str(tmp_path / "a"), "new\n"),
                      fileio.Output(str(tmp_path / "b"), "b\n")], sync=sync)
    assert (tmp_path / "a").read_text() == "new\n" and (tmp_path / "b").read_text() == "b\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert len(synced) == (3 if sync else 0)  # two files and their directory


# -- bounded time and memory -----------------------------------------------------

@pytest.mark.parametrize("flag", ["--inventory", "--state"])
def test_a_device_is_not_read(flag):
    argv = ["plan", "--tp", "8", "--inventory", "/dev/zero" if flag == "--inventory" else INV]
    if flag == "--state":
        argv += ["--state", "/dev/zero"]
    code, _o, err = run_cli(argv)
    one_line_error(code, err, "/dev/zero", "is a device")


def test_a_file_is_read_up_to_the_cap(tmp_path, monkeypatch):
    from slurmtopo import fileio

    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 * fileio.MiB) + "\n")
    monkeypatch.setattr(fileio, "MAX_TEXT_BYTES", fileio.MiB)
    code, _o, err = run_cli(["plan", "--inventory", str(big), "--tp", "8"])
    one_line_error(code, err, str(big), "larger than 1 MiB")


def test_a_pipe_is_read_up_to_the_cap(tmp_path, monkeypatch):
    import threading
    from slurmtopo import fileio

    fifo = tmp_path / "inv.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(fileio, "MAX_TEXT_BYTES", fileio.MiB)

    def endless():  # like `--inventory <(yes)`: never ends on its own
        try:
            with open(fifo, "wb") as fh:
                while True:
                    fh.write(b"y\n" * 65536)
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    code, _o, err = run_cli(["plan", "--inventory", str(fifo), "--tp", "8"])
    writer.join(timeout=30)
    one_line_error(code, err, str(fifo), "larger than 1 MiB")


def test_groups_world_is_capped():
    code, _o, err = run_cli(["groups", "--world", "1000000000000"])
    one_line_error(code, err, "1,000,000,000,000", "larger than 262,144 ranks")
    code, _o, err = run_cli(["groups", "--tp", "100000", "--dp", "100000"])
    one_line_error(code, err, "larger than")


BOMB = ("slurmtopo: inventory\nversion: 1\n"
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
                  for p, c in zip("abcdefgh", "bcdefghi"))
        + "nodes:\n  - {name: *i, type: hgx-h100-8}\n")


def test_yaml_alias_bomb_is_refused(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    code, _o, err = run_cli(["plan", "--inventory", str(bomb), "--tp", "8"])
    one_line_error(code, err, str(bomb), "alias")


def test_yaml_nesting_bomb_is_refused(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100000)  # libyaml's own composer overflows the C stack on it
    code, _o, err = run_cli(["plan", "--inventory", str(deep), "--tp", "8"])
    one_line_error(code, err, f"{deep}:1", "nested deeper than")


def test_ordinary_aliases_still_read(tmp_path):
    from slurmtopo.yamlio import parse_text

    doc = parse_text("t: &t {gpus: 8}\nnodes: [*t, *t]\n")
    assert doc["nodes"] == [{"gpus": 8}, {"gpus": 8}]


# -- values checked before anything is written or submitted ----------------------

def test_gpus_per_node_above_what_a_node_has(tmp_path):
    code, _o, err = run_cli(PLAN + ["--gpus-per-node", "16", "-o", str(tmp_path / "o"), "--",
                                    "python", "t.py"])
    one_line_error(code, err, "--gpus-per-node", "the most is 8")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("port", ["0", "70000", "-1"])
def test_master_port_outside_the_tcp_range(tmp_path, port):
    code, _o, err = run_cli(PLAN + ["--master-port", port, "-o", str(tmp_path / "o"), "--",
                                    "python", "t.py"])
    one_line_error(code, err, "--master-port")
    assert not (tmp_path / "o").exists()


def test_master_port_checked_by_the_script_builder_too():
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.groups import Layout
    from slurmtopo.inventory import load_inventory
    from slurmtopo.choice import plan
    from slurmtopo.request import JobRequest
    from slurmtopo.sbatch import SbatchRequest

    inv = load_inventory(INV)
    req = JobRequest(layout=Layout(tp=8))
    pl = plan(inv, None, req)
    with pytest.raises(SlurmtopoError, match="not a TCP port"):
        SbatchRequest.from_plan(inv, pl, req.layout, ["true"], req, master_port=65536)


def test_negative_max_age(tmp_path):
    code, _o, err = run_cli(["collect", "--from-dir", str(tmp_path), "-o", str(tmp_path / "o"),
                             "--max-age", "-5"])
    one_line_error(code, err, "--max-age")


def _inventory(tmp_path, node_entry: str, extra: str = "") -> str:
    path = tmp_path / "inv.yaml"
    path.write_text("slurmtopo: inventory\nversion: 1\nnodes:\n"
                    f"  - {node_entry}\n{extra}")
    return str(path)


@pytest.mark.parametrize("name", ['"gpu01;reboot"', '"gpu 01"', '"gpu01\\nreboot"',
                                  '"$(id)"', "'`id`'", '"gpu01|x"'])
def test_node_names_a_shell_would_read_are_refused(tmp_path, name):
    path = _inventory(tmp_path, f"{{name: {name}, type: hgx-h100-8}}")
    code, _o, err = run_cli(["plan", "--inventory", path, "--tp", "8"])
    one_line_error(code, err, f"{path}:4", "is not a host name")


def test_node_report_with_a_hostile_name(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "x.yaml").write_text('slurmtopo: node-report\nversion: 1\nnodes:\n'
                                    '  - {name: "gpu01;rm -rf ~", type: hgx-h100-8}\n')
    code, _o, err = run_cli(["plan", "--inventory", str(reports), "--tp", "8"])
    one_line_error(code, err, "x.yaml:4", "is not a host name")


@pytest.mark.parametrize("entry, what", [
    ("{name: [[gpu01, gpu02]], type: hgx-h100-8}", "nested list"),
    ("{name: {a: 1}, type: hgx-h100-8}", "mapping"),
    ("{name: gpu01, type: hgx-h100-8, features: [[ib]]}", "must be a string"),
    ("{name: gpu01, type: [hgx-h100-8]}", "a list"),
])
def test_nested_lists_where_strings_belong(tmp_path, entry, what):
    path = _inventory(tmp_path, entry)
    code, _o, err = run_cli(["plan", "--inventory", path, "--tp", "8"])
    one_line_error(code, err, f"{path}:4", what)


def test_state_flags_must_be_strings(tmp_path):
    state = tmp_path / "s.yaml"
    state.write_text("slurmtopo: state\nnodes:\n  - {name: gpu01, flags: [[drain]]}\n")
    code, _o, err = run_cli(["plan", "--inventory", INV, "--state", str(state), "--tp", "8"])
    one_line_error(code, err, f"{state}:3", "flags", "must be a string")


@pytest.mark.parametrize("value", ["0", ".inf", ".nan", "-1"])
def test_link_rates_must_be_finite_and_positive(tmp_path, value):
    fabric = ("fabric:\n  switches:\n"
              f"    - {{name: leaf1, nodes: gpu01, link_gbps: {value}}}\n")
    path = _inventory(tmp_path, "{name: gpu01, type: hgx-h100-8}", fabric)
    code, _o, err = run_cli(["plan", "--inventory", path, "--tp", "8"])
    one_line_error(code, err, f"{path}:7", "link_gbps")


# -- messages that point at the cause --------------------------------------------

def test_nodes_slurm_does_not_know_are_named_as_such():
    from slurmtopo.errors import PlacementError
    from slurmtopo.groups import Layout
    from slurmtopo.inventory import load_inventory
    from slurmtopo.model import UNKNOWN_TO_SLURM, ClusterState, NodeState
    from slurmtopo.choice import plan
    from slurmtopo.request import JobRequest

    inv = load_inventory(INV)
    names = list(inv.nodes)
    nodes = {n: NodeState(n, state="down", flags=frozenset({UNKNOWN_TO_SLURM}))
             for n in names[:3]}
    nodes[names[3]] = NodeState(names[3], state="idle", flags=frozenset({"drain"}))
    with pytest.raises(PlacementError) as exc:
        plan(inv, ClusterState(nodes), JobRequest(layout=Layout(tp=8, dp=2)))
    assert "3 not in Slurm's node list" in exc.value.message
    assert "1 drained, down or reserved" in exc.value.message


def test_inventory_given_as_state_says_so():
    code, _o, err = run_cli(["plan", "--inventory", INV, "--state", INV, "--tp", "8"])
    one_line_error(code, err, f"{INV}:4", "this is an inventory", "not a state snapshot",
                   "give it to --inventory")


def test_state_given_as_inventory_says_so():
    code, _o, err = run_cli(["plan", "--inventory", STATE, "--tp", "8"])
    one_line_error(code, err, f"{STATE}:4", "this is a state snapshot", "give it to --state")


def test_inventory_without_its_kind_line_given_as_state(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("".join(line for line in open(INV) if not line.startswith("slurmtopo:")))
    code, _o, err = run_cli(["plan", "--inventory", INV, "--state", str(path), "--tp", "8"])
    one_line_error(code, err, str(path), "looks like an inventory")


# -- a UTF-8 job name ----------------------------------------------------------------

def test_utf8_job_name_passes_through(tmp_path):
    code, out, err = run_cli(PLAN + ["--job-name", "λ-训练", "-o", str(tmp_path), "--",
                                     "python", "t.py"])
    assert code == 0, err
    script = (tmp_path / "job.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --job-name=λ-训练\n" in script
    assert "job name" not in out  # nothing replaced, so no note


@pytest.mark.parametrize("name, written", [
    ("λ 训练", "λ_训练"),           # a blank would split the directive
    ('run"1', "run_1"),             # sbatch pairs double quotes
    ("a#b", "a_b"),                 # '#' starts a comment in a directive
    ("x$(id)`id`", "x__id__id_"),
    ("naïve-ü", "naïve-ü"),
    ("हिन्दी", "हिन्दी"),             # combining marks are part of the word
])
def test_job_name_keeps_letters_of_any_script(name, written):
    from slurmtopo.sbatch import sanitize_job_name

    assert sanitize_job_name(name)[0] == written


@pytest.mark.parametrize("argv", [
    ["collect", "--from-dir", "{tmp}", "-o", "{tmp}/f/reports"],
    ["agent", "discover", "--from-smi", str(ROOT / "tests" / "fixtures" / "smi" / "hgx_h100.txt"),
     "--node-name", "gpu01", "-o", "{tmp}/f/gpu01.yaml"],
    ["gres", "generate", "--reports", INV, "-o", "{tmp}/f/gres.conf"],
    ["topology", "generate", "--reports", INV, "-o", "{tmp}/f/topology.conf"],
], ids=["collect", "agent-discover", "gres-generate", "topology-generate"])
def test_every_writer_reports_an_unwritable_target_in_one_line(tmp_path, argv):
    (tmp_path / "f").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _o, err = run_cli(argv)
    one_line_error(code, err, str(tmp_path / "f"))
    assert (tmp_path / "f").read_text() == "x"


def test_bind_run_dir_under_a_file(tmp_path, monkeypatch):
    plan_dir = tmp_path / "plan"
    code, _o, err = run_cli(["plan", "--inventory", INV, "--tp", "8", "-o", str(plan_dir), "--",
                             "true"])
    assert code == 0, err
    script = (plan_dir / "job.sbatch").read_text()
    plan = script.split("<<'SLURMTOPO_PLAN_JSON'\n", 1)[1].split("\nSLURMTOPO_PLAN_JSON\n")[0]
    (tmp_path / "plan.json").write_text(plan)
    (tmp_path / "f").write_text("x")
    for k, v in {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "gpu01",
                 "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURMD_NODENAME": "gpu01"}.items():
        monkeypatch.setenv(k, v)
    code, _o, err = run_cli(["bind", "--plan", str(tmp_path / "plan.json"), "--run-dir",
                             str(tmp_path / "f" / "run"), "--no-probe", "--cgroup-devices", "no"])
    one_line_error(code, err, str(tmp_path / "f" / "run"), "cannot create the run directory")
