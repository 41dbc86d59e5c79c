"""The plan document written: what ``slurmtopo sbatch``'s script carries
(the layout, the request, every rank, enough of the inventory to re-plan)
and the JSON it is written as. Plan time only: the start-time step reads
it back with :mod:`slurmtopo.plan.plandoc`, the contract's home. Pure."""
from __future__ import annotations

import base64
import json
import os
import zlib
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.inventory.model import Fabric, Inventory, Placement
from slurmtopo.inventory.schema import inventory_dict
from slurmtopo.inventory.topology import network_view
from slurmtopo.plan.plandoc import PLAN_KIND, PLAN_VERSION
from slurmtopo.plan.rankmap import check_placement, cpulists, dumps_rankmap, layout_dict

#: embed the whole inventory in the script below this size (JSON bytes),
#: else only the planned nodes and the switches above them
EMBED_LIMIT = 256 * 1024
#: ... and only when it has at most this many nodes
EMBED_WHOLE_NODES = 1024


def embedded_inventory(inv: Inventory, hosts: Sequence[str]) -> Dict[str, Any]:
    """The inventory in schema form, for bind to use when the inventory path
    is unreadable on the compute node. Preset hardware is written out (the
    node's slurmtopo may know other presets). Small inventories go in whole
    so a re-plan can use any node; big ones are cut to the planned nodes and
    the switches above them (an inventory of more than EMBED_WHOLE_NODES
    nodes is not even tried whole: folding 100,000 names costs a second)."""
    def with_types(sub: Inventory) -> Inventory:
        types = dict(sub.node_types)
        for n in sub:
            if n.type is not None and n.type not in types:
                types[n.type] = n.hardware
        return Inventory(nodes=sub.nodes, fabric=sub.fabric, node_types=types)

    if len(inv.nodes) <= EMBED_WHOLE_NODES:
        whole = inventory_dict(with_types(inv))
        if len(json.dumps(whole)) <= EMBED_LIMIT:
            return whole
    keep = set(hosts)
    nodes = {h: inv.nodes[h] for h in hosts if h in inv.nodes}
    view = network_view(inv.fabric)
    sw_keep = {sw for h in keep for sw in view.ancestors.get(h, {})}
    switches = tuple(
        type(s)(name=s.name, level=s.level, nodes=tuple(x for x in s.nodes if x in keep),
                switches=tuple(c for c in s.switches if c in sw_keep), link_gbps=s.link_gbps,
                description=s.description)
        for s in inv.fabric.switches if s.name in sw_keep)
    blocks = tuple(type(b)(name=b.name, nodes=tuple(x for x in b.nodes if x in keep))
                   for b in inv.fabric.blocks if any(x in keep for x in b.nodes))
    sub = Inventory(nodes=nodes, fabric=Fabric(switches=switches, blocks=blocks,
                                               block_sizes=inv.fabric.block_sizes),
                    node_types=dict(inv.node_types))
    return inventory_dict(with_types(sub))


def request_dict(req) -> Dict[str, Any]:
    """The JobRequest fields a re-plan needs, as JSON data. The node list
    and exclusions are dropped: at start time the allocation is the limit."""
    out: Dict[str, Any] = {}
    if req is None:
        return out
    items = ({f.name: getattr(req, f.name) for f in fields(req)} if is_dataclass(req)
             else dict(req))
    for k, v in items.items():
        if k in ("layout", "nodelist", "exclude"):
            continue
        if isinstance(v, Mapping):
            v = {str(a): b for a, b in v.items()}
        elif isinstance(v, (tuple, list, set, frozenset)):
            v = list(v)
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[k] = v
    return out


def plan_document(inv: Inventory, placement: Placement, layout, req=None,
                  inventory_path: Optional[str] = None, master_port: Optional[int] = None,
                  socket_ifname: Optional[str] = None,
                  launch: Optional[Mapping[str, Any]] = None,
                  guardrails: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Everything ``slurmtopo bind`` needs, as JSON data for the script.
    ``launch``: ``{"launcher": "srun"|"torchrun"}``; ``guardrails``: the
    hazard policy, NCCL release and spares the job was submitted with
    (:func:`guardrails_dict`; the key is left out when empty, so a plan
    that uses none of them is what it was before they existed)."""
    check_placement(placement)
    doc = {
        "slurmtopo": PLAN_KIND, "version": PLAN_VERSION,
        "inventory_path": os.path.abspath(inventory_path) if inventory_path else None,
        "layout": layout_dict(layout),
        "request": request_dict(req),
        "master_port": master_port,
        "socket_ifname": socket_ifname,
        "hosts": list(placement.by_host()),
        "ranks": pack(rank_columns(placement)),
        "inventory": pack(embedded_inventory(inv, placement.hosts)),
        "launch": dict(launch or {"launcher": "srun"}),
    }
    if guardrails:
        doc["guardrails"] = dict(guardrails)
    return doc


def guardrails_dict(hazards: Sequence[str] = (), nccl_version: Optional[str] = None,
                    spares: int = 0) -> Dict[str, Any]:
    """The plan's ``guardrails`` part: only what was given."""
    out: Dict[str, Any] = {}
    if hazards:
        out["hazards"] = list(hazards)
    if nccl_version:
        out["nccl_version"] = str(nccl_version)
    if spares:
        out["spares"] = int(spares)
    return out


# --------------------------------------------------------------------------
# the ranks, compactly (version 2)
#
# Version 1 wrote one JSON object per rank: 2 MB of script at 16,384 ranks,
# and Slurm refuses scripts over max_script_size (4 MB by default). Version 2
# writes columns: host index, GPU, local rank, and indices into the few
# distinct NIC and CPU sets; above PACK_BYTES the columns are zlib-compressed
# and base64-encoded (lines of BASE64_LINE characters).

#: columns above this many bytes of JSON are packed
PACK_BYTES = 16 * 1024
BASE64_LINE = 76


def rank_columns(placement: Placement) -> Dict[str, Any]:
    """The ranks as columns (rank r is index r of each list): ``host``
    indexes the plan's ``hosts``, ``nics``/``cpus`` index ``nic_sets``
    (comma-joined names) and ``cpu_sets`` (kernel cpulists)."""
    slots = placement.slots
    hosts = {h: i for i, h in enumerate(placement.by_host())}
    cpulist = cpulists(placement)
    # NIC and CPU tuples are shared by the slots that have them: index each
    # distinct object once, in the order the ranks first show it (a value
    # met again under another object gets the index it has already)
    nic_sets: Dict[Tuple[str, ...], int] = {}
    cpu_sets: Dict[str, int] = {}  # cpulist -> index
    nics = list(map(attrgetter("nics"), slots))
    cpus = list(map(attrgetter("cpus"), slots))
    nic_ix = {k: nic_sets.setdefault(t, len(nic_sets))
              for k, t in dict(zip(map(id, nics), nics)).items()}
    cpu_ix = {k: cpu_sets.setdefault(cpulist[k], len(cpu_sets))
              for k in dict.fromkeys(map(id, cpus))}
    cols: Dict[str, List[Any]] = {
        "host": list(map(hosts.__getitem__, map(attrgetter("host"), slots))),
        "gpu": list(map(attrgetter("gpu"), slots)),
        "local_rank": list(map(attrgetter("local_rank"), slots)),
        "nics": list(map(nic_ix.__getitem__, map(id, nics))),
        "cpus": list(map(cpu_ix.__getitem__, map(id, cpus))),
        "numa_node": list(map(attrgetter("numa_node"), slots)),
    }
    out: Dict[str, Any] = {"nic_sets": [",".join(n) for n in nic_sets],
                           "cpu_sets": list(cpu_sets)}
    out.update(cols)
    return out


def pack(value: Any) -> Any:
    """``value`` as it is when its JSON is small, else ``{"packed":
    "zlib+base64", "data": [lines]}``: zlib at level 9 is deterministic, and
    base64 lines are quoted JSON strings, so nothing in them can end the
    here-document."""
    text = json.dumps(value, separators=(",", ":"))
    if len(text) <= PACK_BYTES:
        return value
    b64 = base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")
    return {"packed": "zlib+base64",
            "data": [b64[i:i + BASE64_LINE] for i in range(0, len(b64), BASE64_LINE)]}


def dumps_plan(doc: Mapping[str, Any]) -> str:
    """The plan document as JSON, one key a line and one rank column (or
    base64 line) a line; nothing in it can end a quoted here-document: every
    line starts with a blank or a brace."""
    ranks = doc.get("ranks")
    if not isinstance(ranks, Mapping):  # version 1
        return dumps_rankmap(doc)
    dumps = json.dumps
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key in ("ranks", "inventory") and isinstance(value, Mapping) and (
                key == "ranks" or "packed" in value):
            inner = list(value.items())
            lines.append(f"  {dumps(key)}: {{")
            for j, (k, v) in enumerate(inner):
                last = "," if j < len(inner) - 1 else ""
                if k == "data" and isinstance(v, list):
                    lines.append(f"    {dumps(k)}: [")
                    lines.append(",\n".join("      " + dumps(x) for x in v))
                    lines.append(f"    ]{last}")
                else:
                    lines.append(f"    {dumps(k)}: {dumps(v, separators=(',', ':'))}{last}")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {dumps(key)}: {dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"
