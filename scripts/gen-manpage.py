#!/usr/bin/env python3
"""Write docs/man/slurmtopo.1 from the click command tree
(slurmtopo.commands.manpage). Run after changing a command or an option;
tests/test_manpage.py fails while the committed page is stale."""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from slurmtopo.commands.manpage import MAN_PATH, generate  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/gen-manpage.py",
        description=f"Write {MAN_PATH} (slurmtopo(1)) from slurmtopo's click command tree. "
                    "Run it after adding or changing a command or an option; "
                    "tests/test_manpage.py fails while the committed page is stale.")
    parser.add_argument("--check", action="store_true",
                        help=f"write nothing; exit 1 when {MAN_PATH} is not the generated page")
    args = parser.parse_args(argv)
    path = os.path.join(ROOT, MAN_PATH)
    text = generate()
    if args.check:
        try:
            with open(path, encoding="utf-8") as fh:
                same = fh.read() == text
        except FileNotFoundError:
            same = False
        print(f"{MAN_PATH} is {'up to date' if same else 'stale: run scripts/gen-manpage.py'}")
        return 0 if same else 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {MAN_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
