"""Reading and writing files safely: bounded reads, no link followed where
others may write, whole writes. The one home of that policy.

Reading
    Every file slurmtopo reads from a user (inventory, node report, state,
    fabric dump, ``nvidia-smi`` text, Slurm configs, plan documents) goes
    through :func:`read_text`, which reads regular files only (a FIFO,
    socket, device such as ``--inventory /dev/zero`` or directory is refused
    without blocking on it), at most a fixed number of bytes, and turns every
    failure into one located :class:`~slurmtopo.errors.InventoryError`. So a
    wrong path costs a one-line message, never a hang or gigabytes of
    memory. Where a command documents ``-`` for stdin, it reads stdin itself.

Opening files in a directory slurmtopo owns
    The placement daemon runs as root or SlurmUser; its spool holds its own
    files and a ``requests/`` directory every user may write into. Whatever
    a name there is, the daemon must never block on it (a FIFO), follow it
    somewhere else (a link to ``/etc/shadow`` or to a file it would then
    rewrite), read gigabytes of it or take someone else's file for its own.
    :func:`open_file` and :func:`read_file` open such files: the directory
    with ``O_NOFOLLOW`` and the file relative to it (``dir_fd``) with
    ``O_NOFOLLOW | O_NONBLOCK``, then ``fstat`` on the open descriptor: a
    regular file, owned by one of the expected users, no larger than the
    caller's limit; a file created gets its mode whatever the umask. Every
    refusal is an :class:`UnsafeFileError` naming the file. The same
    regular-file check, byte limit and wording serve :func:`read_text`,
    which (unlike these) follows a link the user named.

Writing
    slurmctld reads ``topology.conf`` and ``gres.conf`` whenever it restarts;
    the planner reads node reports while agents rewrite them; ``slurmtopo
    plan`` writes a rank map and the script that must match it. Every file
    slurmtopo writes goes to a temporary file in the same directory, is
    fsynced and renamed over the target (atomic on POSIX). :func:`write_all`
    does this for a set of files at once: all are staged before any is
    renamed, and a failure part-way puts the replaced ones back, so the
    targets end up all new or all old. Errors name the target, never a
    temporary or backup file. Nothing is written world-writable, and a
    file gets the mode asked for whatever the umask (0600 for the daemon's
    journal). With
    backups, the replaced file is kept as ``<file>.<stamp>.bak`` and only
    the newest :data:`KEEP_BACKUPS` (a parameter) of a target stay.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Collection, Dict, List, Optional, Sequence, Union

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


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)


class UnsafeFileError(SlurmtopoError):
    """A file in a directory slurmtopo owns (the daemon's spool) that it
    may not use: a link, not a regular file, someone else's, too large."""


def kind_of(mode: int) -> str:
    """``a FIFO``, ``a directory``, ... for a file's ``st_mode``: what a
    refusal calls a file that is not a regular one."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a regular file"


def _size_words(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit and limit % MiB == 0 else f"{limit:,} bytes"


def _checked(fd: int, path: str, error, what: str = "",
             owners: Optional[Collection[int]] = None) -> os.stat_result:
    """``fstat`` of the open ``fd`` (no race between a check and the open):
    a regular file owned by one of ``owners`` (None: anyone; empty: no one,
    the rightful owner being unknown), else ``error`` naming ``path``; the
    descriptor is closed on a refusal."""
    try:
        st = os.fstat(fd)
        note = f" (the {what})" if what else ""
        if not stat.S_ISREG(st.st_mode):
            raise error(f"is {kind_of(st.st_mode)}, not a regular file: refused{note}", path)
        if owners is not None and st.st_uid not in owners:
            if not owners:
                raise error(f"the {what} belongs to uid {st.st_uid}, and its rightful owner "
                            "cannot be checked (the owner is not known)", path)
            raise error(f"the {what} belongs to uid {st.st_uid}, not to "
                        + " or ".join(f"uid {u}" for u in sorted(set(owners))), path)
    except BaseException:
        os.close(fd)
        raise
    return st


def _read_bounded(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fd`` (one more than allowed tells a
    file that is too long), read in pieces: never more memory than that."""
    chunks = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def open_regular(path) -> int:
    """A read-only descriptor on ``path``, which must be a regular file.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the descriptor
    itself (no race between a check and the open): a FIFO with no writer,
    a device or a terminal is refused at once instead of blocking the
    reader, a ``slurmtopo plan --inventory`` or the placement daemon,
    forever. ``O_NOCTTY`` keeps a terminal from becoming ours. A link the
    user named is followed (the user's own choice; the files of a
    directory slurmtopo owns go through :func:`open_file`, which follows
    none). Raises InventoryError naming ``path``; the caller closes the
    descriptor.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _NOCTTY | _CLOEXEC)
    except FileNotFoundError:
        raise InventoryError("cannot read: no such file", path) from None
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror or exc}", path) from None
    _checked(fd, path, InventoryError)
    os.set_blocking(fd, True)  # a regular file: reads block as usual
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
        data = _read_bounded(fd, limit)
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InventoryError(f"larger than {_size_words(limit)}: refused (is it the right "
                             "file?)", path)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InventoryError("not a text file (invalid UTF-8)", path, line) from None


# --------------------------------------------------------------------------
# files in a directory slurmtopo owns, which others may have written into


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symbolic link (not followed)"
    if exc.errno == errno.ENOTDIR:
        return "is not a directory"
    return f"cannot be opened ({exc.strerror or exc})"


def open_dir(path: str) -> int:
    """A descriptor of directory ``path``; its last component must not be a
    symbolic link. FileNotFoundError passes through."""
    try:
        return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnsafeFileError(_why(exc), path) from None


def open_file(directory: str, name: str, flags: int, owners: Optional[Collection[int]],
              what: str, mode: int = 0o600) -> int:
    """``name`` in ``directory`` opened with ``flags`` (plus no-follow,
    non-blocking, close-on-exec, no controlling terminal), checked to be a
    regular file owned by one of ``owners`` (None: anyone; empty: no one,
    the rightful owner being unknown). The directory is opened without
    following a link and the file looked up relative to it, so neither is
    a link that is followed, and a FIFO is refused without blocking. With
    ``O_CREAT`` the file gets ``mode`` whatever the umask (an older file
    with another mode too). FileNotFoundError passes through; every
    refusal is an :class:`UnsafeFileError` naming the file."""
    dfd = open_dir(directory)
    path = os.path.join(directory, name)
    try:
        try:
            fd = os.open(name, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _NOCTTY, mode,
                         dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise UnsafeFileError(f"the {what} {_why(exc)}", path) from None
    finally:
        os.close(dfd)
    st = _checked(fd, path, UnsafeFileError, what, owners)
    if flags & os.O_CREAT and stat.S_IMODE(st.st_mode) != mode:
        try:
            os.fchmod(fd, mode)
        except OSError as exc:
            os.close(fd)
            raise UnsafeFileError(f"the {what} cannot be made mode {mode:04o} "
                                  f"({exc.strerror or exc})", path) from None
    return fd


def read_file(directory: str, name: str, limit: int, owners: Optional[Collection[int]],
              what: str) -> bytes:
    """At most ``limit`` bytes of ``name`` in ``directory`` (see
    :func:`open_file`); a longer file is refused, not cut."""
    fd = open_file(directory, name, os.O_RDONLY, owners, what)
    path = os.path.join(directory, name)
    try:
        if os.fstat(fd).st_size > limit:
            raise UnsafeFileError(f"the {what} is larger than {_size_words(limit)}", path)
        try:
            data = _read_bounded(fd, limit)
        except OSError as exc:
            raise UnsafeFileError(f"the {what} cannot be read ({exc.strerror})", path) from None
        if len(data) > limit:
            raise UnsafeFileError(f"the {what} is larger than {_size_words(limit)}", path)
        return data
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# writing


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


def _keep_old(st: _Staged, stamp: Optional[str]) -> None:
    """A hard link to the file about to be replaced (a copy where the file
    system has none): the visible backup with ``stamp``, else a
    hidden one for the roll-back, dropped once all is written."""
    if not os.path.lexists(st.path):
        return
    try:
        if stamp is not None:
            old = backup_name(st.path, stamp)
        else:
            fd, old = tempfile.mkstemp(prefix=f".{os.path.basename(st.path)}.", suffix=".old",
                                       dir=st.directory)
            os.close(fd)
            os.unlink(old)
        try:
            os.link(st.path, old)
        except OSError:
            shutil.copy2(st.path, old)
        st.old = old
        st.backup = old if stamp is not None else None
    except OSError as exc:
        raise _cannot_write(st.path, exc) from None


def _backup_pattern(path: str) -> "re.Pattern[str]":
    """The names :func:`backup_name` gives ``path``'s backups, with the
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
    try:
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    try:
        return prune_backups_at(dir_fd, os.path.basename(path), keep)
    finally:
        os.close(dir_fd)


def prune_backups_at(dir_fd: int, name: str, keep: int = KEEP_BACKUPS) -> List[str]:
    """:func:`prune_backups` for file ``name`` of the open directory
    ``dir_fd`` (a directory reached through descriptors: safedir)."""
    pattern = _backup_pattern(name)
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
    return removed


def backup_stamp() -> str:
    """The stamp of the backups made now (``YYYYmmdd-HHMMSS``)."""
    return time.strftime("%Y%m%d-%H%M%S")


def backup_name(path: str, stamp: str, exists=os.path.lexists) -> str:
    """``<path>.<stamp>.bak``, or ``<path>.<stamp>.<n>.bak`` for the first
    ``n`` that ``exists`` says is free."""
    name = f"{path}.{stamp}.bak"
    n = 1
    while exists(name):
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
    stamp_now = (stamp or backup_stamp()) if backup else None
    try:
        for out, st in zip(outputs, staged):
            _stage(out, st, sync)
        for st in staged:
            _keep_old(st, stamp_now)
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
