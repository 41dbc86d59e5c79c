"""The batch script as data: :class:`SbatchRequest` renders it (pure).

Script layout, and why:

1. ``#!/bin/bash`` then every ``#SBATCH`` directive: sbatch stops reading
   directives at the first command, so nothing else may come before them.
2. A comment block with the plan: layout, inventory, topology request and a
   per-rank table (rank, host, GPU, NICs, CPUs, group indices), so whoever
   reads the job script sees what was planned.
3. The start-time step: ``python3 -m slurmtopo bind --plan - --print-env``
   reading the plan from a quoted here-document (no expansion happens
   inside it, and every JSON line starts with a brace or a blank, so no
   line can end it), run from ``/`` so that Python imports nothing from the
   submit directory (others may write there), then ``eval``-ing env.sh's
   text from its stdout: no file is read again by path (docs/security.md).
4. One ``srun --distribution=arbitrary`` that starts every rank through the
   per-rank launcher with the user's command, every word ``shlex.quote``-d.

User text reaches the script in three places, each made inert: directives
(job name sanitised to a safe character set, other values checked against
their Slurm syntax, newlines rejected: a directive is one line), comments
(control characters escaped, so no text can start a new line) and the srun
command (shell-quoted words).
"""
from __future__ import annotations

import json
import math
import os
import re
import unicodedata
import shlex
from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

from slurmtopo import __version__
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.model import format_cpulist
from slurmtopo.inventory.topology import block_of, made_from, network_view
from slurmtopo.placement.segments import SlurmFeatures, block_layout, choose_segments, nvlink_kinds
from slurmtopo.placement.spares import spare_hosts_line
from slurmtopo.plan.hazards import HazardPolicy
from slurmtopo.plan.plandoc import TASK_NAME, TASK_SNIPPET
from slurmtopo.plan.planwrite import dumps_plan, guardrails_dict, plan_document
from slurmtopo.plan.rankmap import group_indices, nccl_topo_plan
from slurmtopo.plan.taskprobe import PROBE_SELF
from slurmtopo.sbatch.directives import DirectiveError, read_extras
from slurmtopo.sbatch.launch import Launch, render_words
from slurmtopo.sbatch.options import DEFAULT_SWITCH_WAIT, ScriptOptions
from slurmtopo.sbatch.slurm_options import known_anywhere

PLAN_DELIMITER = "SLURMTOPO_PLAN_JSON"
#: jobs up to this many ranks list every rank in the script's comment table;
#: bigger ones list the first COMMENT_HEAD and point at rankmap.csv (the
#: embedded plan always has all)
COMMENT_RANKS = 256
COMMENT_HEAD = 32
#: Slurm's default max_script_size (slurm.conf SchedulerParameters): sbatch
#: refuses a bigger script, so render() refuses first
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
#: an embedded inventory (packed) above this size is left out when the plan
#: names the inventory's path: nodes whose hardware all differs (no node
#: types) could otherwise push the script towards MAX_SCRIPT_BYTES, and the
#: copy is only a fallback for a batch host that cannot read the path
EMBED_INVENTORY_BYTES = 512 * 1024

_JOB_NAME_OK = re.compile(r"[A-Za-z0-9._+@%:,=-]")
_IDENT = re.compile(r"^[A-Za-z0-9._+@%:,=\[\]-]+$")
_TIME = re.compile(r"^(?:\d+(?:-\d+)?(?::\d+){0,2}|unlimited|infinite)$", re.I)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PATH = re.compile(r"^[^\s\"'\\]+$")
_MEM = re.compile(r"^\d+[KMGT]?$", re.I)

#: first-class sbatch options: name -> (syntax, example); values are checked
#: before they become an #SBATCH line
OPTION_SYNTAX = {
    "qos": (_IDENT, "high"),
    "constraint": (re.compile(r"^[A-Za-z0-9_.:+&|()\[\]*,-]+$"), "a100&ib"),
    "mem": (_MEM, "64G"),
    "mem-per-gpu": (_MEM, "80G"),
    "output": (_PATH, "logs/%x-%j.out"),
    "error": (_PATH, "logs/%x-%j.err"),
    "dependency": (re.compile(r"^[A-Za-z0-9_:+?,@\[\]-]+$"), "afterok:1234"),
    "mail-type": (re.compile(r"^[A-Za-z0-9_,]+$"), "END,FAIL"),
    "mail-user": (re.compile(r"^[A-Za-z0-9._%+@-]+$"), "me@example.org"),
    "signal": (re.compile(r"^(?:[RB]{1,2}:)?[A-Za-z0-9]+(?:@\d+)?$"), "B:USR1@120"),
    "reservation": (_IDENT, "maint"),
}

#: sbatch options the plan decides or the planner must see: an --sbatch
#: extra may not set them (long name -> what sets it instead). Extras are
#: read the way sbatch reads them (slurmtopo.sbatch.directives), so an
#: abbreviation (--nodel), a short letter (-w) or a bundle (-vN3) of one of
#: these is refused too.
PLANNED = {"nodes": "the plan", "ntasks": "the plan", "ntasks-per-node": "the plan",
           "ntasks-per-gpu": "the plan", "ntasks-per-tres": "the plan", "gpus": "the plan",
           "gpus-per-node": "--gpus-per-node", "gpus-per-task": "the plan",
           "gpus-per-socket": "the plan", "tres-per-task": "the plan", "gres": "the plan",
           "switches": "--topology-request", "segment": "--topology-request",
           "distribution": "the launch line", "nodelist": "--nodelist", "nodefile": "--nodelist",
           "exclude": "--exclude", "exclusive": "--exclusive", "partition": "--partition",
           "constraint": "--constraint"}
#: sbatch options slurmtopo does not plan, refused in extras and on the
#: command line alike (long name -> why)
NOT_PLANNED = {
    "array": "job arrays are not planned: every task of an array would start on the "
             "placement planned for one job; submit one `slurmtopo sbatch` per task "
             "(docs/sbatch.md, Job arrays)",
}
#: options that make sbatch print something and submit nothing: slurmtopo
#: runs sbatch and reads the job id it prints
NOT_SUBMITTING = ("help", "usage", "version", "test-only", "autocomplete")


def extras_problem(extras: Sequence[str]) -> Optional[str]:
    """Why these ``--sbatch`` extras may not be given (None: they may).

    They are read as sbatch reads ``#SBATCH`` lines, with the option table
    of every Slurm release slurmtopo knows: refused when any release would
    apply an option the plan sets, or would refuse the script."""
    extras = [str(e) for e in extras]
    for text in extras:
        if not text.lstrip().startswith("-"):
            return f"sbatch option {text!r} must start with '-'"
    try:
        found = read_extras(extras)
    except DirectiveError as exc:
        return f"--sbatch: {exc.message}"
    anywhere = known_anywhere()
    owner_of = {anywhere[name].val: (name, owner) for name, owner in PLANNED.items()}
    owner_of.update((anywhere[name].val, (name, None)) for name in NOT_SUBMITTING)
    owner_of.update((anywhere[name].val, (name, "")) for name in NOT_PLANNED)
    for version in sorted(found):
        for d in found[version]:
            if d.option is None or d.option.val not in owner_of:
                continue
            name, owner = owner_of[d.option.val]
            what = (d.written if d.written == "--" + name
                    else f"{d.written} (sbatch reads it as --{name})")
            head = f"--sbatch={extras[d.extra]}: {what}"
            if owner == "":
                return f"{head}: {NOT_PLANNED[name]}"
            if owner is None:
                return (f"{head} makes sbatch print and submit nothing; slurmtopo sbatch "
                        "submits the job and reads its id (run sbatch yourself for that)")
            if owner.startswith("the "):
                return (f"{head} is set by {owner} (the planner decides nodes, tasks and "
                        "GPUs); drop it")
            return (f"{head}: use {owner} instead (slurmtopo must see it: the planner or the "
                    "script acts on it)")
    return None


#: longest job name written (slurmctld sets no limit of its own; slurmdbd
#: stores 255 bytes, a tinytext): enough for any name a person gives, and a
#: bound on what goes into the script and every line that shows it
MAX_JOB_NAME = 1024


def sanitize_job_name(name: str) -> Tuple[str, Optional[str]]:
    """(safe name, note or None). A job name with a newline is an error (an
    #SBATCH line cannot hold one). Letters, digits and marks of any script
    (``λ-训练`` passes through) and ``._+@%:,=-`` are kept; anything else
    becomes ``_``, so blanks, quotes, ``#``, ``$()``, backticks and ``;``
    never reach sbatch's directive parser (which splits on blanks, pairs
    quotes and ends the line at ``#``)."""
    if len(name) > MAX_JOB_NAME:
        raise SlurmtopoError(f"job name of {len(name):,} characters ({name[:24]!r}...): at most "
                             f"{MAX_JOB_NAME:,} (Slurm's accounting keeps 255 bytes of it); "
                             "give a shorter --job-name")
    if "\n" in name or "\r" in name:
        raise SlurmtopoError(f"job name {name!r} contains a newline; an #SBATCH directive is "
                             "one line, give a one-line --job-name")
    clean = "".join(c if _job_name_char(c) else "_" for c in name)
    if not clean:
        raise SlurmtopoError("the job name is empty")
    if clean != name:
        return clean, (f"job name {name!r} written as {clean!r} (letters, digits and "
                       "._+@%:,=- kept)")
    return clean, None


def _job_name_char(c: str) -> bool:
    return bool(_JOB_NAME_OK.match(c)) or (
        ord(c) > 127 and unicodedata.category(c)[0] in "LNM")


def default_job_name(command: Sequence[str]) -> Optional[str]:
    """A job name from the command, as a user would pick it: ``python
    train.py`` -> ``train``, ``python -m pkg.train`` -> ``train``,
    ``torchrun ... pretrain.py`` -> ``pretrain``, ``./run.sh`` -> ``run``
    (None when nothing usable is left; sanitised later like any name)."""
    words = [str(w) for w in command]
    if not words:
        return None
    first = os.path.basename(words[0])
    if re.match(r"^(python[0-9.]*|torchrun|accelerate|deepspeed)$", first):
        rest = words[1:]
        for i, w in enumerate(rest):
            if w == "-c":  # inline code: keep the interpreter's name
                break
            if w == "-m" and i + 1 < len(rest):
                return rest[i + 1].rsplit(".", 1)[-1] or None
            if not w.startswith("-") and (w.endswith(".py") or first.startswith("python")):
                first = os.path.basename(w)
                break
    name = re.sub(r"\.(py|sh|bash)$", "", first)
    name = "".join(c if _JOB_NAME_OK.match(c) else "_" for c in name).strip("_")
    return name or None


def comment_text(text: str) -> str:
    """Text safe inside a ``#`` comment: control characters (newline above
    all, which would end the comment and start a command) are escaped."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], str(text))


def _check(value: Optional[str], what: str, pattern: re.Pattern, example: str) -> Optional[str]:
    if value is None:
        return None
    value = str(value)
    if not pattern.match(value):
        raise SlurmtopoError(f"{what} {value!r} is not valid (expected something like {example})")
    return value


def topology_request(inv, hosts: Sequence[str], mode: str = "auto",
                     wait: Optional[str] = DEFAULT_SWITCH_WAIT, placement=None, req=None,
                     slurm=None) -> Tuple[List[str], List[str]]:
    """The sbatch options asking Slurm for the planned topology, and comment
    lines saying why.

    tree (``topology/tree``): ``--switches=N@wait`` with N the number of
    leaf switches the plan spans: Slurm then waits up to ``wait`` for an
    allocation under that few leaves. block (``topology/block``, e.g. NVL72
    racks): ``--segment=S`` with S the largest size that splits the planned
    nodes of every block evenly, so each segment stays inside one block;
    with the ``placement`` (its groups) the segments are aligned to the
    job's NVLink groups and spread, consolidation and IMEX channels are
    chosen as :mod:`slurmtopo.placement.segments` says, as far as ``slurm``
    (a ``SlurmFeatures``) allows.
    ``auto`` uses blocks when the inventory describes them, else switches.
    """
    if mode not in ("auto", "tree", "block", "none"):
        raise SlurmtopoError(f"topology request must be auto, tree, block or none, got {mode!r}")
    if mode == "none" or not hosts:
        return [], ["topology request: none"]
    blocks = block_of(inv)
    if mode == "block" or (mode == "auto" and blocks and all(h in blocks for h in hosts)):
        if not all(h in blocks for h in hosts):
            return [], ["topology request: none (some planned nodes are in no block)"]
        # -- segments chosen from the job's groups (slurmtopo.placement.segments) --
        segs = _segment_request(inv, hosts, placement, req, slurm)
        if segs is not None:
            return segs
        counts: dict = {}
        for h in hosts:
            counts[blocks[h]] = counts.get(blocks[h], 0) + 1
        seg = 0
        for c in counts.values():
            seg = math.gcd(seg, c)
        where = ", ".join(f"{b}: {c}" for b, c in counts.items())
        if seg <= 1 and len(hosts) > 1:
            return [], [f"topology request: none (planned nodes per block {where} share no "
                        "segment size)"]
        return [f"--segment={seg}"], [f"topology request: --segment={seg} "
                                      f"(planned nodes per block: {where})"]
    made = made_from(inv.fabric)  # a 26.05 ring/torus3d: Slurm reads no --switches there
    if made is not None:
        return [], [f"topology request: none (topology/{made} gives each job a compact "
                    "arc or sub-cube itself)"]
    view = network_view(inv.fabric)
    if view.flat:
        return [], ["topology request: none (the inventory describes no switches)"]
    leaves: List[str] = []
    for h in hosts:
        leaf = view.leaf.get(h)
        if leaf is None:
            return [], [f"topology request: none ({h} is under no known leaf switch)"]
        if leaf not in leaves:
            leaves.append(leaf)
    if wait is not None:
        _check(wait, "switch wait", _TIME, "5:00 or 10 (minutes)")
    opt = f"--switches={len(leaves)}" + (f"@{wait}" if wait else "")
    return [opt], [f"topology request: {opt} (plan spans {len(leaves)} leaf switch"
                   f"{'es' if len(leaves) != 1 else ''}: {', '.join(leaves)})"]


def _segment_request(inv, hosts, placement, req, slurm) -> Optional[Tuple[List[str], List[str]]]:
    """The segment options for a plan with groups (None: no placement or
    block layout, the plain per-block rule applies)."""
    layout = block_layout(inv.fabric)
    if placement is None or layout is None or not all(h in layout.position for h in hosts):
        return None
    kinds = nvlink_kinds(getattr(req, "require", {}) or {}, getattr(req, "prefer", {}) or {})
    choice = choose_segments(layout, hosts, placement.groups,
                             [s.host for s in placement.slots], kinds,
                             slurm if slurm is not None else SlurmFeatures())
    return choice.options(), list(choice.why)


@dataclass(frozen=True)
class SbatchRequest:
    """Everything the batch script says. ``render()`` gives its text."""

    command: Tuple[str, ...]
    nodes: int
    ntasks: int
    ntasks_per_node: Optional[int] = None  # None when ranks per node differ
    gpus_per_node: Optional[str] = None  # "8" or "h100:8"
    gpus_per_task: Optional[int] = None  # when ranks per node differ
    job_name: Optional[str] = None
    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    nodelist: Optional[str] = None
    exclude: Optional[str] = None
    exclusive: bool = False
    topology: Tuple[str, ...] = ()  # e.g. ("--switches=2@5:00",)
    extra: Tuple[str, ...] = ()  # more sbatch options, one per directive
    #: first-class options (name in OPTION_SYNTAX, value), and --requeue
    options: Tuple[Tuple[str, str], ...] = ()
    requeue: bool = False
    plan_json: str = "{}"
    max_script_bytes: int = MAX_SCRIPT_BYTES
    comments: Tuple[str, ...] = ()  # plan summary, per-rank table (no '#')
    python: str = "python3"
    cgroup_devices: str = "auto"
    run_dir: Optional[str] = None
    launch: Launch = field(default_factory=Launch)
    #: restarts on spare nodes (``--spares``): ``--no-kill`` and the retry
    #: loop around the step; 0: neither (the script of earlier releases)
    spares: int = 0
    #: ``slurmtopo check`` as the first step ("warn" or "stop"); None: none
    check: Optional[str] = None
    #: the inventory the check reads (the plan's path)
    inventory_path: Optional[str] = None
    notes: Tuple[str, ...] = field(default=(), compare=False)  # for the user, not the script

    # ---- directives ----

    def directives(self) -> List[str]:
        """``--opt=value`` strings, validated; raises SlurmtopoError."""
        if self.nodes < 1 or self.ntasks < 1:
            raise SlurmtopoError("a job needs at least one node and one task")
        if not self.command:
            raise SlurmtopoError("no command to run: give it after --")
        out: List[str] = []
        if self.job_name is not None:
            name, _ = sanitize_job_name(self.job_name)
            out.append(f"--job-name={name}")
        out.append(f"--nodes={self.nodes}")
        if self.ntasks_per_node is not None:
            out.append(f"--ntasks-per-node={self.ntasks_per_node}")
        else:
            out.append(f"--ntasks={self.ntasks}")
        if self.gpus_per_node is not None:
            _check(self.gpus_per_node, "GPUs per node", re.compile(r"^(?:[A-Za-z0-9_.-]+:)?\d+$"),
                   "8 or h100:8")
            out.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.gpus_per_task is not None:
            out.append(f"--gpus-per-task={int(self.gpus_per_task)}")
        if self.exclusive:
            out.append("--exclusive")
        for opt in self.topology:
            out.append(opt)
        for key, value, example in (("partition", self.partition, "gpu"),
                                    ("account", self.account, "myproject"),
                                    ("nodelist", self.nodelist, "gpu[01-04]"),
                                    ("exclude", self.exclude, "gpu07")):
            if value is not None:
                out.append(f"--{key}={_check(value, key, _IDENT, example)}")
        if self.time is not None:
            out.append(f"--time={_check(self.time, 'time limit', _TIME, '1-00:00:00 or 90')}")
        seen = {k for k, _ in self.options}
        if {"mem", "mem-per-gpu"} <= seen:
            raise SlurmtopoError("give --mem or --mem-per-gpu, not both (Slurm refuses the pair)")
        for key, value in self.options:
            if key not in OPTION_SYNTAX:
                raise SlurmtopoError(f"unknown sbatch option --{key}")
            pattern, example = OPTION_SYNTAX[key]
            out.append(f"--{key}={_check(value, '--' + key, pattern, example)}")
        if self.requeue:
            out.append("--requeue")
        if self.spares:
            # a lost node must not end the job: its step fails, the script
            # re-plans onto a spare and starts a new one
            out.append("--no-kill")
        for opt in self.extra:
            if "\n" in str(opt) or "\r" in str(opt):
                raise SlurmtopoError(f"sbatch option {str(opt)!r} contains a newline; an "
                                     "#SBATCH directive is one line")
        why = extras_problem(self.extra)
        if why:
            raise SlurmtopoError(why)
        out += [str(opt) for opt in self.extra]
        return out

    # ---- the script ----

    def render(self) -> str:
        if self.cgroup_devices not in ("auto", "yes", "no"):
            raise SlurmtopoError("cgroup devices must be auto, yes or no")
        self.launch.check()
        if any(line.strip() == PLAN_DELIMITER for line in self.plan_json.splitlines()):
            raise SlurmtopoError("the plan text contains the here-document delimiter")
        q = shlex.quote
        lines = ["#!/bin/bash"]
        lines += [f"#SBATCH {d}" for d in self.directives()]
        lines.append("#")
        lines += [("# " + comment_text(c)).rstrip() for c in self.comments]
        if self.comments:
            lines.append("#")
        lines += [
            "# At start, `slurmtopo bind` (Python, this node only) reads the real allocation",
            "# (SLURM_JOB_NODELIST, `scontrol show job -d`, SLURM_JOB_GPUS), re-plans if Slurm",
            "# chose other nodes or GPUs, and writes SLURM_HOSTFILE, env.sh and every task's",
            "# environment into the run directory; srun then starts each task with /bin/sh",
            "# only (no Python on the nodes), which sets RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES,",
            "# ..., binds CPUs and execs the command. See docs/sbatch.md.",
            "# Overrides at submit time: SLURMTOPO_PYTHON, SLURMTOPO_RUN_DIR,",
            "# SLURMTOPO_CGROUP_DEVICES (auto|yes|no), SLURMTOPO_CPU_BIND=0.",
            "",
            "set -euo pipefail",
            "",
            f"SLURMTOPO_PYTHON=${{SLURMTOPO_PYTHON:-{q(self.python)}}}",
        ]
        if self.run_dir:
            lines.append(f"SLURMTOPO_RUN_DIR=${{SLURMTOPO_RUN_DIR:-{q(self.run_dir)}}}")
        else:
            lines.append("SLURMTOPO_RUN_DIR=${SLURMTOPO_RUN_DIR:-${SLURM_SUBMIT_DIR:-$PWD}"
                         "/.slurmtopo/runs/${SLURM_JOB_ID}}")
        lines += [
            f"SLURMTOPO_CGROUP_DEVICES=${{SLURMTOPO_CGROUP_DEVICES:-{self.cgroup_devices}}}",
            "",
            "# Others may write in the submit directory: `slurmtopo bind` runs from / so that",
            "# Python imports nothing from it (paths are made absolute first), and the",
            "# environment comes from its stdout, not from a file read again by path.",
            'case $SLURMTOPO_RUN_DIR in /*) ;; *) SLURMTOPO_RUN_DIR=$PWD/$SLURMTOPO_RUN_DIR ;; esac',
            'case $SLURMTOPO_PYTHON in /*) ;; */*) SLURMTOPO_PYTHON=$PWD/$SLURMTOPO_PYTHON ;; esac',
            "slurmtopo_bind() {",
            '    cd / && "$SLURMTOPO_PYTHON" -m slurmtopo bind --plan - --print-env '
            + ('"$@" ' if self.spares else "") + '\\',
            '        --run-dir "$SLURMTOPO_RUN_DIR" --cgroup-devices "$SLURMTOPO_CGROUP_DEVICES" \\',
            f"        <<'{PLAN_DELIMITER}'",
        ]
        lines += self.plan_json.rstrip("\n").splitlines()
        lines += [
            PLAN_DELIMITER,
            "}",
            "# SLURM_HOSTFILE, SLURMTOPO_NTASKS/NNODES, WORLD_SIZE, MASTER_ADDR/PORT, the NCCL",
            "# block and the task environment, all shell-quoted by slurmtopo bind",
            "SLURMTOPO_ENV=$(slurmtopo_bind)",
            'eval "$SLURMTOPO_ENV"',
            "unset SLURMTOPO_ENV",
            "",
        ]
        step = ['srun --distribution=arbitrary --ntasks="$SLURMTOPO_NTASKS" \\',
                "    --cpu-bind=none --kill-on-bad-exit=1 \\"]
        if self.launch.srun_options():
            step.append("    " + " ".join(q(o) for o in self.launch.srun_options()) + " \\")
        step += [
            f"    /bin/sh -c {q(TASK_SNIPPET)} {TASK_NAME} \\",
            "    " + render_words(self.launch.argv(self.command), self.launch),
        ]
        if self.check:
            lines += self.check_step()
        lines += restart_loop(step, self.spares) if self.spares else step
        text = "\n".join(lines) + "\n"
        size = len(text.encode())
        if size > self.max_script_bytes:
            raise SlurmtopoError(
                f"the batch script would be {size / 2**20:.1f} MiB, over Slurm's "
                f"max_script_size ({self.max_script_bytes / 2**20:.1f} MiB, the default unless "
                "slurm.conf's SchedulerParameters raise it), so sbatch would refuse it; the "
                f"plan of {self.ntasks} ranks on {self.nodes} nodes does not fit")
        return text

    def check_step(self) -> List[str]:
        """The job's first step with ``--check``: a probe started through
        the training step's launch line (srun, container, task snippet,
        apptainer) prints what every task gets; ``slurmtopo check`` reads
        it on stdin and compares it, with what Slurm gave, to the binding."""
        q = shlex.quote
        if self.check not in ("warn", "stop"):
            raise SlurmtopoError(f"--check {self.check!r}: warn or stop")
        probe = ["apptainer", "exec", "--nv", self.launch.apptainer] if self.launch.apptainer \
            else []
        probe += ["/bin/sh", "-c", PROBE_SELF]
        args = '--run-dir "$SLURMTOPO_RUN_DIR" --tasks -'
        if self.inventory_path:
            args += f" --inventory {q(os.path.abspath(self.inventory_path))}"
        if self.check == "stop":
            args += " --strict"
        lines = ["# --check: the first step prints what every task really gets, through the",
                 "# training step's own launch line; `slurmtopo check` compares it, and what",
                 "# Slurm gave the job, with the binding (docs/audit.md, Contracts)",
                 'srun --distribution=arbitrary --ntasks="$SLURMTOPO_NTASKS" \\',
                 "    --cpu-bind=none --kill-on-bad-exit=1 \\"]
        if self.launch.srun_options():
            lines.append("    " + " ".join(q(o) for o in self.launch.srun_options()) + " \\")
        lines += [f"    /bin/sh -c {q(TASK_SNIPPET)} {TASK_NAME} \\",
                  "    " + " ".join(q(w) for w in probe) + " \\",
                  f'    | (cd / && "$SLURMTOPO_PYTHON" -m slurmtopo check {args})'
                  + (" || exit $?" if self.check == "stop" else " || true"),
                  ""]
        return lines

    # ---- building one from a plan ----

    @classmethod
    def from_plan(cls, inv, placement, layout, command: Sequence[str], req=None,
                  script: Optional[ScriptOptions] = None, *, exclusive: Optional[bool] = None,
                  spares=None, **changes) -> "SbatchRequest":
        """The script for ``placement``, written as ``script`` says. Node and
        task counts come from the plan; ``req`` (a JobRequest) supplies
        gpus_per_node, exclusive, nodelist and exclude when given.
        ``spares`` (a placement.spares.SpareChoice, with ``script.spares``
        of them): nodes asked for besides the planned ones, idle until a
        planned node is lost.
        ``changes``: ScriptOptions fields to change (``job_name="x"``), a
        shorthand for ``dataclasses.replace(script, ...)``."""
        o = replace(script or ScriptOptions(), **changes)
        job_name, partition, time, account = o.job_name, o.partition, o.time, o.account
        topology, switch_wait, extra, options = o.topology, o.switch_wait, o.extra, o.options
        requeue, python, cgroup_devices = o.requeue, o.python, o.cgroup_devices
        inventory_path, master_port, socket_ifname = o.inventory_path, o.master_port, \
            o.socket_ifname
        run_dir, launch, slurm = o.run_dir, o.launch, o.slurm
        notes: List[str] = []
        if master_port is not None and (isinstance(master_port, bool) or
                                        not isinstance(master_port, int) or
                                        not 1 <= master_port <= 65535):
            raise SlurmtopoError(f"master port {master_port!r} is not a TCP port (1-65535)")
        if job_name is None:  # like sbatch's default (the script name), from the command
            job_name = default_job_name(command)
        else:
            _, note = sanitize_job_name(job_name)
            if note:
                notes.append(note)
        hosts = list(placement.hosts)
        by_host = placement.by_host()
        per_host = [len(by_host.get(h, ())) for h in hosts]
        uniform = len(set(per_host)) == 1
        spare_hosts = list(getattr(spares, "hosts", ()) or ())
        if len(spare_hosts) != o.spares:
            raise SlurmtopoError(f"--spares {o.spares}: {len(spare_hosts)} spare node(s) chosen")
        if spare_hosts and not uniform:
            raise SlurmtopoError("--spares needs the same number of ranks on every planned node")
        want_gpn = getattr(req, "gpus_per_node", None)
        gres_type = None
        if hosts and hosts[0] in inv.nodes:
            gres_type = inv.nodes[hosts[0]].hardware.gres_type
        if uniform:
            gpn = max(want_gpn or 0, per_host[0])
            gpus = f"{gres_type}:{gpn}" if gres_type else str(gpn)
            ntpn, gpt = per_host[0], None
        else:
            gpus, ntpn, gpt = None, None, 1
            notes.append("ranks per node differ (" + ", ".join(map(str, per_host)) + "): the "
                         "script asks for --ntasks with one GPU per task, and the start-time "
                         "step re-plans on what Slurm gives")
        # with spares the segments, switches or blocks asked for hold them too
        # (the plain per-block rule: they belong to no group yet)
        topo, topo_why = topology_request(inv, hosts + spare_hosts, topology,
                                          switch_wait or None,
                                          placement=None if spare_hosts else placement,
                                          req=req, slurm=slurm)
        if any(opt.startswith("--segment") for opt in topo):  # the preview says why
            notes.extend(w.strip() for w in topo_why)
        if exclusive is None:
            exclusive = bool(getattr(req, "exclusive", False))
        nodelist = getattr(req, "nodelist", None)
        exclude = getattr(req, "exclude", None)
        if isinstance(nodelist, (list, tuple)):
            nodelist = fold_hostlist(nodelist) if nodelist else None
        if isinstance(exclude, (list, tuple)):
            exclude = fold_hostlist(exclude) if exclude else None
        # a launcher in the command itself: adopted (torchrun) or refused
        launch = (launch or Launch()).for_command(command)
        launch.check()
        why = launch.requirement(placement)
        if why:
            raise SlurmtopoError(launch.refusal(why))

        guard = guardrails_dict(HazardPolicy.parse(o.hazards).items(), o.nccl_version, o.spares)
        doc = plan_document(inv, placement, layout, req, inventory_path, master_port,
                            socket_ifname, launch=launch.doc(), guardrails=guard)
        plan_json = dumps_plan(doc)
        embedded = len(json.dumps(doc["inventory"]))
        if inventory_path and embedded > EMBED_INVENTORY_BYTES:
            plan_json = dumps_plan(dict(doc, inventory=None))
            notes.append(f"the inventory is not embedded in the script (it would add "
                         f"{embedded / 2**20:.1f} MiB): the start-time step reads "
                         f"{os.path.abspath(inventory_path)}, which the job's first node "
                         "must be able to read")
        nccl_topo = nccl_topo_plan(inv, placement).note  # virtualised nodes: NCCL_TOPO_FILE
        extra_lines = [nccl_topo] if nccl_topo else []
        if spare_hosts:
            extra_lines.append(spare_hosts_line(spare_hosts, spares.scope, o.spares))
            notes.append(extra_lines[-1])
        comments = plan_comments(placement, layout, inventory_path,
                                 list(topo_why) + [launch.comment()] + extra_lines)
        return cls(command=tuple(str(c) for c in command), nodes=len(hosts) + len(spare_hosts),
                   ntasks=placement.world_size, ntasks_per_node=ntpn, gpus_per_node=gpus,
                   gpus_per_task=gpt, job_name=job_name, partition=partition, time=time,
                   account=account, nodelist=nodelist, exclude=exclude, exclusive=exclusive,
                   topology=tuple(topo), extra=tuple(extra), options=tuple(options),
                   requeue=requeue, plan_json=plan_json,
                   comments=tuple(comments), python=python, cgroup_devices=cgroup_devices,
                   run_dir=run_dir, launch=launch, spares=o.spares, check=o.check,
                   inventory_path=inventory_path if o.check else None, notes=tuple(notes))


def restart_loop(step: List[str], restarts: int) -> List[str]:
    """The step inside the retry loop of a job with spares: a step that
    fails because a node was lost is re-planned by ``slurmtopo bind
    --restart`` onto the nodes left and a spare, then started again, at
    most ``restarts`` times; any other failure ends the job with the
    step's exit code."""
    return [
        f"# --spares {restarts}: the step runs on the planned nodes, the spares stay idle. When it",
        "# fails because a node was lost (down, drained, its GPUs marked bad), `slurmtopo bind",
        "# --restart` re-plans onto the nodes left and a spare (every group still inside its",
        "# domain) and the step starts again: the program resumes from its checkpoint",
        "# (SLURMTOPO_RESTART counts the restarts). Any other failure ends the job.",
        "SLURMTOPO_RESTART=0",
        "export SLURMTOPO_RESTART",
        "while :; do",
        "    slurmtopo_rc=0",
        *["    " + line for line in step[:-1]],
        "    " + step[-1] + " || slurmtopo_rc=$?",
        '    if [ "$slurmtopo_rc" -eq 0 ]; then exit 0; fi',
        f'    if [ "$SLURMTOPO_RESTART" -ge {restarts} ]; then',
        '        echo "slurmtopo: the step failed (exit $slurmtopo_rc) and no restart is left" >&2',
        '        exit "$slurmtopo_rc"',
        "    fi",
        "    SLURMTOPO_RESTART=$((SLURMTOPO_RESTART + 1))",
        '    SLURMTOPO_ENV=$(slurmtopo_bind --restart "$SLURMTOPO_RESTART" --step-exit '
        '"$slurmtopo_rc") \\',
        '        || exit "$slurmtopo_rc"',
        '    eval "$SLURMTOPO_ENV"',
        "    unset SLURMTOPO_ENV",
        "done",
    ]


def extract_plan(script: str) -> Optional[str]:
    """The plan JSON a rendered script carries (None: not a slurmtopo script)."""
    head = f"<<'{PLAN_DELIMITER}'\n"
    if head not in script:
        return None
    body = script.split(head, 1)[1]
    end = body.find(f"\n{PLAN_DELIMITER}\n")
    return body[:end] if end >= 0 else None


def plan_comments(placement, layout, inventory_path: Optional[str],
                  topo_why: Sequence[str]) -> List[str]:
    """The human-readable plan: summary lines and the per-rank table."""
    lay = layout.resolved()
    dims = [d for d in ("tp", "cp", "ep", "pp", "dp") if getattr(lay, d) > 1]
    out = [f"Planned by slurmtopo {__version__} (`slurmtopo plan`); the JSON below is what "
           "the job binds with.",
           f"layout: world {lay.world} = " + " x ".join(f"{d} {getattr(lay, d)}"
                                                       for d in ("tp", "cp", "pp", "dp"))
           + (f", ep {lay.ep}" if lay.ep > 1 else "")
           + f" (order {lay.order}, {lay.convention})",
           f"nodes: {len(placement.hosts)} ({fold_hostlist(placement.hosts)}) in this order"]
    if inventory_path:
        out.append(f"inventory: {os.path.abspath(inventory_path)}")
    out += list(topo_why)
    for n in placement.notes:
        out.append(f"note: {n}")
    out.append("")
    idx = group_indices(placement, dims)
    rows = [["rank", "host", "gpu", "local", "nics", "cpus"] + dims]
    shown = placement.world_size if placement.world_size <= COMMENT_RANKS else COMMENT_HEAD
    for s in placement.slots[:shown]:
        rows.append([str(s.rank), s.host, str(s.gpu), str(s.local_rank), ",".join(s.nics) or "-",
                     format_cpulist(s.cpus) or "-"] + [str(idx[d][s.rank]) for d in dims])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    left = {1, 4, 5}
    for r in rows:
        out.append("  ".join(c.ljust(w) if i in left else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    if shown < placement.world_size:
        rest = placement.slots[shown:]
        hosts = len(dict.fromkeys(s.host for s in rest))
        out.append(f"... {len(rest)} more ranks on {hosts} node(s): every rank is in "
                   "rankmap.csv beside this script (`slurmtopo plan --output-dir`) and, once "
                   "the job starts, in $SLURMTOPO_RUN_DIR/rankmap.csv")
    if dims:
        out.append("(" + ", ".join(f"{d}: index of the rank's {d} group" for d in dims) + ")")
    return out
