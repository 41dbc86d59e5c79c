"""What users ask the placement daemon for, read once and within budgets.

Every user's held job carries a request (its comment, or a request file in
``<spool>/requests``). A user must not be able to wear the daemon down for
everyone with them, so:

* **decoded once.** A request is decoded the first time the daemon sees its
  content (the comment, or for a request file the comment and the owner's
  uid: the file's name holds the SHA-256 of its text, so its content
  cannot change under the name) and the result is kept while a job in
  Slurm's queue carries it; it is forgotten in the first cycle no job does
  (and at most :data:`MAX_CACHED` are kept). 40 waiting jobs with
  65,536-name excludes cost 8 s a cycle when they were decoded every cycle.
* **names never expanded.** ``nodelist`` and ``exclude`` are compared with
  the daemon's inventory without expanding them
  (:func:`slurmtopo.inventory.hostlist.select_hostlist`): a request carries only the
  inventory's names, however many the hostlist counts.
* **a budget per user and cycle.** At most :data:`USER_BYTES_PER_CYCLE` of
  one user's requests that were not decoded before are decoded in one
  cycle; the user's other new jobs wait for the next cycle (they are not
  planned, so they claim nothing), everyone else's are read as usual.
* **request files removed when their job is gone.** A file no job in
  Slurm's queue points at is removed once it is older than
  :data:`UNREFERENCED_GRACE_S` (the user writes it just before
  submitting), at once when its owner's files in ``requests/`` pass
  :data:`USER_QUOTA_BYTES`; so is anything else a user put there (a FIFO,
  a link, a file over the size limit; an empty directory). ``requests/``
  is on the spool's file system
  unless the admin mounts one of its own there (docs/security.md): a user
  can still fill it between two sweeps, which is what the file system
  quota or the separate mount is for.
"""
from __future__ import annotations

import logging
import os
import stat
import time
from collections import OrderedDict
from typing import Dict, Iterable, Optional, Set, Tuple

from slurmtopo.daemon import protocol
from slurmtopo.daemon.still_ours import TERMINAL
from slurmtopo.files.fileio import open_dir
from slurmtopo.inventory.hostlist import HostIndex
from slurmtopo.slurm.backend import SlurmJob

log = logging.getLogger("slurmtopo.daemon")

#: one user's requests decoded in one cycle, at most (new ones only: a
#: request decoded before costs nothing)
USER_BYTES_PER_CYCLE = 4 << 20
#: decoded requests kept at most (the queue's distinct requests, normally)
MAX_CACHED = 4096
#: a request file no job points at is removed once this old
UNREFERENCED_GRACE_S = 600.0
#: one user's files in requests/ above this: their unreferenced ones go at once
USER_QUOTA_BYTES = 64 << 20
#: entries of requests/ looked at per sweep, at most
MAX_SWEPT = 20000
#: seconds between two sweeps of requests/
SWEEP_EVERY_S = 60.0

#: what :meth:`Requests.read` returns for a request left for the next cycle
DEFERRED = (None, None)

Decoded = Tuple[Optional["protocol.DaemonSpec"], Optional[str]]


class Requests:
    """The requests of the jobs in Slurm's queue (see the module doc)."""

    def __init__(self, spool: str, clock=time.time):
        self.spool = spool
        self.clock = clock
        self._cache: "OrderedDict[Tuple[str, Optional[int]], Decoded]" = OrderedDict()
        self._seen: Set[Tuple[str, Optional[int]]] = set()
        self._spent: Dict[object, int] = {}
        self._inv: object = None
        self._index: Optional[HostIndex] = None
        self._last_sweep = 0.0
        #: what the last sweep removed (names), for tests and the log
        self.removed: Tuple[str, ...] = ()

    # -- a cycle -------------------------------------------------------------

    def start_cycle(self, inventory) -> None:
        """A new cycle on ``inventory``: the budgets start again, and a
        changed inventory decodes every request again (their names are
        the inventory's)."""
        if inventory is not self._inv:
            self._inv = inventory
            self._index = HostIndex(getattr(inventory, "nodes", ()) or ())
            self._cache.clear()
        self._spent = {}
        self._seen = set()

    def end_cycle(self) -> None:
        """Forget the requests no job of this cycle's queue carried."""
        for key in [k for k in self._cache if k not in self._seen]:
            del self._cache[key]

    def read(self, job: SlurmJob) -> Decoded:
        """(spec, None), (None, why it is refused), or :data:`DEFERRED`
        when the job's owner has used this cycle's budget."""
        pointer = protocol.is_pointer(job.comment)
        key = (job.comment, job.user_id if pointer else None)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self._seen.add(key)
            return hit
        who = job.user_id if job.user_id is not None else (job.user or None)
        spent = self._spent.get(who, 0)
        if spent >= USER_BYTES_PER_CYCLE:
            return DEFERRED
        owners = frozenset({job.user_id}) if job.user_id is not None else frozenset()
        size = [len(job.comment)]
        try:
            out: Decoded = (protocol.parse_comment(job.comment, self.spool, owners,
                                                   index=self._index, sizes=size), None)
        except protocol.ProtocolError as exc:
            out = (None, f"bad slurmtopo request: {exc.message}")
        self._spent[who] = spent + sum(size)
        self._cache[key] = out
        self._seen.add(key)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return out

    def __len__(self) -> int:
        return len(self._cache)

    # -- request files -------------------------------------------------------

    def sweep(self, jobs: Iterable[SlurmJob], force: bool = False) -> Tuple[str, ...]:
        """Remove from ``requests/`` what no job in ``jobs`` (Slurm's whole
        queue) that has not ended points at (see the module doc); at most once a
        :data:`SWEEP_EVERY_S` unless ``force``. Returns the names removed.
        Everything goes through the directory's descriptor: a name is
        unlinked, never followed."""
        now = self.clock()
        if not force and now - self._last_sweep < SWEEP_EVERY_S:
            return ()
        self._last_sweep = now

        # a job that ended (22.05's squeue still lists it for a while) no
        # longer needs its request
        referenced = {protocol.pointer_name(j.comment) for j in jobs if j.state not in TERMINAL}
        directory = os.path.join(self.spool, protocol.REQUESTS_DIR)
        try:
            dfd = open_dir(directory)
        except OSError as exc:
            log.error("requests: cannot open %s (%s)", directory, exc)
            return ()
        removed = []
        try:
            entries = []
            with os.scandir(dfd) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_SWEPT:
                        break
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    entries.append((entry.name, st))
            per_user: Dict[int, int] = {}
            for _name, st in entries:
                if stat.S_ISREG(st.st_mode):
                    per_user[st.st_uid] = per_user.get(st.st_uid, 0) + st.st_size
            for name, st in entries:
                stem = name[:-5] if name.endswith(".json") else None
                if stem is not None and stem in referenced:
                    continue
                old = now - st.st_mtime >= UNREFERENCED_GRACE_S
                if not (old or per_user.get(st.st_uid, 0) > USER_QUOTA_BYTES):
                    continue
                try:
                    if stat.S_ISDIR(st.st_mode):
                        os.rmdir(name, dir_fd=dfd)
                    else:
                        os.unlink(name, dir_fd=dfd)
                except OSError:
                    continue
                removed.append(name)
        finally:
            os.close(dfd)
        if removed:
            log.info("requests: removed %d file(s) no queued job points at", len(removed))
        self.removed = tuple(removed)
        return self.removed


def same_file_system(spool: str) -> bool:
    """Whether ``requests/`` is on the spool's own file system (so that a
    user who fills it fills the journal's too; docs/security.md)."""
    try:
        return os.stat(spool).st_dev == os.stat(
            os.path.join(spool, protocol.REQUESTS_DIR)).st_dev
    except OSError:
        return True
