"""Private directories and files in places other users can reach.

A job's run directory usually sits in its submit directory, and research
groups share those: setgid, group-writable, no sticky bit. Another member
of the group can then create, rename or replace any entry there, between
any two system calls of ours. So nothing here trusts a path twice:

* a directory is reached from an *anchor* (the directory the user chose:
  the submit directory, or the parent of ``--run-dir``) one component at a
  time, each opened relative to its parent's file descriptor with
  ``O_NOFOLLOW | O_DIRECTORY``: a symbolic link is refused, never followed;
* each component is checked on the open descriptor (``fstat``): it must
  belong to the user; one that slurmtopo creates is made with ``mkdir``
  (which fails if anything is there) and set to 0700 whatever the umask;
  existing ones are set to 0700 (slurmtopo's own, by name) or refused
  when others may write them (a directory the user named);
* files are written through the directory's descriptor: a temporary made
  with ``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600 whatever the umask,
  then renamed over the target within the same directory (a link planted
  at the target is replaced, not followed);
* removal (:func:`remove_tree`) walks descriptors too and never leaves the
  directory it was given.

Paths appear only in messages. The anchor itself is opened the way the
system resolves it: it is the user's own choice of place.
"""
from __future__ import annotations

import errno
import os
import pwd
import stat
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files import fileio

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: deepest tree :func:`remove_tree` descends (a run directory is two levels)
MAX_DEPTH = 16
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
#: a directory and files other users are meant to read (node reports for
#: everyone's planner, NCCL topology files for everyone's jobs): still
#: writable by nobody but their owner, whatever the umask
PUBLISHED_DIR = 0o755
PUBLISHED_FILE = 0o644


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class SafeDir:
    """An open directory checked to be the user's own. ``path`` is for
    messages only; every operation goes through ``fd``."""

    def __init__(self, fd: int, path: str, shared_anchor: Optional[str] = None):
        self.fd = fd
        self.path = path
        #: a note when the anchor above it is writable by other users
        #: (they can make a job fail there, not change what it runs)
        self.shared_anchor = shared_anchor

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "SafeDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def child(self, name: str) -> str:
        return os.path.join(self.path, name)

    def subdir(self, name: str, create: bool = True, hint: str = "") -> "SafeDir":
        """The directory ``name`` inside this one (slurmtopo's own: made or
        set to 0700)."""
        fd = _step(self.fd, self.path, name, create=create, own=True, hint=hint)
        return SafeDir(fd, self.child(name))

    def entry(self, name: str) -> Optional[os.stat_result]:
        """lstat of ``name`` here (None: absent)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None


class MissingDir(SlurmtopoError):
    """A directory that is not there (and was not to be made)."""


def _refuse(path: str, why: str, hint: str) -> SlurmtopoError:
    return SlurmtopoError(why + (f"; {hint}" if hint else ""), path)


def _step(parent: int, parent_path: str, name: str, create: bool, own: bool,
          hint: str, dir_mode: int = PRIVATE_DIR) -> int:
    """Open (or make) directory ``name`` in ``parent`` and check it; returns
    its descriptor. ``own``: slurmtopo's own directory by name (a mode that
    grants more than ``dir_mode`` is set to ``dir_mode``); else a directory
    the user named (one others may write is refused). One made here gets
    ``dir_mode`` (0700, or :data:`PUBLISHED_DIR`)."""
    path = os.path.join(parent_path, name)
    if not name or name in (".", "..") or "/" in name:
        raise _refuse(path, f"{name!r} is not a directory name", hint)
    made = False
    try:
        fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise MissingDir("no such directory", path) from None
        try:
            os.mkdir(name, PRIVATE_DIR, dir_fd=parent)
            made = True
        except FileExistsError:
            pass  # made meanwhile by someone: checked below like any other
        except OSError as exc:
            raise SlurmtopoError(f"cannot create the directory ({exc.strerror})", path) from None
        try:
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        except OSError as exc:
            raise _not_a_dir(parent, name, path, exc, hint) from None
    except OSError as exc:
        raise _not_a_dir(parent, name, path, exc, hint) from None
    try:
        st = os.fstat(fd)
        me = os.geteuid()
        if st.st_uid != me:
            raise _refuse(path, f"owned by {user_name(st.st_uid)}, not by you ({user_name(me)}): "
                                "another user could change what your job runs", hint)
        mode = stat.S_IMODE(st.st_mode)
        if made or (own and mode & ~dir_mode & 0o777):
            os.fchmod(fd, dir_mode)
        elif not own and mode & 0o022:
            raise _refuse(path, f"other users may write in it (mode {mode:04o}): they could "
                                f"change what your job runs; chmod go-w {path}", hint)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_a_dir(parent: int, name: str, path: str, exc: OSError, hint: str) -> SlurmtopoError:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return SlurmtopoError(f"cannot open ({exc.strerror or exc})", path)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError:
            target = "?"
        return _refuse(path, f"is a symbolic link (to {target}, owned by "
                             f"{user_name(st.st_uid)}); slurmtopo never follows a link here", hint)
    if exc.errno == errno.ENOTDIR:
        return _refuse(path, f"is not a directory (owned by {user_name(st.st_uid)})", hint)
    return SlurmtopoError(f"cannot open ({exc.strerror or exc})", path)


def open_under(anchor: str, parts: Sequence[str], create: bool = True,
               own: Sequence[bool] = (), hint: str = "",
               dir_mode: int = PRIVATE_DIR) -> SafeDir:
    """``anchor/parts[0]/parts[1]/...`` as a :class:`SafeDir`: every part
    opened without following links, made when missing (``create``) and
    checked. ``own[i]`` says whether part ``i`` is slurmtopo's own by name
    (default: all are). ``hint``: how the user gets out of a refusal.
    ``dir_mode``: the mode of the directories made (0700 unless others are
    meant to read what goes there)."""
    anchor = os.path.abspath(anchor)
    try:
        fd = os.open(anchor, _DIR_FLAGS)
    except OSError as exc:
        raise SlurmtopoError(f"cannot open ({exc.strerror or exc})", anchor) from None
    path = anchor
    try:
        st = os.fstat(fd)
        shared = None
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            shared = (f"{anchor} is writable by other users (mode "
                      f"{stat.S_IMODE(st.st_mode):04o}, owner {user_name(st.st_uid)}): they "
                      "cannot change what the job runs, but can make it fail "
                      "(docs/security.md)")
        for i, name in enumerate(parts):
            nxt = _step(fd, path, name, create, own[i] if i < len(own) else True, hint,
                        dir_mode)
            os.close(fd)
            fd = nxt
            path = os.path.join(path, name)
    except BaseException:
        os.close(fd)
        raise
    return SafeDir(fd, path, shared)


# --------------------------------------------------------------------------
# writing


class _Staged:
    def __init__(self, where: SafeDir, name: str):
        self.where = where
        self.name = name
        self.tmp: Optional[str] = None
        self.old: Optional[str] = None
        self.replaced = False


def write_files(files: Sequence[Tuple[SafeDir, str, str]], mode: int = PRIVATE_FILE,
                modes: Optional[Dict[str, int]] = None,
                backup: bool = False) -> Dict[str, Optional[str]]:
    """Write every ``(directory, name, text)``, or none of them: all are
    staged as new files first (``O_EXCL | O_NOFOLLOW``, ``mode`` whatever
    the umask; ``modes[name]`` instead where given, e.g. 0700 for a
    script), then renamed over their targets; a failure part-way puts
    the replaced files back. Errors name the target. ``backup``: a
    replaced file is kept as ``<name>.<stamp>.bak`` and only the newest
    :data:`fileio.KEEP_BACKUPS` of a target stay, as
    :func:`fileio.write_all` keeps them. Returns {name: backup name or
    None}."""
    staged = [_Staged(d, n) for d, n, _ in files]
    stamp = fileio.backup_stamp() if backup else None
    kept: Dict[str, Optional[str]] = {n: None for _, n, _ in files}
    try:
        for st, (_, name, text) in zip(staged, files):
            _stage(st, text, (modes or {}).get(name, mode))
        for st in staged:
            if st.where.entry(st.name) is not None:
                st.old = _hidden(st.where, st.name, "old") if stamp is None else \
                    fileio.backup_name(st.name, stamp,
                                       lambda n, w=st.where: w.entry(n) is not None)
                try:
                    os.link(st.name, st.old, src_dir_fd=st.where.fd, dst_dir_fd=st.where.fd,
                            follow_symlinks=False)
                except OSError:
                    st.old = None  # nothing to put back on failure
                    if stamp is not None:
                        raise SlurmtopoError("cannot keep the previous file as a backup",
                                             st.where.child(st.name)) from None
        for st in staged:
            try:
                os.rename(st.tmp, st.name, src_dir_fd=st.where.fd, dst_dir_fd=st.where.fd)
            except OSError as exc:
                raise SlurmtopoError(f"cannot write: {exc.strerror or exc}",
                                     st.where.child(st.name)) from None
            st.tmp, st.replaced = None, True
    except BaseException:
        for st in staged:
            if st.replaced:
                try:
                    if st.old is not None:
                        os.rename(st.old, st.name, src_dir_fd=st.where.fd,
                                  dst_dir_fd=st.where.fd)
                        st.old = None
                    else:
                        os.unlink(st.name, dir_fd=st.where.fd)
                except OSError:
                    pass
            for leftover in (st.tmp, st.old):
                _unlink_at(st.where, leftover)
        raise
    for st in staged:
        if stamp is None:
            _unlink_at(st.where, st.old)
        elif st.old is not None:
            kept[st.name] = st.old
            fileio.prune_backups_at(st.where.fd, st.name)
    return kept


def _hidden(where: SafeDir, name: str, kind: str) -> str:
    # a name no one can guess: secrets.token_hex(6) is os.urandom(6).hex(), and
    # importing secrets loads OpenSSL (through hmac), some 3 ms of every
    # command that loads this module without writing here (`slurmtopo hooks plan`)
    return f".{name}.{os.urandom(6).hex()}.{kind}"


def _unlink_at(where: SafeDir, name: Optional[str]) -> None:
    if name is not None:
        try:
            os.unlink(name, dir_fd=where.fd)
        except OSError:
            pass


def _stage(st: _Staged, text: str, mode: int) -> None:
    if "/" in st.name or st.name in ("", ".", ".."):
        raise SlurmtopoError("not a file name", st.where.child(st.name))
    st.tmp = _hidden(st.where, st.name, "tmp")
    try:
        fd = os.open(st.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=st.where.fd)
    except OSError as exc:
        st.tmp = None
        raise SlurmtopoError(f"cannot write: {exc.strerror or exc}",
                             st.where.child(st.name)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
    except OSError as exc:
        raise SlurmtopoError(f"cannot write: {exc.strerror or exc}",
                             st.where.child(st.name)) from None


# --------------------------------------------------------------------------
# reading the tree, removing it


def newest_mtime(where: SafeDir, name: str) -> float:
    """The newest modification time of directory ``name`` in ``where`` and
    of everything below it (no link followed)."""
    newest = os.stat(name, dir_fd=where.fd, follow_symlinks=False).st_mtime
    fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=where.fd)
    try:
        for _, _, files, dfd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            for entry in files:
                try:
                    newest = max(newest, os.stat(entry, dir_fd=dfd,
                                                 follow_symlinks=False).st_mtime)
                except OSError:
                    continue
            newest = max(newest, os.fstat(dfd).st_mtime)
    finally:
        os.close(fd)
    return newest


def remove_tree(where: SafeDir, name: str, expected: Optional[os.stat_result] = None) -> None:
    """Remove directory ``name`` in ``where`` and everything in it, through
    descriptors only (``shutil.rmtree``'s ``dir_fd`` needs Python 3.11): a
    link inside is removed, never followed; when ``expected`` is given the
    directory must still be that one (device and inode)."""
    _remove(where.fd, name, expected, 0, where.child(name))


def _remove(parent: int, name: str, expected: Optional[os.stat_result], depth: int,
            path: str) -> None:
    if depth > MAX_DEPTH:
        raise SlurmtopoError(f"deeper than {MAX_DEPTH} levels: left as it is", path)
    try:
        fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        raise SlurmtopoError(f"cannot open ({exc.strerror or exc})", path) from None
    try:
        st = os.fstat(fd)
        if expected is not None and (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            raise SlurmtopoError("changed while being removed: left as it is", path)
        with os.scandir(fd) as entries:
            listing: List[Tuple[str, bool]] = [(e.name, e.is_dir(follow_symlinks=False))
                                               for e in entries]
        for entry, is_dir in listing:
            if is_dir:
                _remove(fd, entry, None, depth + 1, os.path.join(path, entry))
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def owned_dirs(where: SafeDir) -> Dict[str, os.stat_result]:
    """name -> lstat of every directory in ``where`` that is the user's own
    (links and other users' entries left out)."""
    me = os.geteuid()
    out = {}
    for name in sorted(os.listdir(where.fd)):
        st = where.entry(name)
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == me:
            out[name] = st
    return out
