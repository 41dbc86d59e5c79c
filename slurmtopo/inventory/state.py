"""Cluster-state snapshots: which nodes and GPUs are busy.

The planner places around what running jobs hold. Live state comes from
Slurm (slurmtopo.slurm); this module reads and writes the same information
as a file (``slurmtopo: state``), for previews, tests and benchmarks::

    slurmtopo: state
    version: 1
    nodes:
      - {name: "gpu[001-002]", state: allocated}       # taken whole
      - {name: gpu003, busy_gpus: "0-3"}                # half busy
      - {name: gpu004, state: idle, flags: [drain]}     # drained
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from slurmtopo.files.yamlio import Reader, as_bool, as_pos_int, as_str, document_kind, load_document
from slurmtopo.inventory.hostlist import expand_hostlist
from slurmtopo.inventory.model import (SCHEMA_VERSION, ClusterState, Inventory, NodeState,
                                       format_cpulist, parse_cpulist)

#: ``jobs`` (running jobs and their GPUs) is read by ``slurmtopo audit``
#: (slurmtopo.audit.statejobs); the planner needs only the nodes
STATE_KEYS = {"slurmtopo", "version", "nodes", "jobs", "taken_at", "source"}
NODE_STATE_KEYS = {"name", "state", "busy_gpus", "flags", "exclusive"}
BASE_STATES = {"idle", "mixed", "allocated", "completing", "down", "drained", "draining",
               "fail", "future", "maint", "planned", "reserved", "unknown", "power_down",
               "powered_down", "inval", "error"}


def _busy(value):
    if isinstance(value, list):
        return frozenset(int(v) for v in value)
    return frozenset(parse_cpulist(str(value)))


def parse_state(data: Any, path: str = "<state>", inventory: Optional[Inventory] = None) -> ClusterState:
    r = Reader(path)
    if data is None:
        raise r.error("empty document")
    d = r.mapping(data, "the state document")
    document_kind(r, d, ("state",), "state")
    r.mapping(d, "the state document", STATE_KEYS)
    version = r.get(d, "version", "document", as_pos_int, SCHEMA_VERSION)
    if version > SCHEMA_VERSION:
        raise r.error(f"schema version {version} is newer than this slurmtopo understands",
                      Reader.line(d, "version"))
    out: Dict[str, NodeState] = {}
    for i, e in enumerate(r.sequence(d.get("nodes") or [], "nodes")):
        e = r.mapping(e, "node state", NODE_STATE_KEYS)
        names = r.need(e, "name", "node state", expand_hostlist)
        state = r.get(e, "state", "node state", as_str, None)
        busy = r.get(e, "busy_gpus", "node state", _busy, frozenset())
        if state is None:
            state = "mixed" if busy else "idle"
        state = state.lower()
        if state not in BASE_STATES:
            raise r.error(f"unknown node state {state!r} (one of {', '.join(sorted(BASE_STATES))})",
                          Reader.line(e, "state"))
        flags = frozenset(f.lower() for f in r.strings(e.get("flags") or [], "flags",
                                                       Reader.line(e, "flags")))
        excl = r.get(e, "exclusive", "node state", as_bool, state == "allocated" and not busy)
        for name in names:
            if name in out:
                raise r.error(f"node {name!r} appears twice in the state", Reader.line(e, "name"))
            if inventory is not None:
                if name not in inventory.nodes:
                    raise r.error(f"node {name!r} is not in the inventory", Reader.line(e, "name"))
                n_gpus = inventory.nodes[name].hardware.gpu_count
                bad = sorted(g for g in busy if g >= n_gpus)
                if bad:
                    raise r.error(f"node {name!r} has {n_gpus} GPUs, busy_gpus names {bad}",
                                  Reader.line(e, "busy_gpus"))
            out[name] = NodeState(name=name, state=state, busy_gpus=busy, flags=flags,
                                  exclusive=excl)
    return ClusterState(nodes=out, source=path)


def load_state(path, inventory: Optional[Inventory] = None) -> ClusterState:
    return parse_state(load_document(path), str(path), inventory)


def state_dict(state: ClusterState) -> Dict[str, Any]:
    nodes = []
    for st in state.nodes.values():
        e: Dict[str, Any] = {"name": st.name, "state": st.state}
        if st.busy_gpus:
            e["busy_gpus"] = format_cpulist(st.busy_gpus)
        if st.flags:
            e["flags"] = sorted(st.flags)
        if st.exclusive:
            e["exclusive"] = True
        nodes.append(e)
    return {"slurmtopo": "state", "version": SCHEMA_VERSION, "nodes": nodes}
