"""Writing files so that no reader ever sees half of one.

slurmctld reads ``topology.conf`` and ``gres.conf`` whenever it restarts;
the planner reads node reports while agents rewrite them. Every file
slurmtopo writes goes to a temporary file in the same directory, is fsynced
and renamed over the target (atomic on POSIX), optionally after keeping a
timestamped backup of the previous version. Nothing is written
world-writable.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Optional

from slurmtopo.errors import SlurmtopoError


def atomic_write(path, text: str, mode: int = 0o644, backup: bool = False,
                 stamp: Optional[str] = None, keep_owner: bool = False) -> Optional[str]:
    """Atomically replace ``path`` with ``text``.

    With ``backup=True`` and an existing file, its previous content is kept
    as ``<path>.<YYYYmmdd-HHMMSS>.bak`` (returned). ``mode`` is masked so the
    result is never world-writable. With ``keep_owner=True`` an existing
    file's mode, owner and group carry over to the new one (a root-written
    ``topology.conf`` must stay readable to a ``0640 root:slurm`` setup).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    owner = None
    if keep_owner and os.path.exists(path):
        st = os.stat(path)
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    mode &= ~0o002
    if not os.path.isdir(directory):
        raise SlurmtopoError(f"directory does not exist: {directory}", path)
    backup_path = None
    if backup and os.path.exists(path):
        stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
        backup_path = f"{path}.{stamp}.bak"
        n = 1
        while os.path.exists(backup_path):
            backup_path = f"{path}.{stamp}.{n}.bak"
            n += 1
        shutil.copy2(path, backup_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if owner is not None:
            try:
                os.chown(tmp, *owner)
            except PermissionError:
                pass  # not root: the file stays ours, with the old mode
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise SlurmtopoError(f"cannot write: {exc.strerror}", path) from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return backup_path
