"""Run the ``slurmtopo`` CLI in-process and check its one-line errors.

Shared by the tests of hostile input (tests/test_hostile_input.py) and the
property test over every reader (tests/test_readers_property.py): both need
the exit code and both streams of one run, without pytest fixtures (which
hypothesis cannot re-run per example).
"""
from __future__ import annotations

import contextlib
import io
import os
import pwd
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.cli import main

#: the checkout these tests run from (the child processes import it)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(argv: Sequence[str], stdin: str = "") -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``slurmtopo argv``."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


#: seconds a CLI run in a subprocess may take before it counts as hung
SUBPROCESS_TIMEOUT_S = 60


def run_cli_subprocess(argv: Sequence[str], env: Optional[Dict[str, str]] = None,
                       memory_bytes: Optional[int] = None,
                       timeout: float = SUBPROCESS_TIMEOUT_S) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m slurmtopo argv`` in a
    child process, for input that could hang or exhaust the test process:
    a run past ``timeout`` is killed and fails the test, and
    ``memory_bytes`` caps the child's address space (a MemoryError there
    is a traceback the test sees, not a dead test runner)."""
    import subprocess
    import sys

    import pytest

    def limit():
        if memory_bytes is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    full = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    try:
        p = subprocess.run([sys.executable, "-m", "slurmtopo", *argv], env=full,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"slurmtopo {' '.join(argv)} still running after {timeout:g} s")
    return p.returncode, p.stdout, p.stderr


def one_line_error(code: int, err: str, *parts: str) -> str:
    """Assert the run failed with exactly one ``slurmtopo: error:`` line
    containing ``parts``; returns the line."""
    assert code != 0, f"exit 0; stderr: {err!r}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("slurmtopo: error: "), lines[0]
    for p in parts:
        assert p in lines[0], lines[0]
    return lines[0]


def run_cli_unprivileged(argv: Sequence[str]) -> Tuple[int, str]:
    """(exit code, stderr) of ``slurmtopo argv`` run as user ``nobody``.

    Tests run as root, to whom every permission check passes; a forked child
    that drops to ``nobody`` meets EACCES as a user would. Modules the command
    needs must already be imported (run it once as root first): nobody may
    not be able to read the Python installation's directory. Files the
    command reads must be outside the checkout too (copied to a 0755 temp
    directory): a clone inside ``mktemp -d`` is 0700 and closed to nobody.
    Run directly when the tests do not run as root.
    """
    if os.geteuid() != 0:
        code, _out, err = run_cli(argv)
        return code, err
    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 99
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            code, _out, err = run_cli(argv)
            os.write(write_fd, err.encode())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write_fd, f"child failed: {exc!r}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks: List[bytes] = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()


def doc_commands(paths: Sequence[str], command: str) -> List[List[str]]:
    """The argv (after ``slurmtopo``) of every ``slurmtopo COMMAND`` line in
    the bash blocks of the documents ``paths`` (continuations joined,
    comments dropped): the examples a command's doc test runs as printed."""
    import re
    import shlex

    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
            for line in m.group(1).replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words[:2] == ["slurmtopo", command]:
                    out.append(words[1:])
    return out
