"""Opening files in the daemon's spool without trusting what is there.

The placement daemon runs as root or SlurmUser. Its spool holds its own
files (the journal, the event log, the status file, the lock) and a
``requests/`` directory that every user may write into. Whatever the path
names, the daemon must never block on it (a FIFO), follow it somewhere else
(a symbolic link to ``/etc/shadow`` or to a file it would then rewrite),
read gigabytes of it or take someone else's file for its own. So every file
in the spool is opened here:

* ``O_NOFOLLOW``: a symbolic link as the last component is refused, and
  the directory is opened with ``O_NOFOLLOW`` as well and the file looked
  up relative to it (``dir_fd``), so no component inside the spool is a
  link that is followed;
* ``O_NONBLOCK``: opening a FIFO returns at once (and is then refused);
* ``fstat`` on the open file: it must be a regular file, owned by one of
  the expected users, no larger than the caller's limit.

Every refusal is a :class:`SpoolFileError` (a ``SlurmtopoError``) naming
the file and what was wrong with it.
"""
from __future__ import annotations

import os
import stat
from typing import Collection, Optional

from slurmtopo.errors import SlurmtopoError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)


class SpoolFileError(SlurmtopoError):
    """A file in the spool that is not what the daemon may use."""


def kind_of(mode: int) -> str:
    """``a FIFO``, ``a directory``, ... for a file's ``st_mode``."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _why(exc: OSError) -> str:
    import errno

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
        raise SpoolFileError(_why(exc), path) from None


def open_file(directory: str, name: str, flags: int, owners: Optional[Collection[int]],
              what: str, mode: int = 0o600) -> int:
    """``name`` in ``directory`` opened with ``flags`` (plus no-follow,
    non-blocking, close-on-exec), checked to be a regular file owned by one
    of ``owners`` (None: anyone; empty: no one, the rightful owner being
    unknown). FileNotFoundError passes through."""
    dfd = open_dir(directory)
    path = os.path.join(directory, name)
    try:
        try:
            fd = os.open(name, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _NOCTTY, mode,
                         dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise SpoolFileError(f"the {what} {_why(exc)}", path) from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpoolFileError(f"is {kind_of(st.st_mode)}, not a regular file: refused "
                                 f"(the {what})", path)
        if owners is not None and st.st_uid not in owners:
            if not owners:
                raise SpoolFileError(f"the {what} belongs to uid {st.st_uid}, and its rightful "
                                     "owner cannot be checked (the owner is not known)", path)
            raise SpoolFileError(f"the {what} belongs to uid {st.st_uid}, not to "
                                 + " or ".join(f"uid {u}" for u in sorted(set(owners))), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(directory: str, name: str, limit: int, owners: Optional[Collection[int]],
              what: str) -> bytes:
    """At most ``limit`` bytes of ``name`` in ``directory`` (see
    :func:`open_file`); a longer file is refused, not cut."""
    fd = open_file(directory, name, os.O_RDONLY, owners, what)
    try:
        path = os.path.join(directory, name)
        if os.fstat(fd).st_size > limit:
            raise SpoolFileError(f"the {what} is larger than {limit:,} bytes", path)
        chunks = []
        left = limit + 1
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 20))
            except OSError as exc:
                raise SpoolFileError(f"the {what} cannot be read ({exc.strerror})", path) from None
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise SpoolFileError(f"the {what} is larger than {limit:,} bytes", path)
        return data
    finally:
        os.close(fd)
