"""Reading and writing user files: bounded reads, whole writes.

Reading
    Every file slurmtopo reads from a user (inventory, node report, state,
    fabric dump, ``nvidia-smi`` text, Slurm configs, plan documents) goes
    through :func:`read_text`, which refuses devices (``--inventory
    /dev/zero``), reads at most a fixed number of bytes and turns every
    failure into one located :class:`~slurmtopo.errors.InventoryError`. So a
    wrong path costs a one-line message, never gigabytes of memory.

Writing
    slurmctld reads ``topology.conf`` and ``gres.conf`` whenever it restarts;
    the planner reads node reports while agents rewrite them; ``slurmtopo
    plan`` writes a rank map and the script that must match it. Every file
    slurmtopo writes goes to a temporary file in the same directory, is
    fsynced and renamed over the target (atomic on POSIX). :func:`write_all`
    does this for a set of files at once: all are staged before any is
    renamed, and a failure part-way puts the replaced ones back, so the
    targets end up all new or all old. Errors name the target, never a
    temporary or backup file. Nothing is written world-writable.
"""
from __future__ import annotations

import os
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from slurmtopo.errors import InventoryError, SlurmtopoError

MiB = 1 << 20
#: largest YAML/JSON document, Slurm config, ``nvidia-smi`` text or plan read
#: (a 12,500-node state snapshot is about 1 MiB)
MAX_TEXT_BYTES = 64 * MiB
#: largest ``ibnetdiscover`` dump read (100,000 HCAs and their switches are
#: about 50 MiB)
MAX_FABRIC_DUMP_BYTES = 256 * MiB


def read_text(path, limit: Optional[int] = None, errors: str = "strict") -> str:
    """The UTF-8 text of ``path``, at most ``limit`` bytes of it (default
    MAX_TEXT_BYTES).

    Character and block devices are refused outright; pipes and regular
    files are read up to ``limit`` bytes, and a longer one is refused
    rather than read on. ``errors="replace"`` reads text with stray bytes
    (captured terminal output) instead of refusing it.
    """
    path = os.fspath(path)
    limit = MAX_TEXT_BYTES if limit is None else limit
    try:
        with open(path, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                raise InventoryError("is a device, not a file", path)
            if stat.S_ISSOCK(mode):
                raise InventoryError("is a socket, not a file", path)
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise InventoryError("cannot read: no such file", path) from None
    except IsADirectoryError:
        raise InventoryError("is a directory, not a file", path) from None
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror or exc}", path) from None
    if len(data) > limit:
        raise InventoryError(f"larger than {limit // MiB} MiB: refused (is it the right file?)",
                             path)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InventoryError("not a text file (invalid UTF-8)", path, line) from None


def ensure_dir(path, what: str = "output directory", mode: int = 0o777) -> str:
    """Create directory ``path`` (and parents) if needed; one-line errors.

    A path that names a file, or a parent that does, is refused here, not
    as a traceback in ``os.makedirs``. ``mode`` as for ``os.makedirs``
    (0o700 for a private run directory).
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise SlurmtopoError(f"the {what} is not a directory", path)
    try:
        os.makedirs(path, mode=mode, exist_ok=True)
    except OSError as exc:
        raise SlurmtopoError(f"cannot create the {what} ({exc.strerror or exc})", path) from None
    return path


@dataclass(frozen=True)
class Output:
    """One file to write: where, what, its mode, and whether an existing
    file's mode, owner and group carry over (a root-written
    ``topology.conf`` must stay readable to a ``0640 root:slurm`` setup)."""

    path: str
    text: Union[str, bytes]  # bytes: written as they are (an image)
    mode: int = 0o644
    keep_owner: bool = False


class _Staged:
    """One output on its way: its temporary file and the old file's link."""

    def __init__(self, out: Output):
        self.path = os.fspath(out.path)
        self.directory = os.path.dirname(os.path.abspath(self.path))
        self.tmp: Optional[str] = None
        self.old: Optional[str] = None   # hidden link to the replaced file
        self.backup: Optional[str] = None
        self.replaced = False


def _cannot_write(path: str, exc: OSError) -> SlurmtopoError:
    return SlurmtopoError(f"cannot write: {exc.strerror or exc}", path)


def _unlink(path: Optional[str]) -> None:
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def _stage(out: Output, st: _Staged, sync: bool = True) -> None:
    """Write ``out`` to a temporary file beside its target (flushed to disk
    with ``sync``)."""
    mode, owner = out.mode, None
    if not os.path.isdir(st.directory):
        why = "is not a directory" if os.path.exists(st.directory) else "does not exist"
        raise SlurmtopoError(f"cannot write: {st.directory} {why}", st.path)
    if os.path.isdir(st.path):
        raise SlurmtopoError("cannot write: is a directory", st.path)
    if out.keep_owner and os.path.exists(st.path):
        info = os.stat(st.path)
        mode, owner = info.st_mode & 0o7777, (info.st_uid, info.st_gid)
    mode &= ~0o002
    try:
        fd, st.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(st.path)}.", suffix=".tmp",
                                      dir=st.directory)
        binary = isinstance(out.text, bytes)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            fh.write(out.text)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        if owner is not None:
            try:
                os.chown(st.tmp, *owner)
            except PermissionError:
                pass  # not root: the file stays ours, with the old mode
        os.chmod(st.tmp, mode)
    except OSError as exc:
        raise _cannot_write(st.path, exc) from None


def _keep_old(st: _Staged, backup_stamp: Optional[str]) -> None:
    """A hard link to the file about to be replaced (a copy where the file
    system has none): the visible backup with ``backup_stamp``, else a
    hidden one for the roll-back, dropped once all is written."""
    if not os.path.lexists(st.path):
        return
    try:
        if backup_stamp is not None:
            old = _backup_name(st.path, backup_stamp)
        else:
            fd, old = tempfile.mkstemp(prefix=f".{os.path.basename(st.path)}.", suffix=".old",
                                       dir=st.directory)
            os.close(fd)
            os.unlink(old)
        try:
            os.link(st.path, old)
        except OSError:
            import shutil
            shutil.copy2(st.path, old)
        st.old = old
        st.backup = old if backup_stamp is not None else None
    except OSError as exc:
        raise _cannot_write(st.path, exc) from None


def _backup_name(path: str, stamp: str) -> str:
    name = f"{path}.{stamp}.bak"
    n = 1
    while os.path.lexists(name):
        name = f"{path}.{stamp}.{n}.bak"
        n += 1
    return name


def _roll_back(staged: Sequence[_Staged]) -> None:
    """Put every replaced target back as it was; drop what is left."""
    for st in staged:
        if st.replaced:
            try:
                if st.old is not None:
                    os.replace(st.old, st.path)
                    st.old = None
                else:
                    os.unlink(st.path)
            except OSError:
                pass  # best effort: the error raised names the first failure
        _unlink(st.tmp)
        _unlink(st.old)


def _fsync_dirs(directories) -> None:
    for directory in sorted(set(directories)):
        try:
            dir_fd = os.open(directory, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)


def write_all(outputs: Sequence[Output], backup: bool = False,
              stamp: Optional[str] = None, sync: bool = True) -> Dict[str, Optional[str]]:
    """Write every output, or none of them.

    All files are staged as temporary files beside their targets first; only
    when every one is written are they renamed over the targets. If a rename
    fails, the targets already replaced get their old content back. With
    ``backup=True`` each replaced file is kept as
    ``<path>.<YYYYmmdd-HHMMSS>.bak``. ``sync=False`` skips the fsyncs, for
    files that matter only while the machine stays up (a job's run
    directory: a hundred fsyncs on a shared file system cost more than the
    rest of the step); all-or-none still holds. Returns {path: backup path
    or None}.
    """
    staged: List[_Staged] = [_Staged(o) for o in outputs]
    backup_stamp = (stamp or time.strftime("%Y%m%d-%H%M%S")) if backup else None
    try:
        for out, st in zip(outputs, staged):
            _stage(out, st, sync)
        for st in staged:
            _keep_old(st, backup_stamp)
        for st in staged:
            try:
                os.replace(st.tmp, st.path)
            except OSError as exc:
                raise _cannot_write(st.path, exc) from None
            st.tmp, st.replaced = None, True
    except BaseException:
        _roll_back(staged)
        raise
    for st in staged:
        if st.backup is None:
            _unlink(st.old)
    if sync:
        _fsync_dirs(st.directory for st in staged)
    return {st.path: st.backup for st in staged}


def atomic_write(path, text: Union[str, bytes], mode: int = 0o644, backup: bool = False,
                 stamp: Optional[str] = None, keep_owner: bool = False) -> Optional[str]:
    """Atomically replace ``path`` with ``text``; returns the backup's path
    (with ``backup=True`` and an existing file), else None."""
    path = os.fspath(path)
    return write_all([Output(path, text, mode, keep_owner)], backup=backup, stamp=stamp)[path]
