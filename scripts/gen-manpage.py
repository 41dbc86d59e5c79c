#!/usr/bin/env python3
"""Write docs/man/slurmtopo.1 from the click command tree
(slurmtopo.commands.manpage). Run after changing a command or an option;
tests/test_manpage.py fails while the committed page is stale."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from slurmtopo.commands.manpage import MAN_PATH, generate  # noqa: E402

if __name__ == "__main__":
    path = os.path.join(ROOT, MAN_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(generate())
    print(f"wrote {MAN_PATH}")
