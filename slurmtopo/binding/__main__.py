"""`python3 -m slurmtopo.binding rank -- CMD`: the per-rank launcher."""
import sys
from typing import Sequence

from slurmtopo.binding.launcher import rank_main


def _main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "rank":
        return rank_main(argv[1:])
    print("usage: python3 -m slurmtopo.binding rank -- CMD [ARGS...]\n"
          "(the batch-host step is `python3 -m slurmtopo bind`)", file=sys.stderr)
    return 2


sys.exit(_main(sys.argv[1:]))

