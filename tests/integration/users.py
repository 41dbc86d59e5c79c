"""Unprivileged users on the dev cluster: the people slurmtopo must protect
from each other (docs/security.md).

A cluster is shared by users who do not trust each other. These tests play
two of them, ``stopo-alice`` (the victim) and ``stopo-bob`` (a member of the
same research group who is not to be trusted), plus the admin (root, who
runs the placement daemon). The ``users`` fixture (tests/integration/
conftest.py) gives a :class:`Users`:

* both accounts exist, members of the group ``stopo-it`` (created once with
  ``groupadd``/``useradd`` if missing, and left for the next run: deleting
  accounts that running jobs may still belong to is riskier than keeping
  them);
* ``users.shared``: a group-shared project directory (``root:stopo-it``,
  mode 2770: setgid, group-writable, like a research group's share);
* ``users.site``: a copy of the slurmtopo package the users can import
  (the checkout may sit in a 0700 directory, and the pyenv Python under
  /root is not theirs to run), used through Debian's ``/usr/bin/python3``
  with the apt packages scripts/install-deps.sh installs;
* ``users.run(user, argv, cwd=...)``: a command as that user (uid, gid and
  the supplementary group; a minimal environment that names the dev
  cluster), ``users.slurmtopo(user, *args, cwd=...)`` the CLI as that user.

The dev cluster's state directory is made traversable for them (its
ancestors get ``o+x``; the modes are put back at teardown) so that
``sbatch`` finds ``slurm.conf`` and the munge socket.
"""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]

GROUP = "stopo-it"
ALICE = "stopo-alice"
BOB = "stopo-bob"
#: the interpreter the users run slurmtopo with (Debian's, not pyenv's)
USER_PYTHON = "/usr/bin/python3"


def _ensure_account(name: str, group: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--gid", group,
                    "--groups", group, name], check=True, capture_output=True, text=True)
    return pwd.getpwnam(name)


def ensure_accounts() -> None:
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True, capture_output=True, text=True)
    for name in (ALICE, BOB):
        _ensure_account(name, GROUP)


class Users:
    """See the module doc."""

    def __init__(self, cluster_env: Mapping[str, str], cluster_dir: Path):
        ensure_accounts()
        self.group = grp.getgrnam(GROUP)
        self.base = Path(tempfile.mkdtemp(prefix="slurmtopo-users."))
        os.chmod(self.base, 0o755)
        self.site = self.base / "site"
        shutil.copytree(ROOT / "slurmtopo", self.site / "slurmtopo",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # what pip installs as the `slurmtopo` command: its own directory,
        # not the working directory, is first on sys.path (`python -m` would
        # import a slurmtopo/ planted in a shared working directory)
        (self.site / "bin").mkdir()
        (self.site / "bin" / "slurmtopo").write_text(
            f"#!{USER_PYTHON}\nimport sys\nfrom slurmtopo.cli import main\nsys.exit(main())\n")
        for root, dirs, files in os.walk(self.site):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o755 if root.endswith("bin") else 0o644)
        self.shared = self.base / "shared"
        self.shared.mkdir()
        os.chown(self.shared, 0, self.group.gr_gid)
        os.chmod(self.shared, 0o2770)
        self._cluster_env = dict(cluster_env)
        self._modes: List[tuple] = []
        self._cluster_dir = cluster_dir
        self._open_path(cluster_dir)

    # -- the cluster's directory, reachable for them ---------------------
    def _open_path(self, cluster_dir: Path) -> None:
        """o+x on the cluster dir and its ancestors, o+r on what sbatch
        reads (slurm.conf and the files it includes). Called again before
        each command: another pytest session on the machine makes
        /tmp/pytest-of-<user> 0700 again when it starts, which locked the
        users out of a cluster a concurrent run had opened; the first mode
        seen is the one restored."""
        p = Path(cluster_dir).resolve()
        seen = {path for path, _ in self._modes}

        def widen(path: Path, bits: int) -> None:
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode & bits != bits:
                if path not in seen:
                    self._modes.append((path, mode))
                os.chmod(path, mode | bits)

        for d in [p, *p.parents]:
            widen(d, stat.S_IXOTH)
        etc = p / "etc"
        if etc.is_dir():
            widen(etc, stat.S_IXOTH | stat.S_IROTH)
            for f in etc.iterdir():
                if f.is_file() and f.suffix in (".conf", ".yaml"):
                    widen(f, stat.S_IROTH)

    def close(self) -> None:
        for path, mode in reversed(self._modes):
            try:
                os.chmod(path, mode)
            except OSError:
                pass
        self._modes = []
        shutil.rmtree(self.base, ignore_errors=True)

    # -- running things as them -------------------------------------------
    def env(self, user: str, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """A login-like environment for ``user`` that names the dev cluster
        and the users' copy of slurmtopo."""
        pw = pwd.getpwnam(user)
        env = {"HOME": pw.pw_dir, "USER": user, "LOGNAME": user, "SHELL": "/bin/sh",
               "LANG": "C.UTF-8", "SLURM_CONF": self._cluster_env["SLURM_CONF"],
               "PATH": self._cluster_env["PATH"], "PYTHONPATH": str(self.site),
               "SLURMTOPO_PYTHON": USER_PYTHON}
        env.update(extra or {})
        return env

    def run(self, user: str, argv: Sequence[str], cwd=None, env: Optional[Mapping[str, str]] = None,
            input: Optional[str] = None, timeout: float = 120, check: bool = False
            ) -> subprocess.CompletedProcess:
        """``argv`` as ``user`` (its uid, primary gid and the group), in
        ``cwd`` (default: the shared directory)."""
        pw = pwd.getpwnam(user)
        self._open_path(self._cluster_dir)
        p = subprocess.run([str(a) for a in argv], cwd=str(cwd or self.shared),
                           env=self.env(user, env), input=input, capture_output=True, text=True,
                           timeout=timeout, user=pw.pw_uid, group=pw.pw_gid,
                           extra_groups=[self.group.gr_gid], umask=0o002)
        if check and p.returncode != 0:
            raise AssertionError(f"as {user}: {' '.join(map(str, argv))} exited {p.returncode}\n"
                                 f"--- stdout\n{p.stdout}--- stderr\n{p.stderr}")
        return p

    def slurmtopo(self, user: str, *args: str, cwd=None, env=None, input=None,
                  check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
        """The slurmtopo CLI as ``user`` (Debian's Python, the users' copy),
        through its console script as an installed slurmtopo is run."""
        return self.run(user, [str(self.site / "bin" / "slurmtopo"), *args], cwd=cwd, env=env,
                        input=input, check=check, timeout=timeout)

    def private_dir(self, user: str, name: str) -> Path:
        """A directory only ``user`` may enter (mode 0700, theirs), like a
        home directory; the tests (root) read it."""
        d = self.base / f"{user}-{name}"
        d.mkdir()
        pw = pwd.getpwnam(user)
        os.chown(d, pw.pw_uid, pw.pw_gid)
        os.chmod(d, 0o700)
        return d

    def uid(self, user: str) -> int:
        return pwd.getpwnam(user).pw_uid
