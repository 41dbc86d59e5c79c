"""Broken and hostile input, everywhere: one line, a non-zero exit, no
traceback, bounded time and memory, and outputs written all or not at all.

Permission failures are made so that they fail for root too (tests run as
root): a path under a regular file (ENOTDIR), an output name taken by a
directory (EISDIR), or a forked child that drops to ``nobody``.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from tests.clirun import one_line_error, run_cli, run_cli_subprocess, run_cli_unprivileged

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
    code, _out, err = run_cli(PLAN + ["--output-dir", str(tmp_path / "f" / "plan"), "--", "python", "t.py"])
    one_line_error(code, err, str(tmp_path / "f"), "is not a directory")


def test_plan_output_dir_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    code, _out, err = run_cli(PLAN + ["--output-dir", str(tmp_path / "f")])
    one_line_error(code, err, str(tmp_path / "f"))
    assert (tmp_path / "f").read_text() == "x"


def _world_readable_dir(prefix: str) -> Path:
    """A directory root owns and others may enter but not write (0755), in
    the system's temp directory (never under the checkout, which may sit in
    a 0700 directory that ``nobody`` cannot enter)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(d, 0o755)
    return d


@pytest.fixture
def shared_dir():
    d = _world_readable_dir("slurmtopo-ro-")
    yield d
    import shutil
    shutil.rmtree(d)


@pytest.fixture
def readable_inv():
    """The example inventory, copied where user ``nobody`` can read it."""
    d = _world_readable_dir("slurmtopo-inv-")
    inv = d / "inv.yaml"
    inv.write_text(Path(INV).read_text())
    os.chmod(inv, 0o644)
    yield str(inv)
    import shutil
    shutil.rmtree(d)


def test_plan_unwritable_output_dir_names_the_target(shared_dir, readable_inv):
    plan = ["plan", "--inventory", readable_inv, "--tp", "8", "--dp", "2"]
    out = shared_dir / "plan"
    out.mkdir()
    code, _o, err = run_cli(plan + ["--output-dir", str(out), "--", "python", "t.py"])  # imports all
    assert code == 0, err
    before = _snapshot(out)
    code, err = run_cli_unprivileged(plan + ["--output-dir", str(out), "--", "python", "t.py"])
    # another user's directory: refused before anything is written in it
    line = one_line_error(code, err, str(out), "owned by root, not by you")
    assert ".tmp" not in line and ".bak" not in line and ".old" not in line
    assert _snapshot(out) == before


def test_plan_output_dir_another_user_made_first(shared_dir, readable_inv):
    """`--output-dir /tmp/plan` (docs' example) where someone else made
    /tmp/plan first, open to all: the plan went in, and its owner could
    replace job.sbatch before the user submitted it. Refused, nothing
    written."""
    plan = ["plan", "--inventory", readable_inv, "--tp", "8", "--dp", "2"]
    run_cli(plan + ["--output-dir", str(shared_dir / "warm")])  # imports all
    trap = shared_dir / "plan"
    trap.mkdir()
    os.chmod(trap, 0o777)
    code, err = run_cli_unprivileged(plan + ["--output-dir", str(trap), "--", "python", "t.py"])
    one_line_error(code, err, str(trap), "owned by root, not by you")
    assert list(trap.iterdir()) == []


def test_plan_output_dir_is_private_whatever_the_umask(tmp_path):
    """umask 002 (a group's shared submit directory): the default
    ./slurmtopo-plan was made 0775, so any group member could swap
    job.sbatch in it. Now 0700, its files 0600 (job.sbatch 0700)."""
    old = os.umask(0o002)
    try:
        out = tmp_path / "plan"
        code, _o, err = run_cli(PLAN + ["--output-dir", str(out), "--", "python", "t.py"])
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {"job.sbatch": 0o700, "rankmap.json": 0o600, "rankmap.csv": 0o600,
                     "env.json": 0o600}


def test_plan_output_dir_nobody_may_not_create(shared_dir, readable_inv):
    plan = ["plan", "--inventory", readable_inv, "--tp", "8", "--dp", "2"]
    run_cli(plan + ["--output-dir", str(shared_dir / "warm")])
    code, err = run_cli_unprivileged(plan + ["--output-dir", str(shared_dir / "new")])
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


def test_daemon_spool_unwritable_for_a_user(shared_dir, readable_inv):
    import slurmtopo.daemon.loop  # noqa: F401 - imported before dropping privileges
    import slurmtopo.daemon.scheduler  # noqa: F401
    import slurmtopo.commands.daemon  # noqa: F401
    from slurmtopo.inventory.schema import load_inventory
    load_inventory(readable_inv)
    code, err = run_cli_unprivileged(["daemon", "run", "--inventory", readable_inv, "--spool",
                                      str(shared_dir), "--once"])
    # root's spool: refused before anything is written (docs/security.md)
    one_line_error(code, err, str(shared_dir), "belongs to uid 0, not to the daemon's user")
    assert list(shared_dir.iterdir()) == []
    # the default spool (/var/spool/slurmtopo) for a user: missing or root's
    code, err = run_cli_unprivileged(["daemon", "run", "--inventory", readable_inv, "--once"])
    one_line_error(code, err, "/var/spool/slurmtopo")


# -- all or nothing ----------------------------------------------------------

def test_plan_writes_all_outputs_or_none(tmp_path):
    out = tmp_path / "plan"
    code, _o, err = run_cli(PLAN + ["--output-dir", str(out), "--job-name", "first", "--",
                                    "python", "t.py"])
    assert code == 0, err
    (out / "env.json").unlink()
    (out / "env.json").mkdir()  # one output cannot be written
    before = _snapshot(out)
    code, _o, err = run_cli(["plan", "--inventory", INV, "--tp", "4", "--dp", "2",
                             "--output-dir", str(out), "--job-name", "second", "--", "python", "t.py"])
    one_line_error(code, err, str(out / "env.json"))
    assert _snapshot(out) == before  # the other three are the first plan's still


def test_write_all_rolls_back_when_a_rename_fails(tmp_path, monkeypatch):
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.files import fileio

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
    from slurmtopo.files import fileio

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


def test_backups_are_rotated_oldest_first(tmp_path):
    """30 writes leave the 5 newest backups (there were 29), ordered by the
    stamp in their names; other files, other targets' backups, and
    symlinks or directories named like a backup stay, and no link is
    followed."""
    from slurmtopo.files import fileio

    target = tmp_path / "topology.conf"
    target.write_text("v0\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep me\n")
    planted = {"topology.conf.20000101-000000.bak": "symlink",   # older than all: not counted
               "topology.conf.20000101-000001.bak": "dir",
               "topology.conf.notes": "file", "gres.conf.20000101-000000.bak": "file",
               "topology.conf.20000101-000002.bak.tmp": "file"}
    for name, kind in planted.items():
        if kind == "symlink":
            os.symlink(elsewhere / "precious", tmp_path / name)
        elif kind == "dir":
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("x\n")
    for i in range(1, 31):  # ten stamps, three writes each: .bak, .1.bak, .2.bak
        fileio.atomic_write(target, f"v{i}\n", backup=True,
                            stamp=f"2025010{(i - 1) // 3 // 10}-00000{(i - 1) // 3 % 10}")
    backups = sorted(p.name for p in tmp_path.iterdir()
                     if p.name.startswith("topology.conf.2025") and p.is_file())
    assert backups == sorted(f"topology.conf.20250100-00000{k}{n}.bak"
                             for k, n in ((8, ".1"), (8, ".2"), (9, ""), (9, ".1"), (9, ".2")))
    kept = {(tmp_path / b).read_text() for b in backups}
    assert kept == {"v25\n", "v26\n", "v27\n", "v28\n", "v29\n"}  # the newest replaced
    assert target.read_text() == "v30\n"
    assert (elsewhere / "precious").read_text() == "keep me\n"
    for name, kind in planted.items():
        assert os.path.lexists(tmp_path / name), name
    assert os.path.islink(tmp_path / "topology.conf.20000101-000000.bak")


def test_backups_to_keep_is_a_parameter(tmp_path):
    from slurmtopo.files import fileio

    target = tmp_path / "a"
    target.write_text("0\n")
    for i in range(1, 5):
        fileio.atomic_write(target, f"{i}\n", backup=True, stamp=f"20250101-00000{i}",
                            keep_backups=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a", "a.20250101-000003.bak", "a.20250101-000004.bak"]
    with pytest.raises(ValueError):
        fileio.atomic_write(target, "5\n", backup=True, keep_backups=0)


@pytest.mark.parametrize("sync", [True, False])
def test_write_all_fsyncs_unless_told_not_to(tmp_path, monkeypatch, sync):
    """sync=False (a job's run directory) writes the same files, all or
    none, without one fsync; the default flushes every file and directory."""
    from slurmtopo.files import fileio

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
    from slurmtopo.files import fileio

    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 * fileio.MiB) + "\n")
    monkeypatch.setattr(fileio, "MAX_TEXT_BYTES", fileio.MiB)
    code, _o, err = run_cli(["plan", "--inventory", str(big), "--tp", "8"])
    one_line_error(code, err, str(big), "larger than 1 MiB")


def test_a_pipe_is_not_read():
    """``--inventory <(yes)``: a pipe is refused at once, not read (only
    regular files are; a FIFO with no writer would block the reader)."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, b"slurmtopo: inventory\n")
        os.close(write_fd)
        code, _o, err = run_cli(["plan", "--inventory", f"/dev/fd/{read_fd}", "--tp", "8"])
    finally:
        os.close(read_fd)
    one_line_error(code, err, f"/dev/fd/{read_fd}", "is a FIFO", "not a regular file")


HUGE_RANGE = "0-100000000"  # 100 million ids: 4.7 GB as a Python list
SMI = ROOT / "tests" / "fixtures" / "smi" / "hgx_h100.txt"


#: every id below the cap, but 100 copies of the whole range: 6.5 million
#: ids before they are made a set (the cap is on all items together)
REPEATED_RANGE = ",".join(["0-65535"] * 100)


def _huge_range_inputs(tmp_path, HUGE_RANGE=HUGE_RANGE):
    """(argv, file:line the error must name) per reader of an id range."""
    gres = tmp_path / "gres.conf"
    gres.write_text(f"NodeName=gpu01 Name=gpu File=/dev/nvidia0 CPUs={HUGE_RANGE}\n")
    cores = tmp_path / "cores.conf"
    cores.write_text(f"NodeName=gpu01 Name=gpu File=/dev/nvidia0 Cores={HUGE_RANGE}\n")
    report = tmp_path / "report.yaml"
    code, _o, err = run_cli(["agent", "discover", "--from-smi", str(SMI), "--node-name", "gpu01",
                             "-o", str(report)])
    assert code == 0, err
    text = report.read_text()
    gpu_line = next(i for i, ln in enumerate(text.splitlines(), 1) if "cpus: '0-55" in ln)
    (tmp_path / "cpus.yaml").write_text(text.replace("0-55,112-167", HUGE_RANGE, 1))
    layout_line = next(i for i, ln in enumerate(text.splitlines(), 1) if "cores_per_socket" in ln)
    (tmp_path / "layout.yaml").write_text(text.replace("cores_per_socket: 56",
                                                       "cores_per_socket: 100000000"))
    smi = tmp_path / "smi.txt"
    smi.write_text(SMI.read_text().replace("0-55,112-167", HUGE_RANGE, 1))
    state = tmp_path / "state.yaml"
    state.write_text(f"slurmtopo: state\nnodes:\n  - {{name: gpu01, busy_gpus: '{HUGE_RANGE}'}}\n")
    return {
        "gres.conf CPUs": (["gres", "check", str(gres)], f"{gres}:1"),
        "gres.conf Cores": (["gres", "check", str(cores)], f"{cores}:1"),
        "inventory cpus": (["plan", "--inventory", str(tmp_path / "cpus.yaml"), "--tp", "8"],
                           f"{tmp_path / 'cpus.yaml'}:{gpu_line}"),
        "inventory cpu layout": (["gres", "generate", "--reports", str(tmp_path / "layout.yaml")],
                                 f"{tmp_path / 'layout.yaml'}:{layout_line}"),
        "nvidia-smi CPU Affinity": (["agent", "discover", "--from-smi", str(smi),
                                     "--node-name", "gpu01"], f"{smi}:2"),
        "state busy_gpus": (["plan", "--inventory", INV, "--state", str(state), "--tp", "8"],
                            f"{state}:3"),
    }


@pytest.mark.parametrize("reader", ["gres.conf CPUs", "gres.conf Cores", "inventory cpus",
                                    "inventory cpu layout", "nvidia-smi CPU Affinity",
                                    "state busy_gpus"])
def test_a_huge_id_range_is_refused_before_it_is_expanded(tmp_path, reader):
    """``CPUs=0-100000000`` and its kin: one located line, never a 4.7 GB
    list and a MemoryError (the child gets 2 GiB of address space)."""
    argv, where = _huge_range_inputs(tmp_path)[reader]
    code, _o, err = run_cli_subprocess(argv, memory_bytes=2 << 30)
    one_line_error(code, err, where, "65,536")


@pytest.mark.parametrize("reader", ["gres.conf CPUs", "gres.conf Cores", "inventory cpus",
                                    "nvidia-smi CPU Affinity", "state busy_gpus"])
def test_a_range_repeated_is_refused_before_it_is_expanded(tmp_path, reader):
    """Each item below the cap, the whole list far above it: a node report
    or gres.conf that repeats ``0-65535`` used to build every copy (a
    64 MiB report: 6.5 * 10^10 ids). The 100 copies here are 6.5 million
    ids, more than the child's 512 MiB of address space holds."""
    argv, where = _huge_range_inputs(tmp_path, REPEATED_RANGE)[reader]
    code, _o, err = run_cli_subprocess(argv, memory_bytes=512 << 20)
    one_line_error(code, err, where, "65,536")


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
    # refused in one located line that says why; who refuses first (our
    # depth cap, or libyaml's own since PyYAML 6.0.4) is not the contract
    line = one_line_error(code, err, f"{deep}:1")
    assert "nest" in line.lower(), line


def test_ordinary_aliases_still_read(tmp_path):
    from slurmtopo.files.yamlio import parse_text

    doc = parse_text("t: &t {gpus: 8}\nnodes: [*t, *t]\n")
    assert doc["nodes"] == [{"gpus": 8}, {"gpus": 8}]


# -- values checked before anything is written or submitted ----------------------

def test_gpus_per_node_above_what_a_node_has(tmp_path):
    code, _o, err = run_cli(PLAN + ["--gpus-per-node", "16", "--output-dir", str(tmp_path / "o"), "--",
                                    "python", "t.py"])
    one_line_error(code, err, "--gpus-per-node", "the most is 8")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("port", ["0", "70000", "-1"])
def test_master_port_outside_the_tcp_range(tmp_path, port):
    code, _o, err = run_cli(PLAN + ["--master-port", port, "--output-dir", str(tmp_path / "o"), "--",
                                    "python", "t.py"])
    one_line_error(code, err, "--master-port")
    assert not (tmp_path / "o").exists()


def test_master_port_checked_by_the_script_builder_too():
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.job.groups import Layout
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.plan.choice import plan
    from slurmtopo.job.request import JobRequest
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
    from slurmtopo.job.groups import Layout
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.inventory.model import UNKNOWN_TO_SLURM, ClusterState, NodeState
    from slurmtopo.plan.choice import plan
    from slurmtopo.job.request import JobRequest

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
    code, out, err = run_cli(PLAN + ["--job-name", "λ-训练", "--output-dir", str(tmp_path), "--",
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
    ["collect", "--from-dir", "{tmp}", "--nodes", "gpu01", "-o", "{tmp}/f/reports"],
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
    code, _o, err = run_cli(["plan", "--inventory", INV, "--tp", "8", "--output-dir", str(plan_dir), "--",
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
    one_line_error(code, err, str(tmp_path / "f"), "is not a directory")
