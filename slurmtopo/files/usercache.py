"""Private cache files: where a user's cache entry for a file may live, and
reading and writing entries so that no other user can feed one.

An entry lives beside the file it was made from when that directory is
the user's own (owned by them, writable by nobody else), else in the
user's cache directory (``$XDG_CACHE_HOME/slurmtopo/<kind>``, by default
``~/.cache/slurmtopo/<kind>``), whose ``slurmtopo`` and ``<kind>``
directories are made 0700 and must be the user's own too.

Every access goes through a file descriptor of the directory that was
checked (so a directory swapped after the check is never used), entries
are opened and renamed relative to it with ``O_NOFOLLOW`` (no symbolic
link is followed at the last step), an entry is read only when it is a
regular file owned by the user that nobody else may write, and is written
0600 to a fresh temporary name and renamed into place. An entry another
user could have written is therefore never read, and nothing is written
through a directory another user controls. What an entry says is still
the caller's to check (:mod:`slurmtopo.inventory.cache` checks what it was
made from and a checksum): a damaged or stale entry is rebuilt, never
trusted. A cache is optional: every failure here means "no entry", never
an error.
"""
from __future__ import annotations

import os
import stat
from typing import Optional

# SHA-256 from CPython's own module when there is one: hashlib loads
# OpenSSL on import (+3 modules, ~2.5 ms measured), a cost of every command
# that reads a cache entry (`slurmtopo hooks plan` loads no hashlib else)
try:
    from _sha2 import sha256 as _sha256  # CPython 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # CPython up to 3.11
    except ImportError:
        from hashlib import sha256 as _sha256

#: an entry larger than this is not read (a compiled 12,500-node inventory
#: is about 1 MiB)
MAX_ENTRY_BYTES = 256 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` in hex (the digest :mod:`hashlib` gives, without
    loading OpenSSL)."""
    return _sha256(data).hexdigest()


def _own(st: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_dir(path: str, dir_fd: Optional[int] = None, follow: bool = True) -> Optional[int]:
    """A descriptor of directory ``path`` when it is the user's own and
    they may write in it, else None."""
    fd = None
    try:
        fd = os.open(path, _DIR_FLAGS | (0 if follow else _NOFOLLOW), dir_fd=dir_fd)
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) and _own(st) and st.st_mode & stat.S_IWUSR:
            return fd
    except OSError:
        pass
    if fd is not None:
        os.close(fd)
    return None


def _private_dir(parent_fd: int, name: str, create: bool) -> Optional[int]:
    """``name`` under ``parent_fd`` (with ``create``, made 0700 if missing)
    when it is the user's own and not a symbolic link, else None."""
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass
        except OSError:
            return None
    return _open_dir(name, parent_fd, follow=False)


def user_cache_home() -> Optional[str]:
    """``$XDG_CACHE_HOME`` when it is an absolute path, else ``~/.cache``
    (None without a home directory)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(base):
        return base
    home = os.path.expanduser("~")
    return os.path.join(home, ".cache") if os.path.isabs(home) else None


class Slot:
    """Where one entry lives: an open, checked directory and a name in it.
    Use as a context manager (the directory's descriptor is closed)."""

    def __init__(self, dir_fd: int, name: str, where: str):
        self.dir_fd = dir_fd
        self.name = name
        #: the entry's path, for messages
        self.where = where

    def __enter__(self) -> "Slot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def read(self, limit: int = MAX_ENTRY_BYTES) -> Optional[bytes]:
        """The entry's bytes, or None when there is none or it is not a
        regular file of this user's that nobody else may write (or is
        larger than ``limit``)."""
        fd = None
        try:
            fd = os.open(self.name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK
                         | getattr(os, "O_CLOEXEC", 0), dir_fd=self.dir_fd)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _own(st) or st.st_size > limit:
                return None
            chunks = []
            left = limit + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            return data if len(data) <= limit else None
        except OSError:
            return None
        finally:
            if fd is not None:
                os.close(fd)

    def write(self, data: bytes) -> bool:
        """Replace the entry with ``data`` (0600, through a fresh temporary
        name renamed into place); False when that cannot be done."""
        # a name no one can guess: secrets.token_hex(6) is os.urandom(6).hex(), and
        # importing secrets loads OpenSSL (through hmac: ~3 ms of `slurmtopo hooks plan`)
        tmp = f".{self.name}.{os.urandom(6).hex()}.tmp"
        fd = None
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=self.dir_fd)
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.close(fd)
            fd = None
            os.replace(tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            return True
        except OSError:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(tmp, dir_fd=self.dir_fd)
            except OSError:
                pass
            return False


def slot_for(source: str, kind: str, suffix: str = ".json",
             create: bool = False) -> Optional[Slot]:
    """The slot of the entry made from the file ``source``: beside it
    (``.<name><suffix>`` in its directory) when that directory is the
    user's own, else ``<hash of its absolute path><suffix>`` in the user's
    cache directory for ``kind`` (made when missing only with ``create``:
    looking for an entry makes no directory); None when neither will do
    (no home, a cache directory another user owns or can write)."""
    path = os.path.abspath(source)
    directory, base = os.path.split(path)
    return _slot(directory or os.sep, f".{base}{suffix}", path, kind, suffix, create)


def slot_in(directory: str, name: str, kind: str, suffix: str = ".json",
            create: bool = False) -> Optional[Slot]:
    """The slot of the entry made from the directory ``directory`` (a
    directory of node reports): ``name`` in it when it is the user's own,
    else as :func:`slot_for` says, keyed by the directory's absolute path."""
    path = os.path.abspath(directory)
    return _slot(path, name, path, kind, suffix, create)


def _slot(directory: str, name: str, key: str, kind: str, suffix: str,
          create: bool) -> Optional[Slot]:
    fd = _open_dir(directory)
    if fd is not None:
        return Slot(fd, name, os.path.join(directory, name))
    home = user_cache_home()
    if home is None:
        return None
    try:
        if create:
            os.makedirs(home, 0o700, exist_ok=True)
        home_fd = os.open(home, _DIR_FLAGS)
    except OSError:
        return None
    try:
        top = _private_dir(home_fd, "slurmtopo", create)
    finally:
        os.close(home_fd)
    if top is None:
        return None
    try:
        fd = _private_dir(top, kind, create)
    finally:
        os.close(top)
    if fd is None:
        return None
    name = sha256_hex(key.encode("utf-8", "surrogateescape"))[:32] + suffix
    return Slot(fd, name, os.path.join(home, "slurmtopo", kind, name))
