"""The plan as a person reads it (pure: no printing here).

The parts, each answering one question before the job is submitted:

* the **grid** (nodes x GPUs, each cell the rank placed there, coloured by
  its group): "did my tensor-parallel groups stay inside a node?";
* the **cost table** (per group kind: slowest link and modelled time, beside
  the naive placement's): "what did topology-awareness buy?";
* the **step** (with ``--model``: time a step, tokens/s per GPU, MFU and
  memory per GPU of the plan beside Slurm's default, and the line that
  says how much faster the step models): "how much does my step gain, and
  does it fit?";
* the **splits** (every group that spans hosts although a node could hold
  it, "tp group 12 split 4+4 over gpu031, gpu044"): "where does a group
  cross the network, and how evenly?";
* **warnings** (from the cost model and the planner, and when the plan
  models far above the lower bound on the free GPUs): "what is still slow?".

Each part is built once as plain data (:mod:`slurmtopo.show.sheet`: lines and
tables, :func:`plan_parts`); :func:`render_plan` and the other rich
functions hand them to rich (``Console().print(...)``; tests render them
with ``Console(record=True)``), ``slurmtopo.show.plainout`` writes them into a
file or a pipe without rich, the same bytes.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence

from slurmtopo.cost.step import step_dict
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.topology import network_view
from slurmtopo.job.frameworks.registry import describe
from slurmtopo.job.groups import rank_to_group, span_of
from slurmtopo.show.sheet import Column, Line, Sheet, line
from slurmtopo.show.termsafe import printable

if TYPE_CHECKING:  # rich is imported where a renderable is built: `plan --json` needs none
    from rich.console import Group
    from rich.text import Text

    from slurmtopo.show.tablefit import FittedSheet

#: distinct, readable on dark and light terminals
PALETTE = ("bright_cyan", "bright_magenta", "bright_green", "yellow", "bright_blue",
           "bright_red", "cyan", "magenta", "green", "dark_orange", "blue", "red")
MAX_GRID_HOSTS = 32
COLOR_KINDS = ("tp", "cp", "ep", "pp", "dp")


def _tablefit():
    """:mod:`slurmtopo.show.tablefit`, the rich side of the preview."""
    # lazy: rich (54 modules with tablefit) costs 18 ms measured on the path of `plan` and
    #   `sbatch --dry-run`, which load this module and print without rich off a terminal
    from slurmtopo.show import tablefit

    return tablefit


def format_seconds(t: Optional[float]) -> str:
    if t is None:
        return "-"
    if t == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def format_bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def default_color_kind(placement) -> Optional[str]:
    """The innermost parallel dimension with groups bigger than one rank."""
    for kind in COLOR_KINDS:
        groups = placement.groups.get(kind)
        if groups and len(groups[0]) > 1:
            return kind
    return None


#: compact link names for the cost table (LinkClass.label is the long form)
SHORT_LINK = {"SELF": "self", "NVLINK": "NVLink", "NVLINK_DOMAIN": "NVL-domain", "PIX": "PCIe PIX",
              "PXB": "PCIe PXB", "PHB": "PCIe PHB", "NODE": "PCIe NODE", "SYS": "PCIe SYS",
              "NET_LEAF": "net leaf", "NET_L1": "net spine", "NET_L2": "net core",
              "NET_L3": "net L3+", "NET_FAR": "net far"}


def _label(link) -> str:
    return getattr(link, "label", str(link)) if link is not None else "-"


def _short(link) -> str:
    if link is None:
        return "-"
    return SHORT_LINK.get(getattr(link, "name", ""), _label(link))


def grid(placement, inv=None, color_by: Optional[str] = None, state=None,
         max_hosts: int = MAX_GRID_HOSTS) -> "FittedSheet":
    """:func:`grid_sheet` in rich."""
    return _tablefit().FittedSheet(grid_sheet(placement, inv, color_by, state, max_hosts))


def grid_sheet(placement, inv=None, color_by: Optional[str] = None, state=None,
               max_hosts: int = MAX_GRID_HOSTS) -> Sheet:
    """Nodes (rows, in placement order) by GPUs (columns); a cell shows the
    rank on that GPU in the colour of its ``color_by`` group; ``·`` is a
    free GPU, ``busy`` one that other jobs hold (from ``state``). On a
    terminal too narrow for the table, a line a node, the columns aligned
    and split into chunks that fit (ranks never cut)."""
    kind = color_by if color_by is not None else default_color_kind(placement)
    index = rank_to_group(placement.groups, kind) if kind in placement.groups else None
    hosts = list(placement.hosts)
    n_gpus = 0
    for h in hosts:
        node = inv.nodes.get(h) if inv is not None else None
        n_gpus = max(n_gpus, node.hardware.gpu_count if node is not None
                     else 1 + max(placement.gpus_on(h), default=-1))
    view = network_view(inv.fabric) if inv is not None else None
    title = f"Rank placement ({placement.world_size} ranks on {len(hosts)} nodes)"
    caption = (f"cell = global rank, colour = {kind} group" if kind else "cell = global rank")
    show_leaf = view is not None and not view.flat
    columns = [Column("node")] + ([Column("leaf", style="dim")] if show_leaf else []) + [
        Column(f"GPU{g}", justify="right") for g in range(n_gpus)]
    t = Sheet(title=title, columns=columns, caption=caption, inline=True)
    for h in hosts[:max_hosts]:
        on = {s.gpu: s for s in placement.ranks_on(h)}
        busy = set()
        if state is not None and h in getattr(state, "nodes", {}):
            busy = set(state.nodes[h].busy_gpus)
        node = inv.nodes.get(h) if inv is not None else None
        count = node.hardware.gpu_count if node is not None else n_gpus
        cells: List[Line] = []
        for g in range(n_gpus):
            if g >= count:
                cells.append(EMPTY)
            elif g in on:
                r = on[g].rank
                style = PALETTE[index[r] % len(PALETTE)] if index is not None else ""
                cells.append(line(str(r), f"bold {style}".strip()))
            elif g in busy:
                cells.append(line("busy", "dim red"))
            else:
                cells.append(line("·", "dim"))
        # host and switch names may come from a file someone else wrote (a
        # rank map in a shared directory): never markup, escaped (slurmtopo.show.termsafe)
        row = [line(printable(h))] + (
            [line(printable(view.leaf.get(h, "?")))] if show_leaf else []) + cells
        t.add_row(*row)
    if len(hosts) > max_hosts:
        t.add_row(line(f"… {len(hosts) - max_hosts} more"), *([EMPTY] * (len(columns) - 1)))
    return t


EMPTY = line("")


_PHASE = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def step_sheet(plan_cost, naive_cost=None) -> Sheet:
    """The step (``plan_cost.step``, a :class:`slurmtopo.cost.step.StepPrice`)
    call by call: the role on its groups (kind, groups x size), the
    collective, its message x calls and pass, slowest link and seconds of
    all its calls, for the plan and, when given, Slurm's default placement
    with the gain; the last row the step's time, the number every decision
    uses. A table on an 80-column terminal, a block per call on a narrower
    one, never a cut number."""
    step = plan_cost.step
    nstep = getattr(naive_cost, "step", None) if naive_cost is not None else None
    title = "Modelled communication per step" + (" (plan vs naive)" if nstep else "")
    columns = [Column("call"), Column("collective"), Column("slowest"),
               Column("time", justify="right")]
    if nstep is not None:
        columns += [Column("naive", style="dim"), Column("time", justify="right", style="dim"),
                    Column("gain", justify="right")]
    t = Sheet(title=title, columns=columns, compact=True)
    m, w = step.model, step.workload
    given = "" if w.model is not None else ", the default model"
    mbs = step.whole.micro_batches if step.whole is not None else m.micro_batches
    t.caption = (f"{w.framework} {w.style}; {m.params / 1e9:.3g}B params, {m.layers} layers, "
                 f"hidden {m.hidden}, {m.seq_len} tokens x {m.micro_batch}, "
                 f"{mbs} micro-batch(es){given} (modelled)")
    others = list(nstep.calls) if nstep is not None else []
    for i, c in enumerate(step.calls):
        call = c.call
        coll = (f"{call.collective} {format_bytes(call.message_bytes)} ×{call.calls} "
                f"{_PHASE.get(call.phase, call.phase)}")
        row = [f"{call.what} {c.count}×{c.size}", coll, _short(c.slowest),
               format_seconds(c.seconds)]
        if nstep is not None:
            o = others[i] if i < len(others) and others[i].call == call else None
            row += [_short(o.slowest) if o else "-", format_seconds(o.seconds) if o else "-",
                    _speedup(c.seconds, o.seconds if o else None)]
        t.add_row(*(line(x) for x in row))
    if step.whole is not None:  # the step's time and gain are the step sheet's
        total = ["exposed", "", "", format_seconds(step.exposed_comm_s)]
        if nstep is not None:
            total += ["", format_seconds(nstep.exposed_comm_s),
                      _speedup(step.exposed_comm_s, nstep.exposed_comm_s)]
    else:
        total = ["step", "", "", format_seconds(step.time_s)]
        if nstep is not None:
            total += ["", format_seconds(nstep.time_s), _speedup(step.time_s, nstep.time_s)]
    if t.rows:
        t.sections = frozenset({len(t.rows) - 1})
    t.add_row(*(line(x, "bold") for x in total))
    labels = ["call", "collective", "slowest link", "time"]
    if nstep is not None:
        labels = labels[:3] + ["plan time", "naive link", "naive time", "gain"]
    t.labels = labels
    return t


def _tokens(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.0f}"


def whole_step_sheet(plan_cost, naive_cost=None) -> Optional[Sheet]:
    """The whole step (compute, exposed communication, bubble: the step's
    ``whole``) of the plan beside Slurm's default placement: time a step,
    tokens/s per GPU, MFU, memory per GPU and its parts, with the gain.
    None when the job describes no model (the step is its communication)."""
    step = getattr(plan_cost, "step", None)
    whole = getattr(step, "whole", None)
    if whole is None:
        return None
    nstep = getattr(naive_cost, "step", None) if naive_cost is not None else None
    nwhole = getattr(nstep, "whole", None)
    columns = [Column("step"), Column("plan", justify="right")]
    if nwhole is not None:
        columns += [Column("Slurm default", justify="right", style="dim"),
                    Column("gain", justify="right")]
    t = Sheet(title="Modelled training step" + (" (plan vs Slurm's default)" if nwhole else ""),
              columns=columns, compact=True)
    mem = whole.memory
    fits = "" if mem.fits else " (does not fit)"
    rows = [("time a step", format_seconds(step.time_s),
             format_seconds(nstep.time_s) if nwhole else None,
             _speedup(step.time_s, nstep.time_s) if nwhole else None),
            ("tokens/s per GPU", _tokens(whole.tokens_per_s_per_gpu),
             _tokens(nwhole.tokens_per_s_per_gpu) if nwhole else None,
             _speedup(1 / whole.tokens_per_s_per_gpu if whole.tokens_per_s_per_gpu else None,
                      1 / nwhole.tokens_per_s_per_gpu if nwhole and
                      nwhole.tokens_per_s_per_gpu else None) if nwhole else None),
            ("MFU", f"{whole.mfu:.1%}", f"{nwhole.mfu:.1%}" if nwhole else None, ""),
            ("compute", format_seconds(whole.compute_s),
             format_seconds(nwhole.compute_s) if nwhole else None, ""),
            ("pipeline bubble", format_seconds(whole.bubble_s),
             format_seconds(nwhole.bubble_s) if nwhole else None, ""),
            ("exposed communication", format_seconds(step.exposed_comm_s),
             format_seconds(nstep.exposed_comm_s) if nwhole else None,
             _speedup(step.exposed_comm_s, nstep.exposed_comm_s) if nwhole else None),
            ("memory per GPU", f"{mem.total_gib:.1f} GiB{fits}",
             f"{nwhole.memory.total_gib:.1f} GiB" if nwhole else None, "")]
    for i, (label, plan, naive, gain) in enumerate(rows):
        cells = [label, plan] + ([naive or "-", gain or ""] if nwhole else [])
        t.add_row(*(line(x, "bold" if i == 0 else "") for x in cells))
    parts = ", ".join(f"{k} {v:.1f}" for k, v in mem.as_dict().items() if v >= 0.05)
    gpu = f" of {mem.gpu_gib:.0f} GiB" if mem.gpu_gib else ""
    m = step.model
    eager = ", eager kernels" if whole.stage.eager else ""
    t.caption = (f"{whole.gpu}, {m.dtype}{eager}, {whole.micro_batches} micro-batch(es) of "
                 f"{m.micro_batch} x {m.seq_len} tokens a pipeline; memory{gpu}: {parts} GiB")
    t.labels = ["step", "plan"] + (["Slurm default", "gain"] if nwhole else [])
    return t


def step_gain_line(plan_cost, naive_cost=None) -> Optional[Line]:
    """``The step models 1.14× faster than under Slurm's default placement
    (3.21 s vs 3.66 s; 4,120 vs 3,610 tokens/s per GPU)``, or about the
    communication alone when the job describes no model."""
    step = getattr(plan_cost, "step", None)
    nstep = getattr(naive_cost, "step", None) if naive_cost is not None else None
    if step is None or nstep is None or step.time_s <= 0:
        return None
    whole, nwhole = step.whole, getattr(nstep, "whole", None)
    ratio = nstep.time_s / step.time_s
    if whole is not None and nwhole is not None:
        return line(f"The training step models {ratio:.2f}× faster than under Slurm's default "
                    f"placement ({format_seconds(step.time_s)} vs "
                    f"{format_seconds(nstep.time_s)}; "
                    f"{_tokens(whole.tokens_per_s_per_gpu)} vs "
                    f"{_tokens(nwhole.tokens_per_s_per_gpu)} tokens/s per GPU)", "bold")
    return line(f"The step's communication models {ratio:.2f}× faster than under Slurm's "
                f"default placement ({format_seconds(step.time_s)} vs "
                f"{format_seconds(nstep.time_s)}); give --model for the whole step", "bold")


def cost_sheet(plan_cost, naive_cost=None, all_kinds: bool = False) -> Sheet:
    """The modelled communication: the step call by call
    (:func:`step_sheet`) when the report has priced one; else (a report
    built by hand, a bound) per group kind (those summed into the step
    time, or all with ``all_kinds``): groups x size, collective and
    message, slowest link and modelled time of the plan and, when given,
    of the naive placement with the gain. A table on an 80-column
    terminal; on one too narrow for it, a block per kind
    (:meth:`slurmtopo.show.sheet.Sheet.records`), never a cut number."""
    if getattr(plan_cost, "step", None) is not None and not all_kinds:
        return step_sheet(plan_cost, naive_cost)
    title = "Modelled communication per step" + (" (plan vs naive)" if naive_cost else "")
    columns = [Column("group"), Column("collective"), Column("slowest"),
               Column("time", justify="right")]
    if naive_cost is not None:
        columns += [Column("naive", style="dim"), Column("time", justify="right", style="dim"),
                    Column("gain", justify="right")]
    t = Sheet(title=title, columns=columns, compact=True)
    naive_kinds = getattr(naive_cost, "kinds", {}) if naive_cost is not None else {}
    counted = tuple(getattr(plan_cost, "counted", ()) or ())
    if counted:
        t.caption = "step = " + " + ".join(k for k in counted
                                           if plan_cost.kinds[k].size > 1) + " (modelled)"
    for kind, gc in plan_cost.kinds.items():
        if gc.size <= 1:
            continue  # a group of one rank does not communicate
        if counted and kind not in counted and not all_kinds:
            continue
        mb = getattr(gc, "message_bytes", None)
        coll = str(gc.collective) + (f" {format_bytes(mb)}" if mb else "")
        row = [f"{kind} {gc.count}×{gc.size}", coll, _short(gc.slowest),
               format_seconds(gc.time_s)]
        if naive_cost is not None:
            ng = naive_kinds.get(kind)
            row += [_short(ng.slowest) if ng else "-", format_seconds(ng.time_s) if ng else "-",
                    _speedup(gc.time_s, ng.time_s if ng else None)]
        t.add_row(*(line(c) for c in row),
                  style="dim" if counted and kind not in counted else "")
    step = ["step", "", "", format_seconds(plan_cost.step_time_s)]
    if naive_cost is not None:
        step += ["", format_seconds(naive_cost.step_time_s),
                 _speedup(plan_cost.step_time_s, naive_cost.step_time_s)]
    if t.rows:
        t.sections = frozenset({len(t.rows) - 1})
    t.add_row(*(line(c, "bold") for c in step))
    labels = ["group", "collective", "slowest link", "time"]
    if naive_cost is not None:  # two "time" columns: say whose in the blocks
        labels = labels[:3] + ["plan time", "naive link", "naive time", "gain"]
    t.labels = labels
    return t


def _speedup(plan: Optional[float], naive: Optional[float]) -> str:
    if plan is None or naive is None:
        return "-"
    if plan <= 0:
        return "—" if naive <= 0 else "∞"
    return f"{naive / plan:.2f}×"


def warning_lines(warnings: Iterable[str], notes: Iterable[str] = ()) -> List[Line]:
    lines: List[Line] = []
    for w in warnings:
        lines.append(Line((("warning: ", "bold yellow"), (printable(w), ""))))
    for n in notes:
        lines.append(Line((("note: ", "bold cyan"), (printable(n), ""))))
    return lines


#: group kinds whose splits over hosts the preview lists (innermost traffic)
SPLIT_KINDS = ("tp", "expert-tp", "cp", "ep", "dp", "dp-cp", "pp")

#: the preview warns when the plan models this many times the lower bound
FAR_FROM_BOUND = 1.5


def splits(placement, inv=None) -> List[str]:
    """Every group that spans hosts although a node could hold it, one line
    each: ``tp group 12 split 4+4 over gpu031, gpu044`` (pieces largest
    first, hosts in that order; ``(one NVLink domain)`` when the hosts
    share one). Groups whose block of ranks is bigger than any node (a DP
    group of 2 strided over TP 8) must span hosts and are not listed."""
    most = max((n.hardware.gpu_count for n in inv), default=0) if inv is not None else 0
    world = len(placement.slots)
    lines: List[str] = []
    seen: List[list] = []
    for kind in SPLIT_KINDS:
        groups = placement.groups.get(kind)
        if not groups or len(groups[0]) <= 1:
            continue
        if most and span_of(groups, None, world) > most:
            continue
        if any(groups == g for g in seen):  # dp-cp is dp when cp == 1
            continue
        seen.append(groups)
        for i, g in enumerate(groups):
            per: Dict[str, int] = {}
            for r in g:
                h = placement.slots[r].host
                per[h] = per.get(h, 0) + 1
            if len(per) < 2:
                continue
            parts = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
            text = (f"{kind} group {i} split {'+'.join(str(k) for _, k in parts)} over "
                    f"{', '.join(h for h, _ in parts)}")
            if inv is not None:
                doms = {inv.nodes[h].nvlink_domain for h in per if h in inv.nodes}
                if len(doms) == 1 and None not in doms:
                    text += " (one NVLink domain)"
            lines.append(text)
    return lines


def bound_warning(plan_cost, bound, idle_bound=None) -> Optional[str]:
    """A warning when the plan models far above the lower bound on the
    free GPUs (:func:`slurmtopo.cost.lower_bound` given the state).

    The gap has two causes, and the warning names only the true ones:
    running jobs that leave the free GPUs fragmented (``bound``, on the
    free GPUs, above ``idle_bound``, the same bound on an idle cluster),
    and group kinds that compete for the same fast links (the bound gives
    every kind its best links at once; no placement can when, say, tp and
    dp both want a node's NVLink). With ``bound`` no worse than the idle
    one, fragmentation is not it: saying so on an idle cluster would send
    the user waiting for nothing. ``idle_bound`` None: not known, both
    causes are named as possible. A plan near the bound on the free GPUs
    but far above the idle cluster's is told so: it is the running jobs'
    doing, and waiting may pay."""
    if plan_cost is None or bound is None:
        return None

    def comm(b):
        # the bound's communication (its step_time_s is the whole step's
        # when the job describes its model)
        return None if b is None else (b.comm_s if b.comm_s is not None else b.step_time_s)

    lb, idle = comm(bound), comm(idle_bound)
    if lb <= 0:
        return None
    # compare communication with communication: with the whole step
    # modelled, the step's communication (all of it: the bound hides none)
    step = getattr(plan_cost, "step", None)
    whole = step is not None and step.whole is not None
    mine = step.comm_s if whole else plan_cost.step_time_s
    ratio = mine / lb
    if ratio < FAR_FROM_BOUND:
        # as good as the free GPUs allow, but they are fragmented: an idle
        # cluster's bound is far below
        if (idle is not None and idle > 0 and mine >= FAR_FROM_BOUND * idle
                and lb > idle * (1 + 1e-9)):
            return (f"the plan is near the lower bound on the free GPUs "
                    f"({format_seconds(mine)} vs {format_seconds(lb)} a step), but the running "
                    f"jobs leave the free GPUs fragmented (on an idle cluster the bound is "
                    f"{format_seconds(idle)}): waiting for GPUs may pay")
        return None
    what = "the plan's communication models" if whole else "the plan models"
    head = (f"{what} {ratio:.1f}x the lower bound on the free GPUs "
            f"({format_seconds(mine)} vs {format_seconds(lb)} a step)")
    compete = ("the layout's group kinds compete for the same fast links (the bound gives "
               "each its best at once)")
    if idle is None:
        return f"{head}: the free GPUs may be fragmented, or {compete}"
    if lb > idle * (1 + 1e-9):
        return (f"{head}: the running jobs leave the free GPUs fragmented (on an idle cluster "
                f"the bound is {format_seconds(idle)}), or {compete}")
    return (f"{head}: not for want of free GPUs (the bound is the idle cluster's): "
            f"{compete}; another split of the ranks over tp/pp/dp may model faster")


def split_lines(lines: Sequence[str]) -> List[Line]:
    if not lines:
        return []
    return [line(f"Groups split over hosts ({len(lines)})", "bold")] + [
        line(f"  {printable(x)}") for x in lines]


def summary(placement, layout=None, inv=None, script=None) -> Text:
    """:func:`summary_line` in rich."""
    return _tablefit().rich_line(summary_line(placement, layout, inv, script))


def summary_line(placement, layout=None, inv=None, script=None, framework=None) -> Line:
    """The header line. ``framework``: a non-Megatron framework's layout
    (:class:`slurmtopo.job.frameworks.common.FrameworkLayout`), shown in its own
    names (dp_shard, dp_replicate, ...) instead of the planner's Megatron
    layout."""
    parts = []
    if framework is not None:
        parts.append(describe(framework))
    elif layout is not None:
        lay = layout.resolved()
        dims = " × ".join(f"{d}{getattr(lay, d)}" for d in ("tp", "cp", "ep", "pp", "dp")
                          if getattr(lay, d) > 1) or "1 rank"
        parts.append(f"world {lay.world} = {dims} (order {lay.order}, {lay.convention})")
    parts.append(f"nodes {fold_hostlist(placement.hosts)}")
    if script is not None and getattr(script, "topology", None):
        parts.append("sbatch " + " ".join(script.topology))
    return line(printable("Plan: " + "; ".join(parts)), "bold")


def render_plan(placement, inv=None, layout=None, plan_cost=None, naive_cost=None, state=None,
                color_by: Optional[str] = None, notes: Sequence[str] = (), script=None,
                files: Optional[Mapping[str, str]] = None, bound=None,
                idle_bound=None) -> Group:
    """:func:`plan_parts` in rich."""
    return _tablefit().rich_parts(plan_parts(placement, inv, layout, plan_cost, naive_cost,
                                             state, color_by, notes, script, files, bound,
                                             idle_bound))


def plan_parts(placement, inv=None, layout=None, plan_cost=None, naive_cost=None, state=None,
               color_by: Optional[str] = None, notes: Sequence[str] = (), script=None,
               files: Optional[Mapping[str, str]] = None, bound=None,
               idle_bound=None, warnings: Sequence[str] = (), framework=None) -> List[Any]:
    """The whole preview, top to bottom, as lines and sheets: summary,
    grid, cost table, the step, the groups split over hosts, warnings
    (the cost model's, the bound's and ``warnings``, e.g. the memory
    check's) and notes, files written (``framework``: see
    :func:`summary_line`)."""
    parts: List[Any] = [summary_line(placement, layout, inv, script, framework),
                        grid_sheet(placement, inv, color_by, state)]
    if plan_cost is not None:
        parts.append(cost_sheet(plan_cost, naive_cost))
        whole = whole_step_sheet(plan_cost, naive_cost)
        if whole is not None:
            parts.append(whole)
        gain = step_gain_line(plan_cost, naive_cost)
        if gain is not None:
            parts.append(gain)
    parts.extend(split_lines(splits(placement, inv)))
    warn = list(getattr(plan_cost, "warnings", []) or []) + list(warnings)
    far = bound_warning(plan_cost, bound, idle_bound)
    if far is not None:
        warn.append(far)
    parts.extend(warning_lines(warn, list(placement.notes) + list(notes)))
    if files:
        dirs = {os.path.dirname(p) for p in files.values()}
        where = dirs.pop() if len(dirs) == 1 else None
        names = ", ".join(f"{os.path.basename(p) if where else p} ({what})"
                          for what, p in files.items())
        parts.append(Line((("Wrote ", "bold"), (printable(f"in {where}: " if where else ""), ""),
                           (printable(names), ""))))
    return parts


def report_dict(report) -> Optional[Dict[str, Any]]:
    """A CostReport as JSON data (for ``slurmtopo plan --json``)."""
    if report is None:
        return None
    kinds = {}
    for kind, gc in report.kinds.items():
        slow = getattr(gc, "slowest", None)
        kinds[kind] = {"count": gc.count, "size": gc.size, "collective": str(gc.collective),
                       "message_bytes": getattr(gc, "message_bytes", None),
                       "slowest": getattr(slow, "name", None) if slow is not None else None,
                       "slowest_label": _label(slow) if slow is not None else None,
                       "time_s": gc.time_s,
                       "worst_group": _plain(getattr(gc, "worst_group", None))}
    out = {"kinds": kinds, "step_time_s": report.step_time_s,
           "warnings": list(report.warnings)}
    step = getattr(report, "step", None)
    if step is not None:
        out["step"] = step_dict(step)
    return out


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (int, float, str)) or v is None:
        return v
    return str(v)


def advice_parts(advice) -> List[Any]:
    """``slurmtopo advise``'s output: the ranked layouts as a table, then
    each one's ready ``slurmtopo plan`` line, then the notes."""
    a = advice
    t = Sheet(title=f"Layouts for {a.gpus} GPUs ({a.gpu}, {a.gpu_memory_gib:.0f} GiB), best "
                    "first (modelled)",
              columns=[Column("#", justify="right"), Column("framework"), Column("layout"),
                       Column("mbs"), Column("recompute"), Column("optimizer"),
                       Column("step", justify="right"),
                       Column("tok/s/GPU", justify="right"), Column("MFU", justify="right"),
                       Column("GiB/GPU", justify="right"), Column("exposed comm")],
              compact=True)
    for i, r in enumerate(a.ranked):
        c = r.candidate
        comm = ", ".join(f"{k} {format_seconds(v)}" for k, v in r.exposed_comm if v > 0) or "-"
        t.add_row(*(line(x) for x in (
            str(i + 1), c.framework, c.label(), str(c.micro_batch), c.recompute,
            c.optimizer(), format_seconds(r.time_s),
            _tokens(r.tokens_per_s_per_gpu), f"{r.mfu:.1%}", f"{r.memory_gib:.1f}", comm)))
    t.caption = (f"{a.considered} layouts considered, {a.fitting} fit in memory, "
                 f"{a.placed} placed by the planner and priced")
    t.labels = ["#", "framework", "layout", "micro-batch", "recompute", "optimizer", "step",
                "tokens/s per GPU", "MFU", "memory per GPU (GiB)", "exposed communication"]
    out: List[Any] = [t, line("Ready to plan:", "bold")]
    for i, r in enumerate(a.ranked):
        out.append(line(f"  {i + 1}. {printable(r.plan)}", whole=True))
    out.extend(warning_lines([], a.notes))
    return out
