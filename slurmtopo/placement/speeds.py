"""The link speeds the planner compares, as an interface.

The planner ranks pieces of split blocks and node types by how fast their
links are, in the cost model's figures, but never imports the cost model
(dependencies run groups -> placement -> cost -> choice): the caller
passes an object with these three methods. :mod:`slurmtopo.choice` passes
the cost model's default parameters (:class:`slurmtopo.choice.CostModelSpeeds`).
"""
from __future__ import annotations

from typing import Protocol, Sequence, Tuple

from slurmtopo.links import LinkClass
from slurmtopo.model import Hardware


class LinkSpeeds(Protocol):
    def ring(self, hw: Hardware, gpus: Tuple[int, ...]) -> Tuple[LinkClass, float]:
        """(class, GB/s) of the best ring over ``gpus`` (sorted, two or
        more) inside one node of ``hw``."""

    def network_share(self, hw: Hardware) -> Sequence[float]:
        """Per GPU of ``hw``: GB/s of network (its share of its closest
        compute NICs)."""

    def hardware_order(self, hw: Hardware) -> Tuple[float, ...]:
        """Sort key of a node type's links, fastest first (NVLink, network,
        PCIe), so that a job on a mixed cluster gathers on the fastest
        model it can."""
