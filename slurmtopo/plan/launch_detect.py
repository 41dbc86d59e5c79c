"""A launcher the user put in the job's command, found and either adopted or
refused before anything is written.

``slurmtopo sbatch ... -- torchrun --nnodes 2 --nproc-per-node 8 train.py``
was written as a script that ran the whole torchrun in each of the 16
srun tasks (16 torchruns of 16 ranks), and ``--launcher torchrun`` nested
torchrun inside torchrun. A program that starts ranks itself cannot be
started once per rank, so the command's head is read here:

* **torchrun** (``torchrun``, ``python -m torch.distributed.run``,
  ``python -m torch.distributed.launch``) is *adopted*: slurmtopo's
  torchrun launcher runs the user's program once per node with the
  plan's ``--nnodes``, ``--nproc-per-node``, ``--node-rank`` and a static
  rendezvous on the first host. The user's ``--nnodes``/``--nproc-per-node``
  are checked against the plan (they become the request's GPUs per node
  and world size); the rendezvous and node-rank options are taken over;
  every other option (``--max-restarts``, ``--log-dir``, ``-m`` ...) is
  kept as written. Refused only under an explicit ``--launcher srun``.
* **deepspeed** and **accelerate launch** are
  *refused* with the exact command to use instead: srun starts every rank
  and DeepSpeed and Accelerate read ``RANK``, ``LOCAL_RANK``,
  ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the environment
  the tasks get.

Interface (pure; no torch import; other modules use these three):

* :func:`detect` -- the launcher at the head of a command, or None.
* :func:`resolve` -- what to do with it for a ``--launcher`` choice: an
  :class:`Adoption` (torchrun), None (nothing to do), or
  :class:`LauncherRefusal` raised.
* :meth:`Adoption.requirement` -- whether a placement matches the
  command's ``--nnodes``/``--nproc-per-node`` (the launcher's admit).

The option tables are those of the launchers' own parsers: torchrun's
``torch.distributed.run.get_args_parser`` (tests/test_launch_detect.py
holds the table to the installed torch's), DeepSpeed's
``deepspeed/launcher/runner.py`` ``parse_args`` and Accelerate's
``src/accelerate/commands/launch.py`` ``launch_command_parser``.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError

_PYTHON = re.compile(r"^python[0-9.]*$")

#: torchrun's options that take no value (torch.distributed.run; ``--use-env``
#: is torch.distributed.launch's)
TORCHRUN_FLAGS = frozenset({"--standalone", "-m", "--module", "--no-python", "--run-path",
                            "--virtual-local-rank", "--use-env"})
#: torchrun's options that take one value
TORCHRUN_VALUED = frozenset({
    "--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id",
    "--rdzv-conf", "--max-restarts", "--monitor-interval", "--start-method",
    "--event-log-handler", "--role", "--log-dir", "-r", "--redirects", "-t", "--tee",
    "--log-line-prefix-template", "--local-ranks-filter", "--duplicate-stdout-filters",
    "--duplicate-stderr-filters", "--node-rank", "--master-addr", "--master-port",
    "--local-addr", "--logs-specs", "--numa-binding", "--signals-to-handle",
    "--shutdown-timeout"})
#: what slurmtopo sets itself (from the plan): the user's are taken over
TORCHRUN_TAKEN = frozenset({"--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint",
                            "--rdzv-id", "--rdzv-conf", "--standalone", "--node-rank",
                            "--master-addr", "--master-port"})

#: DeepSpeed's runner: options without a value (the rest take one)
DEEPSPEED_FLAGS = frozenset({"--module", "--no_python", "--no_local_rank", "--no_ssh",
                             "--no_ssh_check", "--force_multi", "--save_pid",
                             "--elastic_training", "--bind_cores_to_rank"})
DEEPSPEED_VALUED = frozenset({
    "-H", "--hostfile", "-i", "--include", "-e", "--exclude", "--num_nodes",
    "--min_elastic_nodes", "--max_elastic_nodes", "--num_gpus", "--num_accelerators",
    "--master_port", "--master_addr", "--node_rank", "--launcher", "--launcher_args",
    "--enable_each_rank_log", "--autotuning", "--comment", "--account", "--bind_core_list",
    "--ssh_port"})

#: ``accelerate launch``: options without a value (hyphens read as
#: underscores, as Accelerate reads them; every other option takes one)
ACCELERATE_FLAGS = frozenset({
    "-q", "--quiet", "--cpu", "--multi_gpu", "--tpu", "--ipex", "--enable_cpu_affinity",
    "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--use_deepspeed", "--use_fsdp",
    "--use_megatron_lm", "--use_xpu", "--same_network", "-m", "--module", "--no_python",
    "--tpu_cluster", "--no_tpu_cluster", "--tpu_use_sudo", "--downcast_bf16",
    "--fp8_use_autocast_during_eval", "--debug"})
#: what the plan decides for an ``accelerate launch`` (not the user's settings)
ACCELERATE_PLAN = frozenset({"--multi_gpu", "--num_processes", "--num_machines",
                             "--machine_rank", "--main_process_ip", "--main_process_port",
                             "--same_network", "--gpu_ids", "--rdzv_backend", "--rdzv_conf"})

#: shell syntax in a ``--wrap`` line: its words are not a command to rewrite
_SHELL_SYNTAX = re.compile(r"[;&|<>$`(){}*?~\\\n]")

#: the torch.distributed modules that are torchrun
TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")

#: the command's words that never hold a launcher's options: a cap on how
#: far the reader looks, so a huge command costs nothing
MAX_WORDS = 4096


@dataclass(frozen=True)
class Option:
    """One option of a launcher as written: its canonical name (torchrun's
    hyphenated spelling; DeepSpeed's and Accelerate's underscored), its
    value (None for a flag) and the words it took."""

    name: str
    value: Optional[str]
    words: Tuple[str, ...]


@dataclass(frozen=True)
class UserLauncher:
    """A launcher at the head of a job's command."""

    #: "torchrun", "deepspeed" or "accelerate"
    family: str
    #: the words that start it: ("torchrun",), ("python3", "-m",
    #: "torch.distributed.run"), ("accelerate", "launch")
    program: Tuple[str, ...]
    #: its own options, in order
    options: Tuple[Option, ...]
    #: what it starts: the training script (or module, or program) and its
    #: arguments, as the launcher reads them
    script: Tuple[str, ...]
    #: words before the launcher (``env A=B``), or ("/bin/sh", "-c") when it
    #: is the first word of a ``--wrap`` line
    prefix: Tuple[str, ...] = ()

    def value(self, *names: str) -> Optional[str]:
        """The last value given to any of ``names`` (as the launchers'
        argparse keeps the last), or None."""
        found = None
        for o in self.options:
            if o.name in names:
                found = o.value if o.value is not None else ""
        return found

    def has(self, *names: str) -> bool:
        return any(o.name in names for o in self.options)

    @property
    def text(self) -> str:
        """The launcher as the user wrote it, for messages."""
        return shlex.join(self.program)

    def plain_command(self) -> Tuple[str, ...]:
        """The training command without the launcher, as srun starts it on
        every rank: ``python3 SCRIPT ARGS``, ``python3 -m MOD ARGS``, or the
        program itself when the launcher was told not to use Python."""
        if not self.script:
            return ()
        if self.has("--no-python", "--no_python"):
            return self.script
        if self.has("-m", "--module"):
            return ("python3", "-m", *self.script)
        return ("python3", *self.script)


class LauncherRefusal(SlurmtopoError):
    """A command whose launcher slurmtopo cannot start as asked, with the
    command line that does the job: :meth:`render_with` rewrites the user's
    own ``slurmtopo`` arguments (dropping ``drop``, adding ``add``, the
    words after ``--`` replaced by ``command``)."""

    def __init__(self, reason: str, command: Sequence[str], drop: Sequence[str] = (),
                 add: Sequence[str] = ()):
        self.reason = reason
        self.command = tuple(command)
        self.drop = tuple(drop)
        self.add = tuple(add)
        super().__init__(f"{reason}: {self._suggest(None)}")

    def _suggest(self, argv: Optional[Sequence[str]]) -> str:
        if argv is None:
            return "`slurmtopo ... " + shlex.join([*self.add, "--", *self.command]) + "`"
        return "`" + shlex.join(["slurmtopo", *suggested_argv(argv, self.drop, self.add,
                                                             self.command)]) + "`"

    def render_with(self, argv: Sequence[str]) -> str:
        """The one-line error with the whole command line to use instead,
        made from ``argv`` (the arguments the user gave slurmtopo)."""
        return " ".join(f"{self.reason}: use {self._suggest(argv)}".split())

    def render(self) -> str:
        return " ".join(f"{self.reason}: use {self._suggest(None)}".split())


#: slurmtopo's options that take a value (for rewriting a command line)
_VALUED_OWN = ("--launcher", "--torchrun", "--wrap", "--gpus-per-node")


def suggested_argv(argv: Sequence[str], drop: Sequence[str], add: Sequence[str],
                   command: Sequence[str]) -> List[str]:
    """``argv`` (``sbatch --inventory x ... -- torchrun ...``) with the
    options ``drop`` removed (``--launcher srun``, ``--launcher=srun``),
    ``add`` appended to slurmtopo's own options, and the words after
    ``--`` replaced by ``command``."""
    words = [str(w) for w in argv]
    cut = words.index("--") if "--" in words else len(words)
    head, out, i = words[:cut], [], 0
    while i < len(head):
        w = head[i]
        name = w.split("=", 1)[0]
        if name in drop:
            i += 1 if "=" in w or name not in _VALUED_OWN else 2
            continue
        out.append(w)
        i += 1
    return out + list(add) + ["--", *command]


def _canonical(word: str, family: str, names: FrozenSet[str]) -> str:
    """The option's canonical name: torchrun reads ``--nproc_per_node`` as
    ``--nproc-per-node`` (and takes an unambiguous prefix, argparse's
    abbreviation); DeepSpeed and Accelerate spell with underscores."""
    if family == "torchrun":
        name = word.replace("_", "-") if word.startswith("--") else word
        if name not in names and name.startswith("--"):
            matches = {n for n in names if n.startswith(name)}
            if len(matches) == 1:
                return matches.pop()
        return name
    if family == "accelerate" and word.startswith("--"):
        return "--" + word[2:].replace("-", "_")
    return word


def _read_options(words: Sequence[str], family: str, flags: FrozenSet[str],
                  valued: FrozenSet[str]) -> Tuple[Tuple[Option, ...], Tuple[str, ...]]:
    """(options, the rest) of a launcher's words, as its argparse reads
    them: options until the first word that is not one (the script). An
    option the table does not know takes a value when written
    ``--name=value`` and none otherwise (the words are kept as written, so
    the launcher reads them its own way either way)."""
    options: List[Option] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            i += 1
            break
        if not w.startswith("-") or w == "-":
            break
        name, eq, value = w.partition("=")
        if not name.startswith("--") and len(name) > 2 and not eq:  # -r3, -mpkg
            short = _canonical(name[:2], family, flags | valued)
            if short in valued:
                options.append(Option(short, name[2:], (w,)))
                i += 1
                continue
        canon = _canonical(name, family, flags | valued)
        if eq:
            options.append(Option(canon, value, (w,)))
            i += 1
        elif canon in flags or canon not in valued:
            options.append(Option(canon, None, (w,)))
            i += 1
        else:
            taken = words[i + 1] if i + 1 < len(words) else ""
            options.append(Option(canon, taken, tuple(words[i:i + 2])))
            i += 2
    return tuple(options), tuple(words[i:])


def _torch_module(words: Sequence[str]) -> Optional[int]:
    """For ``python [flags] -m torch.distributed.run ...``: the index of the
    first word after the module, else None."""
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-m", "-c"):
        if words[i].startswith("-m"):  # -mtorch.distributed.run
            return i + 1 if words[i][2:] in TORCH_MODULES else None
        if words[i] in ("-X", "-W"):  # interpreter options with a value
            i += 1
        i += 1
    if i + 1 < len(words) and words[i] == "-m" and words[i + 1] in TORCH_MODULES:
        return i + 2
    return None


def detect(command: Sequence[str]) -> Optional[UserLauncher]:
    """The launcher at the head of ``command`` (after an ``env A=B`` prefix,
    or as the first word of a ``/bin/sh -c LINE`` such as ``--wrap``
    makes), or None when the command starts the training program itself."""
    words = [str(w) for w in list(command)[:MAX_WORDS]]
    prefix: Tuple[str, ...] = ()
    if len(words) >= 3 and os.path.basename(words[0]) in ("sh", "bash", "dash") \
            and words[1] == "-c":
        try:
            inner = shlex.split(words[2])
        except ValueError:
            inner = words[2].split()
        found = detect(inner[:MAX_WORDS])
        if found is None:
            return None
        return UserLauncher(found.family, found.program, found.options, found.script,
                            tuple(words[:2]))
    if words and os.path.basename(words[0]) == "env":
        i = 1
        while i < len(words) and ("=" in words[i] and not words[i].startswith("-")
                                  or words[i] in ("-i", "-")):
            i += 1
        if i > 1:
            found = detect(words[i:])
            if found is not None:
                return UserLauncher(found.family, found.program, found.options, found.script,
                                    tuple(words[:i]))
        return None
    if not words:
        return None
    head = os.path.basename(words[0])
    if head == "torchrun":
        opts, rest = _read_options(words[1:], "torchrun", TORCHRUN_FLAGS, TORCHRUN_VALUED)
        return UserLauncher("torchrun", tuple(words[:1]), opts, rest)
    if _PYTHON.match(head):
        at = _torch_module(words)
        if at is not None:
            opts, rest = _read_options(words[at:], "torchrun", TORCHRUN_FLAGS, TORCHRUN_VALUED)
            return UserLauncher("torchrun", tuple(words[:at]), opts, rest)
        return None
    if head == "deepspeed":
        opts, rest = _read_options(words[1:], "deepspeed", DEEPSPEED_FLAGS, DEEPSPEED_VALUED)
        return UserLauncher("deepspeed", tuple(words[:1]), opts, rest)
    if head == "accelerate" and len(words) > 1 and words[1] == "launch":
        opts, rest = _accelerate_values(words[2:])
        return UserLauncher("accelerate", tuple(words[:2]), opts, rest)
    return None


def _accelerate_values(words: Sequence[str]) -> Tuple[Tuple[Option, ...], Tuple[str, ...]]:
    """``accelerate launch``'s options: every one takes a value but its
    flags (:data:`ACCELERATE_FLAGS`)."""
    options: List[Option] = []
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-") or w == "-":
            break
        name, eq, value = w.partition("=")
        canon = _canonical(name, "accelerate", ACCELERATE_FLAGS)
        if eq or canon in ACCELERATE_FLAGS:
            options.append(Option(canon, value if eq else None, (w,)))
            i += 1
        else:
            options.append(Option(canon, words[i + 1] if i + 1 < len(words) else "",
                                  tuple(words[i:i + 2])))
            i += 2
    return tuple(options), tuple(words[i:])


@dataclass(frozen=True)
class Adoption:
    """The command's own torchrun, started by slurmtopo's torchrun launcher
    once per node."""

    #: the words that start it (``torchrun``, ``python3 -m
    #: torch.distributed.run``): the launcher's program
    program: Tuple[str, ...]
    #: what follows slurmtopo's options on its line: the user's other
    #: options as written, then the script and its arguments
    tail: Tuple[str, ...]
    #: the user's options slurmtopo set itself, as written (for the note)
    taken: Tuple[str, ...] = ()
    #: ``--nnodes``: (least, most) nodes, or None when not given
    nnodes: Optional[Tuple[int, int]] = None
    #: ``--nproc-per-node`` as a number, or None (not given, ``gpu``, ``auto``)
    nproc_per_node: Optional[int] = None
    notes: Tuple[str, ...] = field(default=(), compare=False)

    @property
    def world(self) -> Optional[int]:
        """The ranks the command starts (--nnodes N x --nproc-per-node K),
        None when it does not fix them."""
        if self.nnodes is None or self.nnodes[0] != self.nnodes[1] \
                or self.nproc_per_node is None:
            return None
        return self.nnodes[0] * self.nproc_per_node

    def gpus_per_node(self, world: Optional[int]) -> Optional[int]:
        """The ranks every node gets as the command asks: --nproc-per-node,
        else ``world`` over a fixed --nnodes (None: the plan decides)."""
        if self.nproc_per_node is not None:
            return self.nproc_per_node
        if world and self.nnodes is not None and self.nnodes[0] == self.nnodes[1] \
                and world % self.nnodes[0] == 0:
            return world // self.nnodes[0]
        return None

    def requirement(self, placement) -> Optional[str]:
        """None when ``placement`` has the node count and ranks per node the
        command's torchrun asks for, else why not."""
        hosts = list(placement.hosts)
        if self.nnodes is not None and not self.nnodes[0] <= len(hosts) <= self.nnodes[1]:
            want = (str(self.nnodes[0]) if self.nnodes[0] == self.nnodes[1]
                    else "%d:%d" % self.nnodes)
            return (f"the command's torchrun asks for --nnodes {want}, the plan has "
                    f"{len(hosts)} node(s)")
        if self.nproc_per_node is not None:
            by_host = placement.by_host()
            odd = [h for h in hosts if len(by_host.get(h, ())) != self.nproc_per_node]
            if odd:
                return (f"the command's torchrun asks for --nproc-per-node "
                        f"{self.nproc_per_node}, the plan gives {odd[0]} "
                        f"{len(by_host.get(odd[0], ()))} rank(s)")
        return None

    def describe(self) -> str:
        """The script comment's words for it."""
        checked = [w for w, v in (("--nnodes", self.nnodes),
                                  ("--nproc-per-node", self.nproc_per_node)) if v is not None]
        return ("the command's own " + shlex.join(self.program)
                + (f", its {' and '.join(checked)} checked against the plan" if checked else ""))


def _count(text: Optional[str], what: str, launcher: UserLauncher) -> Optional[int]:
    if text is None:
        return None
    if not text.isdigit() or not 0 < int(text) <= 1 << 20:
        raise SlurmtopoError(f"{launcher.text} {what} {text!r}: give a whole number of at "
                             "least 1")
    return int(text)


def _nnodes(text: Optional[str], launcher: UserLauncher) -> Optional[Tuple[int, int]]:
    if text is None:
        return None
    lo, colon, hi = text.partition(":")
    least = _count(lo, "--nnodes", launcher)
    most = _count(hi, "--nnodes", launcher) if colon else least
    assert least is not None and most is not None
    if most < least:
        raise SlurmtopoError(f"{launcher.text} --nnodes {text!r}: the most nodes is below the "
                             "least")
    return least, most


def _adopt(found: UserLauncher) -> Adoption:
    nproc_text = found.value("--nproc-per-node")
    if nproc_text in ("gpu", "auto"):
        nproc_text = None
    elif nproc_text is not None and not nproc_text.isdigit():
        raise SlurmtopoError(f"{found.text} --nproc-per-node {nproc_text!r}: slurmtopo plans "
                             "one rank per GPU; give the number of GPUs per node, or gpu")
    taken = [w for o in found.options if o.name in TORCHRUN_TAKEN for w in o.words]
    kept = [w for o in found.options if o.name not in TORCHRUN_TAKEN for w in o.words]
    nnodes = _nnodes(found.value("--nnodes"), found)
    given = [w for o in found.options if o.name in TORCHRUN_TAKEN
             and o.name not in ("--nnodes", "--nproc-per-node") for w in o.words]
    notes = [f"the command starts {found.text}: slurmtopo runs it once per node with "
             "--nnodes, --nproc-per-node, --node-rank and a static rendezvous on the first "
             "host from the plan (--launcher torchrun)"
             + (f"; it replaced {shlex.join(given)}" if given else "")]
    return Adoption(program=found.program, tail=tuple(kept) + found.script, taken=tuple(taken),
                    nnodes=nnodes, nproc_per_node=_count(nproc_text, "--nproc-per-node", found),
                    notes=tuple(notes))


def resolve(command: Sequence[str], launcher: Optional[str] = None,
            program: Optional[str] = None) -> Optional[Adoption]:
    """What to do with the launcher at the head of ``command`` when the
    user chose ``launcher`` (None: none chose, the default applies) and
    ``--torchrun`` ``program`` (None: not given).

    Returns the :class:`Adoption` of a torchrun (the job then uses the
    torchrun launcher), or None when the command starts no launcher.
    Raises :class:`LauncherRefusal` with the command to use for a launcher
    slurmtopo cannot start as asked."""
    found = detect(command)
    if found is None:
        return None
    per_rank = launcher in (None, "srun")
    if found.prefix[:1] and os.path.basename(found.prefix[0]) in ("sh", "bash", "dash"):
        inner = (*found.program, *[w for o in found.options for w in o.words], *found.script)
        if _SHELL_SYNTAX.search(" ".join(inner)):
            raise SlurmtopoError(
                f"the command line starts {found.text}, and "
                f"{'srun' if per_rank else launcher} runs the line once per "
                f"{'rank' if per_rank else 'node'}: give the launcher's command after -- "
                "instead of --wrap (slurmtopo then starts it once per node), or start the "
                "training script itself in the line")
        raise LauncherRefusal(
            f"the command line starts {found.text}, and {'srun' if per_rank else launcher} "
            f"runs the line once per {'rank' if per_rank else 'node'}: give the command "
            "after -- instead, so that slurmtopo starts the launcher itself",
            inner, drop=("--wrap",))
    if found.prefix:
        raise LauncherRefusal(
            f"the command starts {found.text} behind {found.prefix[0]}: slurmtopo starts a "
            "launcher only as the command's first word; export the variables "
            f"({' '.join(w for w in found.prefix[1:] if '=' in w) or 'none'}) before "
            "submitting (the job inherits the environment)",
            (*found.program, *[w for o in found.options for w in o.words], *found.script))
    if found.family == "torchrun":
        if not found.script:
            raise SlurmtopoError(f"the command's {found.text} names no training script")
        if launcher == "srun":
            raise LauncherRefusal(
                f"--launcher srun starts the command once per rank, and it starts "
                f"{found.text}, which starts ranks itself (a whole torchrun on every rank): "
                "drop --launcher srun, and slurmtopo starts it once per node with the plan's "
                "--nnodes, --nproc-per-node and rendezvous", command, drop=("--launcher",))
        if program is not None and tuple(shlex.split(program)) != found.program:
            raise LauncherRefusal(
                f"--torchrun {program!r} and the command's own {found.text} both name the "
                "program that starts the ranks (torchrun inside torchrun): give it once, in "
                "the command", command, drop=("--torchrun",))
        if launcher not in (None, "torchrun"):  # pragma: no cover - a future launcher
            raise LauncherRefusal(f"--launcher {launcher} cannot start {found.text}",
                                  command, drop=("--launcher",))
        return _adopt(found)
    plain = found.plain_command()
    if found.family == "deepspeed":
        add: List[str] = []
        gpus = found.value("--num_gpus", "--num_accelerators")
        if gpus and gpus.isdigit() and int(gpus) > 0:
            add = ["--gpus-per-node", gpus]
        raise LauncherRefusal(
            f"{found.text} starts the ranks itself (over ssh) and would start "
            f"{'once per rank' if per_rank else 'inside ' + str(launcher)}: let slurmtopo's "
            "srun start every rank instead (DeepSpeed reads RANK, LOCAL_RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT from the environment each rank gets)",
            plain, drop=("--launcher", "--torchrun", "--gpus-per-node") if add
            else ("--launcher", "--torchrun"), add=add)
    if found.family == "accelerate":
        own = [w for o in found.options
               if o.name not in ACCELERATE_PLAN | {"-m", "--module", "--no_python"}
               for w in o.words]
        carry = (f"; its own settings ({shlex.join(own)}) go to Accelerator(...) in the "
                 "script" if own else "")
        raise LauncherRefusal(
            f"{found.text} starts the ranks itself (through torchrun) and would start "
            f"{'once per rank' if per_rank else 'inside ' + str(launcher)}: let slurmtopo's "
            "srun start every rank instead (Accelerate reads RANK, LOCAL_RANK, WORLD_SIZE, "
            f"MASTER_ADDR and MASTER_PORT from the environment each rank gets){carry}",
            plain, drop=("--launcher", "--torchrun"))
    raise AssertionError(found.family)  # pragma: no cover - detect() knows no other


def world_of(command: Sequence[str]) -> Optional[int]:
    """The world size a torchrun command fixes (``--nnodes N
    --nproc-per-node K`` -> N*K), or None."""
    found = detect(command)
    if found is None or found.family != "torchrun" or found.prefix:
        return None
    try:
        return _adopt(found).world
    except SlurmtopoError:
        return None
