"""The link speeds the planner compares, as an interface.

The planner ranks pieces of split blocks and node types by how fast their
links are, in the cost model's figures, but never imports the cost model
(dependencies run groups -> placement -> cost -> choice): the caller
passes an object with these methods. :mod:`slurmtopo.plan.choice` passes the
inventory's cost parameters (:class:`slurmtopo.plan.choice.CostModelSpeeds`), so
the planner sees what the admin told the cost model (an oversubscribed
spine, a NIC's real rate) as the choice among its proposals does.
"""
from __future__ import annotations

from typing import Protocol, Sequence, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Hardware


class LinkSpeeds(Protocol):
    def ring(self, hw: Hardware, gpus: Tuple[int, ...]) -> Tuple[LinkClass, float]:
        """(class, GB/s) of the best ring over ``gpus`` (sorted, two or
        more) inside one node of ``hw``."""

    def network_share(self, hw: Hardware) -> Sequence[float]:
        """Per GPU of ``hw``: GB/s of network (its share of its closest
        compute NICs)."""

    def network(self, share: float, cls: LinkClass) -> float:
        """GB/s of network a GPU whose share of its NICs is ``share`` gets
        in a ring over hosts that meet at ``cls`` (a network class): less
        than its share above an oversubscribed level, so that a piece of a
        split group across the spine is priced as the cost model prices
        it, not as one under the leaf."""

    def hardware_order(self, hw: Hardware) -> Tuple[float, ...]:
        """Sort key of a node type's links, fastest first (NVLink, network,
        PCIe), so that a job on a mixed cluster gathers on the fastest
        model it can."""
