"""Run directories in places other users can reach (slurmtopo/files/rundirs.py,
slurmtopo/files/safedir.py): nothing is followed through a link, another user's
directory is refused with one line that names it, its owner and the way
out, slurmtopo's own directories are 0700 and files 0600 whatever the
umask, and pruning never leaves the runs root (issue 21).

The same cases with two real users of one group are in
tests/integration/test_job_trust.py."""
from __future__ import annotations

import os
import pwd
import stat
import time
from pathlib import Path

import pytest

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files import safedir
from slurmtopo.files.rundirs import (check_location, clean_old, layout, open_run_dir, run_dir_for,
                                     save_script)


def _age(path: Path, days: float) -> None:
    t = time.time() - days * 86400
    for p in [path, *path.rglob("*")]:
        os.utime(p, (t, t), follow_symlinks=False)


def _checkpoints(tmp_path: Path) -> Path:
    """The user's own precious data, named like job ids and old."""
    ckpt = tmp_path / "home" / "ckpt"
    for name in ("1000", "2000"):
        (ckpt / name).mkdir(parents=True)
        (ckpt / name / "model.pt").write_text("weights")
    _age(ckpt, 30)
    return ckpt


def _not_mine(tmp_path: Path) -> Path:
    """A directory another user owns: ``nobody``'s (the tests run as root,
    as CI does), else the root-owned /tmp."""
    if os.geteuid() != 0:
        return Path("/tmp")
    d = tmp_path / "theirs"
    d.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    return d


def test_symlinked_runs_root_prunes_nothing(tmp_path):
    """`.slurmtopo/runs` a link to the user's checkpoints: the 14-day pruning
    deleted ckpt/1000 and ckpt/2000; now it refuses the root and removes
    nothing, and a submission refuses it before the job exists."""
    ckpt = _checkpoints(tmp_path)
    submit = tmp_path / "shared"
    (submit / ".slurmtopo").mkdir(parents=True)
    (submit / ".slurmtopo" / "runs").symlink_to(ckpt)
    with pytest.raises(SlurmtopoError) as exc:
        clean_old(str(submit), 14)
    assert "is a symbolic link" in exc.value.render()
    assert str(submit / ".slurmtopo" / "runs") in exc.value.render()
    assert sorted(p.name for p in ckpt.iterdir()) == ["1000", "2000"]
    assert (ckpt / "1000" / "model.pt").read_text() == "weights"
    with pytest.raises(SlurmtopoError, match="symbolic link"):
        check_location(None, str(submit))
    with pytest.raises(SlurmtopoError, match="symbolic link"):
        save_script(run_dir_for(str(submit), 3000), "#!/bin/bash\n")
    assert sorted(p.name for p in ckpt.iterdir()) == ["1000", "2000"]


def test_pruning_never_follows_a_link_inside_the_root(tmp_path):
    ckpt = _checkpoints(tmp_path)
    root = tmp_path / "sub" / ".slurmtopo" / "runs"
    root.mkdir(parents=True)
    (root / "10").symlink_to(ckpt / "1000")        # a job id that is a link: left alone
    (root / "11").mkdir()                          # an old run dir holding a link out
    (root / "11" / "ckpt").symlink_to(ckpt)
    (root / "11" / "task-env").mkdir()
    (root / "11" / "task-env" / "0.sh").write_text("x")
    (root / "12").mkdir()                          # recent: kept
    (root / "notajob").mkdir()
    _age(root / "11", 30)
    _age(root / "notajob", 30)
    removed = clean_old(str(tmp_path / "sub"), 14)
    assert removed == [str(root / "11")]
    assert sorted(p.name for p in root.iterdir()) == ["10", "12", "notajob"]
    assert sorted(p.name for p in ckpt.iterdir()) == ["1000", "2000"]
    assert (ckpt / "1000" / "model.pt").read_text() == "weights"


def test_remove_tree_refuses_a_swapped_directory(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep").write_text("x")
    with safedir.open_under(str(tmp_path), []) as where:
        seen = where.entry("a")
        os.rename(tmp_path / "a", tmp_path / "a-moved")
        os.rename(tmp_path / "b", tmp_path / "a")     # swapped after the check
        with pytest.raises(SlurmtopoError, match="changed while being removed"):
            safedir.remove_tree(where, "a", seen)
    assert (tmp_path / "a" / "keep").read_text() == "x"


def test_another_users_directory_is_refused(tmp_path):
    theirs = _not_mine(tmp_path)
    owner = pwd.getpwuid(theirs.stat().st_uid).pw_name
    with pytest.raises(SlurmtopoError) as exc:          # --run-dir naming it
        with open_run_dir(str(theirs)):
            pass
    line = exc.value.render()
    assert line.startswith(f"{theirs}: owned by {owner}, not by you") and "\n" not in line
    if os.geteuid() == 0:
        sub = theirs / ".slurmtopo"
        sub.mkdir(mode=0o777)
        os.chown(sub, theirs.stat().st_uid, theirs.stat().st_gid)
        with pytest.raises(SlurmtopoError) as exc:
            check_location(None, str(theirs))
        line = exc.value.render()
        assert line.startswith(f"{sub}: owned by nobody, not by you (root)")
        assert "give --run-dir" in line
        assert list(sub.iterdir()) == []


def test_own_directories_are_made_private_and_named_ones_kept(tmp_path):
    sub = tmp_path / "submit"
    (sub / ".slurmtopo" / "runs").mkdir(parents=True)
    for d in (sub / ".slurmtopo", sub / ".slurmtopo" / "runs"):
        d.chmod(0o2777)
    check_location(None, str(sub))
    for d in (sub / ".slurmtopo", sub / ".slurmtopo" / "runs"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    named = tmp_path / "results"
    named.mkdir(mode=0o755)
    named.chmod(0o755)
    check_location(str(named), str(sub))
    assert stat.S_IMODE(named.stat().st_mode) == 0o755          # the user's choice, kept
    named.chmod(0o775)
    with pytest.raises(SlurmtopoError, match=r"other users may write in it \(mode 0775\)"):
        check_location(str(named), str(sub))
    deep = tmp_path / "new" / "runs" / "x"                        # parents made, private
    check_location(str(deep), str(sub))
    for d in (tmp_path / "new", tmp_path / "new" / "runs", deep):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_script_kept_private_under_umask_002(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2770)
    old = os.umask(0o002)
    try:
        path = save_script(run_dir_for(str(shared), 9), "#!/bin/bash\n")
    finally:
        os.umask(old)
    assert Path(path).read_text() == "#!/bin/bash\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for d in (shared / ".slurmtopo", shared / ".slurmtopo" / "runs", Path(path).parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_not_a_directory_and_dangling_link_are_one_line(tmp_path):
    (tmp_path / ".slurmtopo").write_text("x")
    with pytest.raises(SlurmtopoError, match=r"\.slurmtopo: is not a directory"):
        check_location(None, str(tmp_path))
    (tmp_path / ".slurmtopo").unlink()
    (tmp_path / ".slurmtopo").symlink_to(tmp_path / "nowhere")
    with pytest.raises(SlurmtopoError, match="is a symbolic link"):
        check_location(None, str(tmp_path))
    assert not (tmp_path / "nowhere").exists()


def test_write_files_is_all_or_none(tmp_path):
    with safedir.open_under(str(tmp_path), ["run"]) as where:
        safedir.write_files([(where, "a", "old a"), (where, "b", "old b")])
        (tmp_path / "run" / "c").mkdir()               # a target that cannot be replaced
        with pytest.raises(SlurmtopoError) as exc:
            safedir.write_files([(where, "a", "new a"), (where, "b", "new b"),
                                 (where, "c", "new c")])
        assert exc.value.path == str(tmp_path / "run" / "c")
    assert (tmp_path / "run" / "a").read_text() == "old a"
    assert (tmp_path / "run" / "b").read_text() == "old b"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["a", "b", "c"]


def test_layout_of_run_directories(tmp_path):
    assert layout(str(tmp_path / ".slurmtopo" / "runs" / "7")) == \
        (str(tmp_path), [".slurmtopo", "runs", "7"], [True, True, True])
    assert layout(str(tmp_path / "a" / "b")) == (str(tmp_path), ["a", "b"], [True, False])
    (tmp_path / "a").mkdir()
    assert layout(str(tmp_path / "a" / "b")) == (str(tmp_path / "a"), ["b"], [False])
