"""Reading and writing user files: bounded reads, whole writes.

Reading
    Every file slurmtopo reads from a user (inventory, node report, state,
    fabric dump, ``nvidia-smi`` text, Slurm configs, plan documents) goes
    through :func:`read_text`, which reads regular files only (a FIFO,
    socket, device such as ``--inventory /dev/zero`` or directory is refused
    without blocking on it), at most a fixed number of bytes, and turns every
    failure into one located :class:`~slurmtopo.errors.InventoryError`. So a
    wrong path costs a one-line message, never a hang or gigabytes of
    memory. Where a command documents ``-`` for stdin, it reads stdin itself.

Writing
    slurmctld reads ``topology.conf`` and ``gres.conf`` whenever it restarts;
    the planner reads node reports while agents rewrite them; ``slurmtopo
    plan`` writes a rank map and the script that must match it. Every file
    slurmtopo writes goes to a temporary file in the same directory, is
    fsynced and renamed over the target (atomic on POSIX). :func:`write_all`
    does this for a set of files at once: all are staged before any is
    renamed, and a failure part-way puts the replaced ones back, so the
    targets end up all new or all old. Errors name the target, never a
    temporary or backup file. Nothing is written world-writable. With
    backups, the replaced file is kept as ``<file>.<stamp>.bak`` and only
    the newest :data:`KEEP_BACKUPS` (a parameter) of a target stay.
"""
from __future__ import annotations

import os
import re
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
#: backups ``write_all(backup=True)`` keeps of each target, the newest
KEEP_BACKUPS = 5


#: what each kind of non-regular file is called in the refusal
_NOT_A_FILE = ((stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "is a FIFO (pipe)"),
               (stat.S_ISSOCK, "is a socket"), (stat.S_ISCHR, "is a device"),
               (stat.S_ISBLK, "is a device"))


def open_regular(path) -> int:
    """A read-only descriptor on ``path``, which must be a regular file.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the descriptor
    itself (no race between a check and the open): a FIFO with no writer,
    a device or a terminal is refused at once instead of blocking the
    reader, a ``slurmtopo plan --inventory`` or the placement daemon,
    forever. ``O_NOCTTY`` keeps a terminal from becoming ours. Raises
    InventoryError naming ``path``; the caller closes the descriptor.
    """
    path = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InventoryError("cannot read: no such file", path) from None
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror or exc}", path) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = next((why for test, why in _NOT_A_FILE if test(mode)), "is not a regular file")
            raise InventoryError(f"{what}, not a regular file: refused", path)
        os.set_blocking(fd, True)  # a regular file: reads block as usual
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path) -> None:
    """Refuse ``path`` unless it is a readable regular file, for files a
    library opens itself (paramiko's known_hosts and key files): the same
    one-line InventoryError as :func:`read_text`, never a hang."""
    os.close(open_regular(path))


def read_text(path, limit: Optional[int] = None, errors: str = "strict") -> str:
    """The UTF-8 text of ``path``, at most ``limit`` bytes of it (default
    MAX_TEXT_BYTES).

    Only regular files are read (:func:`open_regular`): FIFOs, sockets,
    devices and directories are refused without waiting on them, and a
    file longer than ``limit`` is refused rather than read on.
    ``errors="replace"`` reads text with stray bytes (captured terminal
    output) instead of refusing it.
    """
    path = os.fspath(path)
    limit = MAX_TEXT_BYTES if limit is None else limit
    fd = open_regular(path)
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(limit + 1)
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


def _backup_pattern(path: str) -> "re.Pattern[str]":
    """The names :func:`_backup_name` gives ``path``'s backups, with the
    stamp and the counter as groups."""
    return re.compile(rf"^{re.escape(os.path.basename(path))}\.(\d{{8}}-\d{{6}})(?:\.(\d+))?"
                      r"\.bak$")


def prune_backups(path, keep: int = KEEP_BACKUPS) -> List[str]:
    """Remove all but the ``keep`` newest backups of ``path``; returns the
    names removed.

    Only regular files named as :func:`write_all` names this target's
    backups (``<name>.<YYYYmmdd-HHMMSS>[.<n>].bak``) count; they are ordered
    by the stamp in the name (a backup is a hard link: its mtime is the old
    file's). Symlinks, directories and other names are left alone, nothing
    is followed (the directory is read and entries unlinked through its
    descriptor), and a failure to remove one is no failure of the write.
    """
    path = os.fspath(path)
    pattern = _backup_pattern(path)
    try:
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    removed: List[str] = []
    try:
        found = []
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                m = pattern.match(entry.name)
                if m and entry.is_file(follow_symlinks=False):
                    found.append(((m.group(1), int(m.group(2) or 0)), entry.name))
        found.sort()
        for _key, name in found[:max(0, len(found) - keep)]:
            try:
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return removed


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
              stamp: Optional[str] = None, sync: bool = True,
              keep_backups: int = KEEP_BACKUPS) -> Dict[str, Optional[str]]:
    """Write every output, or none of them.

    All files are staged as temporary files beside their targets first; only
    when every one is written are they renamed over the targets. If a rename
    fails, the targets already replaced get their old content back. With
    ``backup=True`` each replaced file is kept as
    ``<path>.<YYYYmmdd-HHMMSS>.bak``, and only the ``keep_backups`` newest
    backups of a target are kept (:func:`prune_backups`: the oldest go
    first). ``sync=False`` skips the fsyncs, for
    files that matter only while the machine stays up (a job's run
    directory: a hundred fsyncs on a shared file system cost more than the
    rest of the step); all-or-none still holds. Returns {path: backup path
    or None}.
    """
    if keep_backups < 1:
        raise ValueError(f"keep_backups must be at least 1, got {keep_backups}")
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
        else:
            prune_backups(st.path, keep_backups)
    if sync:
        _fsync_dirs(st.directory for st in staged)
    return {st.path: st.backup for st in staged}


def atomic_write(path, text: Union[str, bytes], mode: int = 0o644, backup: bool = False,
                 stamp: Optional[str] = None, keep_owner: bool = False,
                 keep_backups: int = KEEP_BACKUPS) -> Optional[str]:
    """Atomically replace ``path`` with ``text``; returns the backup's path
    (with ``backup=True`` and an existing file), else None. At most
    ``keep_backups`` backups of ``path`` stay."""
    path = os.fspath(path)
    return write_all([Output(path, text, mode, keep_owner)], backup=backup, stamp=stamp,
                     keep_backups=keep_backups)[path]
