"""The launchers: how the processes of a job start on its nodes, one object
each in a small registry (:func:`get`, :func:`names`).

A launcher is everything that differs between ``srun`` starting every
rank itself and a program such as ``torchrun`` starting the ranks of one
node: how many tasks srun starts (:meth:`Launcher.tasks`), the hostfile
lines that place them (:meth:`Launcher.hostfile_hosts`), the words that
follow the task snippet on the batch script's srun line
(:meth:`Launcher.argv`), the POSIX sh that ends every task
(:attr:`Launcher.task_tail`, run after ``slurmtopo bind``'s tables set the
task's variables), and what it requires of a plan
(:meth:`Launcher.requirement`: None, or why it cannot start it). The
planner's choice between proposals, the script renderer and the
start-time step all ask the object, never compare names, so adding a
launcher (mpirun, a framework's own) is one more class here and one
:func:`register` call.

Pure: text and placements in, text out (the per-task shell text only
assigns, tests and execs; every user word is quoted by the renderer).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError

if TYPE_CHECKING:  # (the command line imports this module: keep it light)
    from slurmtopo.inventory.model import Placement

#: the torchrun argument the task text rewrites to ``--node-rank=<this node>``
#: (the node rank is only known on the node)
NODE_RANK_WORD = "--node-rank=SLURMTOPO_NODE_RANK"

_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True)
class Launcher:
    """One way of starting a job's ranks (see the module docstring)."""

    #: the ``--launcher`` value and the plan document's ``launch.launcher``
    name: str
    #: one srun task per node (the launcher starts the node's ranks) rather
    #: than one per rank
    per_node: bool
    #: the script comment's words for it ("one task per rank")
    summary: str
    #: ``--launcher`` help sentence
    help: str
    #: the program it runs on the compute nodes, as words (``--torchrun``);
    #: empty: none (srun execs the command itself)
    default_program: Tuple[str, ...] = ()

    def tasks(self, placement: Placement) -> int:
        """How many tasks the srun line starts."""
        return len(placement.hosts) if self.per_node else placement.world_size

    def hostfile_hosts(self, placement: Placement) -> List[str]:
        """``SLURM_HOSTFILE``'s lines: task ``i`` runs on line ``i``."""
        if self.per_node:
            return list(dict.fromkeys(s.host for s in placement.slots))
        return [s.host for s in placement.slots]

    def requirement(self, placement: Placement) -> Optional[str]:
        """None when this launcher can start ``placement`` as planned, else
        why not (one sentence, for the planner's choice and the error)."""
        return None

    def argv(self, program: Sequence[str], command: Sequence[str],
             tail: Optional[Sequence[str]] = None) -> List[str]:
        """The words after the task snippet (and a container wrapper):
        ``program`` is the launcher's own command (``--torchrun``);
        ``tail``: what follows the launcher's own options when the command
        started the launcher itself (slurmtopo.plan.launch_detect: the user's
        other options, the script and its arguments, kept as written)."""
        return [str(c) for c in command]

    #: words of :meth:`argv` that reference the task shell's variables:
    #: fixed text the renderer leaves unquoted so that they expand
    var_words: FrozenSet[str] = frozenset()

    #: the POSIX sh that ends every task, after ``slurmtopo bind``'s tables
    #: set its variables (see slurmtopo.binding.taskenv, whose head defines
    #: ``_st_die MESSAGE``: the task's one-line error naming rank and node,
    #: exit 2); it execs "$@"
    task_tail: str = ""

    #: the "CPU binding:" line of the start-time log when the launcher
    #: binds nothing itself (None: the tasks bind with taskset)
    cpu_binding: Optional[str] = None

    #: what a user can do when :meth:`requirement` refuses every placement
    remedy: str = ""

    def refusal(self, why: str) -> str:
        """The one-line error for a plan this launcher cannot start."""
        return (f"--launcher {self.name} cannot start this plan: {why}"
                + (f" ({self.remedy})" if self.remedy else ""))


class Srun(Launcher):
    """srun starts every rank: one task per rank, placed by the hostfile."""


class Torchrun(Launcher):
    """One torchrun per node (``--nnodes N --nproc-per-node K --node-rank
    R``, static rendezvous on the first host): torchrun's rank ``R * K +
    LOCAL_RANK`` is the planned rank only for a node-contiguous plan."""

    def requirement(self, placement: Placement) -> Optional[str]:
        # lazy: `hooks task-prolog` (every task) loads this module, not the rank map
        #   (csv, job.groups, inventory.topology: 3.3 ms measured)
        from slurmtopo.plan.rankmap import node_contiguous

        return node_contiguous(placement)

    def refusal(self, why: str) -> str:
        """As :meth:`Launcher.refusal`; when the free GPUs give the nodes
        different numbers of ranks no --order evens them out: the remedy
        is a fixed number a node (--gpus-per-node), queued if need be."""
        if why.startswith("ranks per node differ"):
            return (f"--launcher {self.name} cannot start this plan: {why} (use --launcher "
                    "srun, or --gpus-per-node K: K ranks on every node, queued until nodes "
                    "have K free GPUs)")
        return super().refusal(why)

    def argv(self, program: Sequence[str], command: Sequence[str],
             tail: Optional[Sequence[str]] = None) -> List[str]:
        return [*program, '--nnodes="$SLURMTOPO_NNODES"',
                '--nproc-per-node="$SLURMTOPO_NPROC_PER_NODE"', NODE_RANK_WORD,
                '--master-addr="$MASTER_ADDR"', '--master-port="$MASTER_PORT"',
                *(torchrun_args(command) if tail is None else [str(w) for w in tail])]


def torchrun_args(command: Sequence[str]) -> List[str]:
    """What follows torchrun's own options for ``command``: ``python x.py
    ARGS`` -> ``x.py ARGS``; ``python -m pkg ARGS`` -> ``-m pkg ARGS``;
    anything else (a binary, python with interpreter options) ->
    ``--no-python CMD`` (torchrun then execs it as given)."""
    cmd = [str(c) for c in command]
    if cmd and _PYTHON.match(os.path.basename(cmd[0])) and len(cmd) > 1:
        rest = cmd[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return rest
        if not rest[0].startswith("-"):
            return rest
    return ["--no-python"] + cmd


_SRUN_TAIL = """\
RANK=$SLURM_PROCID
GROUP_RANK=$NODE_RANK
export RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK CUDA_VISIBLE_DEVICES
export CUDA_DEVICE_ORDER=PCI_BUS_ID SLURMTOPO_GPU SLURMTOPO_NICS SLURMTOPO_CPUS
unset SLURMTOPO_TASK_ENV SLURMTOPO_HOST SLURMTOPO_HOST_GPUS
if [ -n "$SLURMTOPO_CPUS" ] && [ "${SLURMTOPO_CPU_BIND:-1}" != 0 ]; then
  if command -v taskset >/dev/null 2>&1; then
    # the kernel keeps only the CPUs that exist and are allowed here; when
    # none are, taskset fails and the rank runs unbound (the batch step's
    # "CPU binding:" line says which ranks)
    if taskset -c "$SLURMTOPO_CPUS" true 2>/dev/null; then
      exec taskset -c "$SLURMTOPO_CPUS" "$@"
    fi
  elif [ "$LOCAL_RANK" = 0 ]; then
    echo "slurmtopo task $RANK (${SLURMD_NODENAME:-?}): no taskset on this node; its ranks run without CPU binding" >&2
  fi
fi
SLURMTOPO_CPUS=
exec "$@"
"""

#: a program that is not on the node fails here, in the task's first
#: moment, with the node and the fix, instead of the shell's "exec:
#: torchrun: not found" (exit 127)
_TORCHRUN_TAIL = """\
GROUP_RANK=$NODE_RANK
export NODE_RANK GROUP_RANK CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER=PCI_BUS_ID
# torchrun sets the per-process variables itself
unset SLURMTOPO_TASK_ENV SLURMTOPO_HOST SLURMTOPO_HOST_GPUS RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE
if ! command -v "$1" >/dev/null 2>&1; then
  case $1 in
    apptainer) _st_die "apptainer: command not found on this node (PATH=$PATH); install Apptainer on the compute nodes, or submit without --apptainer" ;;
    *) _st_die "$1: command not found on this node (PATH=$PATH); give torchrun's path with --torchrun PATH, or use --torchrun 'python3 -m torch.distributed.run'" ;;
  esac
fi
for _st_a in "$@"; do
  shift
  case $_st_a in
    {word}) set -- "$@" "--node-rank=$NODE_RANK" ;;
    *) set -- "$@" "$_st_a" ;;
  esac
done
exec "$@"
""".replace("{word}", NODE_RANK_WORD)

SRUN = Srun(name="srun", per_node=False, summary="one task per rank",
            help="srun: one task per rank.", task_tail=_SRUN_TAIL)
TORCHRUN = Torchrun(
    name="torchrun", per_node=True,
    summary="one torchrun per node, static rendezvous on the first host",
    help=("torchrun: one torchrun per node (--nnodes, --nproc-per-node, --node-rank in plan "
          "order; the plan is chosen node-contiguous)."),
    default_program=("torchrun",),
    var_words=frozenset({'--nnodes="$SLURMTOPO_NNODES"',
                         '--nproc-per-node="$SLURMTOPO_NPROC_PER_NODE"',
                         '--master-addr="$MASTER_ADDR"', '--master-port="$MASTER_PORT"'}),
    task_tail=_TORCHRUN_TAIL,
    remedy="use --launcher srun, or an order with the intra-node kinds fastest",
    cpu_binding=("CPU binding: none (torchrun starts the ranks; rankmap.json lists each "
                 "rank's planned CPUs for a program that binds itself)"))

_REGISTRY: Dict[str, Launcher] = {}


def register(launcher: Launcher) -> Launcher:
    """Make ``launcher`` known by its name (``--launcher``, plan documents)."""
    if launcher.name in _REGISTRY:
        raise ValueError(f"launcher {launcher.name!r} is registered already")
    _REGISTRY[launcher.name] = launcher
    return launcher


register(SRUN)
register(TORCHRUN)

#: the default launcher (and that of plan documents that name none)
DEFAULT = SRUN.name


def names() -> Tuple[str, ...]:
    """The registered launchers' names, in registration order."""
    return tuple(_REGISTRY)


def get(name: str, what: str = "--launcher") -> Launcher:
    """The launcher called ``name`` (SlurmtopoError naming ``what`` if none)."""
    found = _REGISTRY.get(name)
    if found is None:
        raise SlurmtopoError(f"{what} must be one of {', '.join(_REGISTRY)}, got {name!r}")
    return found
