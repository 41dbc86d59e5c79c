"""``slurmtopo daemon run`` that sleeps after chosen steps of a release, so
an integration test can kill it exactly there (test code: the installed
daemon only marks the steps, :meth:`slurmtopo.daemon.loop.Daemon.reached`).

    python tests/integration/paused_daemon.py after-intent=60 -- daemon run --inventory ...
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Dict, List, Sequence, Tuple


def parse(argv: Sequence[str]) -> Tuple[Dict[str, float], List[str]]:
    """``STEP=SECONDS ... -- SLURMTOPO ARGS`` -> ({step: seconds}, args)."""
    from slurmtopo.daemon.loop import RELEASE_STEPS

    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    pauses = {}
    for item in argv[:cut]:
        step, _, secs = item.partition("=")
        if step not in RELEASE_STEPS:
            raise SystemExit(f"unknown step {step!r} (one of {', '.join(RELEASE_STEPS)})")
        pauses[step] = float(secs)
    return pauses, argv[cut + 1:]


def pausing(daemon_class, pauses: Dict[str, float]):
    """A Daemon class that sleeps ``pauses[step]`` seconds after a step."""

    class Paused(daemon_class):
        def reached(self, step: str) -> None:
            if pauses.get(step):
                logging.getLogger("slurmtopo.daemon").info("test pause %s: sleeping %.1fs",
                                                           step, pauses[step])
                time.sleep(pauses[step])

    return Paused


def main(argv: Sequence[str]) -> int:
    from slurmtopo.cli import main as slurmtopo_main
    from slurmtopo.daemon import loop

    pauses, args = parse(argv)
    loop.Daemon = pausing(loop.Daemon, pauses)  # commands/daemon.py imports it at run time
    return slurmtopo_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
