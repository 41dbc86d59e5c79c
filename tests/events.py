"""What the placement daemon's event log says, for the tests that read it
(tests/daemon/, tests/integration/test_daemon.py)."""
from __future__ import annotations

from typing import Mapping, Sequence


def release_count(events: Sequence[Mapping[str, object]], job_id: int) -> int:
    """How many times the event log says ``job_id`` was released."""
    return sum(1 for e in events if e.get("job") == job_id
               and e.get("event") in ("released", "release-confirmed"))
