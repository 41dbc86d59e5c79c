"""Where a job's files live: one run directory per job, all in one place.

``slurmtopo sbatch`` keeps, per submitted job, ``<submit dir>/.slurmtopo/
runs/<jobid>/``: the batch script as submitted (``job.sbatch``, so the
planned rank map can be shown after Slurm forgot the job) and, once the job
starts, what ``slurmtopo bind`` writes there (``rankmap.json`` with the
actual rank map, ``hostfile``, ``env.sh``, ``task-env.sh``). Keeping them
under one hidden directory stops ``slurmtopo-run-*`` directories piling up
next to the user's files; :func:`clean_old` removes those of old jobs.

Submit directories are often shared by a group, so every directory here is
reached through :mod:`slurmtopo.files.safedir`: ``.slurmtopo``, ``runs`` and the
job's directory must be the user's own, are never followed when they are
links, and are kept at mode 0700; a run directory named with ``--run-dir``
must be the user's own and writable by nobody else (docs/security.md).
"""
from __future__ import annotations

import os
import stat
import time
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files import safedir
from slurmtopo.files.safedir import SafeDir

#: relative to the submit directory; the batch script uses the same path
RUNS_SUBDIR = os.path.join(".slurmtopo", "runs")
#: run directories untouched this long are removed at the next submission
DEFAULT_KEEP_DAYS = 14.0
SCRIPT_NAME = "job.sbatch"
#: the way out of a refused run directory, for every message
HINT = ("remove it (or have its owner remove it), or give --run-dir (SLURMTOPO_RUN_DIR) "
        "in a directory only you can write")


def runs_root(submit_dir: str) -> str:
    return os.path.join(submit_dir, RUNS_SUBDIR)


def run_dir_for(submit_dir: str, job_id: int) -> str:
    return os.path.join(runs_root(submit_dir), str(int(job_id)))


def layout(run_dir: str) -> Tuple[str, List[str], List[bool]]:
    """(anchor, components below it, whether each is slurmtopo's own by
    name) for ``run_dir``. The default ``<dir>/.slurmtopo/runs/<job>`` is
    anchored at ``<dir>`` and all three components are slurmtopo's; any
    other run directory is anchored at its deepest existing parent, the
    missing parents are slurmtopo's (made 0700) and the directory itself is
    the user's choice (refused when others may write it, never chmod-ed)."""
    path = os.path.abspath(run_dir)
    head, leaf = os.path.split(path)
    if os.path.basename(head) == "runs" and os.path.basename(os.path.dirname(head)) == \
            ".slurmtopo" and leaf:
        return os.path.dirname(os.path.dirname(head)), [".slurmtopo", "runs", leaf], [True] * 3
    parts = [leaf]
    while head != os.path.dirname(head) and not os.path.isdir(head):
        head, name = os.path.split(head)
        parts.insert(0, name)
    return head, parts, [True] * (len(parts) - 1) + [False]


def open_run_dir(run_dir: str, create: bool = True) -> SafeDir:
    """The job's run directory, checked (and made) as :func:`layout` says."""
    anchor, parts, own = layout(run_dir)
    return safedir.open_under(anchor, parts, create=create, own=own, hint=HINT)


#: the way out of a refused ``--output-dir``
OUTPUT_HINT = "give --output-dir a directory only you can write (e.g. under your home)"


def write_output_files(output_dir: str, files: Sequence[Tuple[str, str]],
                       published: bool = False, hint: str = OUTPUT_HINT) -> List[str]:
    """Write ``(name, text)`` files into an ``--output-dir`` (``plan``,
    ``sbatch``, ``agent discover``, ``nccl-topo``), all or none (0600,
    ``job.sbatch`` 0700, through the directory's descriptor); their paths.
    ``published``: files other users are meant to read (node reports for
    everyone's planner, NCCL topology files for everyone's jobs): 0644 in
    directories made 0755; the same checks, so still nobody else's to
    change.
    The directory is checked and made as a ``--run-dir`` is (:func:`layout`:
    missing parents and itself made 0700, an existing one must be the
    user's own and writable by nobody else). Written by path into any
    directory, a ``/tmp/plan`` another user made first, or a
    ``slurmtopo-plan`` made group-writable by umask 002 in a shared submit
    directory, let that user replace ``job.sbatch`` before it was
    submitted (docs/security.md)."""
    with open_output_dir(output_dir, published, hint) as where:
        if published:
            safedir.write_files([(where, name, text) for name, text in files],
                                mode=safedir.PUBLISHED_FILE)
        else:
            safedir.write_files([(where, name, text) for name, text in files],
                                modes={SCRIPT_NAME: 0o700})  # the user may run it
        return [where.child(name) for name, _ in files]


def open_output_dir(output_dir: str, published: bool = False,
                    hint: str = OUTPUT_HINT) -> SafeDir:
    """An ``--output-dir``, checked and made as :func:`write_output_files`
    says (for a command that reads what is there before it writes)."""
    anchor, parts, own = layout(output_dir)
    dir_mode = safedir.PUBLISHED_DIR if published else safedir.PRIVATE_DIR
    return safedir.open_under(anchor, parts, own=own, hint=hint, dir_mode=dir_mode)


def open_runs_root(submit_dir: str, create: bool = True) -> SafeDir:
    """``<submit dir>/.slurmtopo/runs``, checked (and made)."""
    return safedir.open_under(submit_dir, RUNS_SUBDIR.split(os.sep), create=create, hint=HINT)


def check_location(run_dir: Optional[str], submit_dir: str) -> Callable[[], None]:
    """Before a job is submitted: its run directory (``--run-dir``), else
    the runs root of the submit directory, is the user's own and private
    (made now when missing), so a refusal comes before the job exists.

    Returns the undo for a submission that then fails: it removes the
    directories made here, innermost first, while they are still empty
    (through the parent's descriptor; a link or a directory someone filled
    meanwhile is left alone), so a failed sbatch leaves no empty
    ``.slurmtopo/runs`` behind."""
    if run_dir:
        anchor, parts, own = layout(run_dir)
    else:
        anchor, parts, own = submit_dir, RUNS_SUBDIR.split(os.sep), [True, True]
    made_from = next((i for i in range(len(parts))
                      if not os.path.lexists(os.path.join(anchor, *parts[:i + 1]))), len(parts))
    with (open_run_dir(run_dir) if run_dir else open_runs_root(submit_dir)):
        pass

    def undo() -> None:
        for i in reversed(range(made_from, len(parts))):
            try:
                with safedir.open_under(anchor, parts[:i], create=False, own=own[:i],
                                        hint=HINT) as parent:
                    os.rmdir(parts[i], dir_fd=parent.fd)
            except (OSError, SlurmtopoError):
                return
    return undo


def save_script(run_dir: str, script_text: str) -> str:
    """Keep the submitted script in the job's run directory (mode 0600, in
    directories of mode 0700, like everything bind writes there)."""
    with open_run_dir(run_dir) as where:
        safedir.write_files([(where, SCRIPT_NAME, script_text)])
        return where.child(SCRIPT_NAME)


def clean_old(submit_dir: str, keep_days: float = DEFAULT_KEEP_DAYS,
              now: Optional[float] = None, keep: Sequence[str] = (),
              listed: Optional[Callable[[], Iterable[int]]] = None) -> List[str]:
    """Remove the run directories (named by job id) in ``submit_dir``'s runs
    root whose newest file is older than ``keep_days``; never one named in
    ``keep``, nor one of a job Slurm still lists (``listed``: asked once,
    only when a directory is old enough; a running job's files can look
    old, and its later steps and `slurmtopo show` need them; an error
    there removes nothing). Returns the removed paths; ``keep_days`` <= 0
    removes nothing.

    Only directories the user owns, directly inside the runs root, are
    considered, and every step goes through descriptors: a runs root that
    is a link or another user's is refused (SlurmtopoError, nothing
    removed), and nothing outside it is ever touched."""
    if keep_days <= 0:
        return []
    cutoff = (time.time() if now is None else now) - keep_days * 86400
    try:
        root = open_runs_root(submit_dir, create=False)
    except safedir.MissingDir:
        return []
    removed = []
    still: Optional[set] = None
    with root:
        for name, st in safedir.owned_dirs(root).items():
            if not name.isdigit() or name in keep:
                continue
            try:
                old = safedir.newest_mtime(root, name) < cutoff
            except (OSError, SlurmtopoError):
                continue
            if not old:
                continue
            if still is None:
                still = {str(j) for j in listed()} if listed is not None else set()
            if name in still:
                continue
            try:
                safedir.remove_tree(root, name, st)
                removed.append(root.child(name))
            except (OSError, SlurmtopoError):
                continue
    return removed


#: the largest file read back from a run directory (a 16,384-rank
#: rankmap.json is a few MiB; a script is at most Slurm's 4 MiB)
MAX_READ_BYTES = 64 << 20


def read_run_file(run_dir: str, name: str, limit: int = MAX_READ_BYTES) -> Optional[str]:
    """The text of ``name`` in the run directory ``run_dir``, read back the
    way it was written: the directory through :func:`open_run_dir` (the
    user's own, no link followed), the file relative to it without
    following a link, only a regular file of the user's that nobody else
    may write. None when the directory or the file is not there; a
    SlurmtopoError saying why when either is refused. Run directories may
    sit under a directory others can write (a job's WorkDir), so a path is
    never simply opened."""
    try:
        where = open_run_dir(run_dir, create=False)
    except safedir.MissingDir:
        return None
    with where:
        return read_file_at(where, name, limit)


def read_file_at(where: SafeDir, name: str, limit: int = MAX_READ_BYTES) -> Optional[str]:
    """The text of ``name`` in ``where`` (None: not there), read without
    following a link: only a regular file of the user's that nobody else
    may write, at most ``limit`` bytes; else a SlurmtopoError saying why."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=where.fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SlurmtopoError(f"cannot open ({exc.strerror or exc}; a link is never "
                             "followed)", where.child(name)) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or \
                st.st_mode & 0o022:
            raise SlurmtopoError("not a regular file of yours that only you can write: "
                                 "not read", where.child(name))
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise SlurmtopoError(f"larger than {limit >> 20} MiB: not read", where.child(name))
    return data.decode("utf-8", errors="replace")
