"""Worker processes that never outlive the replay that started them.

The replays run in forked processes (:mod:`~slurmtopo.simulate.runner`).
When the parent dies, whatever kills it (a time-out's SIGTERM, a SIGKILL,
the terminal closing), its workers must go too, or they replay on for an
hour, re-parented to init. Two guards:

* the workers stay in the parent's process group (a fork keeps it), so a
  signal to the group (a shell's Ctrl-C, ``timeout``'s kill of the group,
  ``kill -- -PGID``) reaches them all;
* each worker asks the kernel for a SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)`` on Linux, through ctypes), then checks that
  the parent is still the one that forked it: a parent that died before
  the request would otherwise leave it orphaned already.

Elsewhere than Linux only the first guard holds.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl(2)'s option number (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Called first thing in a worker forked by process ``parent``."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the process group still holds
            pass
    if os.getppid() != parent:  # the parent died before the request
        os._exit(1)
