"""The node report: one Node plus a ``report`` block, and how to compare two.

Every source (NVML, ``nvidia-smi topo -m``) ends in :class:`Discovery`; the
CLI and the health watch only deal with that. The ``report`` block carries what
the planner and an admin want to know about the *reading* itself: when,
by which agent, from what source, with which driver, and ``problems``,
the list of things that could not be read (a lost GPU, an unsupported NVML
call). It is written as the inventory schema's free-form ``report``
mapping, so ``load_inventory`` reads a directory of reports as they are.
"""
from __future__ import annotations

import datetime as _dt
import re
import socket
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from slurmtopo.agent import AGENT_VERSION
from slurmtopo.inventory.model import Node
from slurmtopo.inventory.schema import node_report

#: report keys that change on every run without the node changing
VOLATILE_KEYS = ("generated_at",)


@dataclass
class Discovery:
    """What one discovery run found."""

    node: Node
    report: Dict[str, Any]
    #: indices of GPUs NVML enumerates but cannot use (GPU_IS_LOST ...)
    lost_gpus: List[int] = field(default_factory=list)

    @property
    def problems(self) -> List[str]:
        return list(self.report.get("problems") or [])

    @property
    def usable(self) -> bool:
        """At least one working GPU: otherwise the agent exits non-zero."""
        return len(self.node.gpus) > len(self.lost_gpus)

    def render(self, fmt: str = "yaml") -> str:
        return node_report(self.node, self.report, fmt=fmt)


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def report_block(source: str, problems: List[str], hostname: Optional[str] = None,
                 **extra: Any) -> Dict[str, Any]:
    """The ``report`` mapping, keys in a fixed order (stable diffs)."""
    out: Dict[str, Any] = {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
        .isoformat().replace("+00:00", "Z"),
        "agent_version": AGENT_VERSION,
        "source": source,
        "hostname": hostname if hostname is not None else socket.gethostname(),
    }
    for key, value in extra.items():
        if value is not None and value != [] and value != {}:
            out[key] = value
    out["problems"] = list(problems)
    return out


_VOLATILE_RE = re.compile(r'^\s*"?(?:%s)"?\s*:.*$' % "|".join(VOLATILE_KEYS), re.MULTILINE)


def comparable(text: str) -> str:
    """A rendered report without the lines that change every run: two
    reports rendered by this agent describe the same node state iff these
    are equal. (Text, not parsed YAML: parsing a big report takes most of a
    second, and the health watch compares twice a cycle.)"""
    return _VOLATILE_RE.sub("", text)
