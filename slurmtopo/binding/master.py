"""The address every rank rendezvous at (``MASTER_ADDR``, torchrun's
``--master-addr``): rank 0's node, by a name the nodes can resolve.

Slurm names a node with its NodeName, which on most clusters is also its
host name. Where it is not (a NodeName that is only Slurm's alias, as the
dev cluster's node1..node4 on 127.0.0.1 are), torch's TCPStore cannot reach
``node1``; Slurm itself reaches the node's slurmd at its NodeAddr, so that
is the address given instead. A name that resolves is kept, even where
NodeAddr differs: NodeAddr may be a management network, while the host
name is what the cluster's users and torch's own examples rendezvous at.
The check runs on the batch host (where ``slurmtopo bind`` runs), the node
the other nodes' ranks will connect to.
"""
from __future__ import annotations

import socket
from typing import Callable, Optional, Tuple

from slurmtopo.errors import SlurmError

__all__ = ["resolves", "master_address"]


def resolves(name: str) -> bool:
    """True when ``name`` resolves to an address here (what torch does with
    MASTER_ADDR)."""
    try:
        return bool(socket.getaddrinfo(name, None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return False


def master_address(host: str, slurm, resolve: Callable[[str], bool] = resolves
                   ) -> Tuple[str, Optional[str]]:
    """(address, note): ``host`` when it resolves, else its NodeAddr from
    Slurm when that resolves; the note (for the job's log) says why the
    address is not the host's name, or that neither resolves."""
    if not host or resolve(host):
        return host, None
    try:
        addr = slurm.node_addr(host)
    except SlurmError as exc:
        addr, why = None, str(exc)
    else:
        why = "Slurm shows no NodeAddr"
    if addr and addr != host and resolve(addr):
        return addr, (f"node name {host} does not resolve here: MASTER_ADDR is its NodeAddr "
                      f"{addr} (scontrol show node)")
    return host, (f"node name {host} does not resolve here and its NodeAddr gives nothing "
                  f"better ({why if not addr else addr}): the ranks may not find MASTER_ADDR")
