"""How the batch script starts the job's processes: the launcher (srun or
torchrun) and the container around them (pure; the script renders it).

Why the launch looks like this:

* **Compute nodes need only a POSIX shell.** ``slurmtopo bind`` (batch host,
  Python) writes every task's environment as a small ``/bin/sh`` fragment;
  srun starts ``/bin/sh -c TASK_SNIPPET`` on every node, which sources the
  fragment for its ``SLURM_PROCID`` and ``exec``-s the command. Neither
  slurmtopo nor Python is needed on the other nodes or in a container.
* **srun launcher**: one task per rank, placed by ``--distribution=arbitrary``
  on the hostfile (no ``--nodes``: srun >= 24.05 refuses the pair, and the
  node count follows from the hostfile anyway).
* **torchrun launcher**: one task per node (hostfile = the planned hosts in
  order); each runs ``torchrun --nnodes N --nproc-per-node K --node-rank R``
  with a static rendezvous on the first host, so torchrun's rank
  ``R * K + LOCAL_RANK`` is the planned rank. That holds only for a
  node-contiguous plan (:func:`slurmtopo.rankmap.node_contiguous`), which is
  checked at submit time. The node rank is only known on the node, so the
  line carries :data:`NODE_RANK_WORD` and the task fragment replaces it.
* **Containers**: pyxis/enroot options go on the srun step (the snippet then
  runs inside the container, which needs only ``/bin/sh``); Apptainer is a
  wrapper (``apptainer exec --nv IMAGE``) between the snippet and the
  command, so the environment and CPU binding are set before it starts.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from slurmtopo.errors import SlurmtopoError
# the task-launch contract with the start-time step lives with the plan
# document (the script and binding never import each other)
from slurmtopo.plandoc import LAUNCHERS, NODE_RANK_WORD

_PYTHON = re.compile(r"^python[0-9.]*$")


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


@dataclass(frozen=True)
class Launch:
    """Launcher and container choices of one job."""

    launcher: str = "srun"
    torchrun: str = "torchrun"  # the torchrun command on the compute nodes
    container_image: Optional[str] = None  # pyxis/enroot
    container_mounts: Optional[str] = None
    container_workdir: Optional[str] = None
    apptainer: Optional[str] = None  # image for `apptainer exec --nv`

    def check(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise SlurmtopoError(f"--launcher must be one of {', '.join(LAUNCHERS)}, "
                                 f"got {self.launcher!r}")
        for what, value in (("--container-image", self.container_image),
                            ("--container-mounts", self.container_mounts),
                            ("--container-workdir", self.container_workdir),
                            ("--apptainer", self.apptainer), ("--torchrun", self.torchrun)):
            if value is not None and (not str(value).strip() or "\n" in str(value)
                                      or "\r" in str(value)):
                raise SlurmtopoError(f"{what} {value!r}: give one non-empty line")
        if (self.container_mounts or self.container_workdir) and not self.container_image:
            raise SlurmtopoError("--container-mounts/--container-workdir need --container-image")
        if self.container_image and self.apptainer:
            raise SlurmtopoError("give --container-image (pyxis) or --apptainer, not both")

    def srun_options(self) -> List[str]:
        """pyxis/enroot options for the srun step."""
        out = []
        for key, value in (("container-image", self.container_image),
                           ("container-mounts", self.container_mounts),
                           ("container-workdir", self.container_workdir)):
            if value is not None:
                out.append(f"--{key}={value}")
        return out

    def argv(self, command: Sequence[str]) -> List[str]:
        """The words after the task snippet: wrapper, launcher, command.
        Words holding ``$VAR`` are marked by :meth:`render_words`."""
        words: List[str] = []
        if self.apptainer:
            words += ["apptainer", "exec", "--nv", self.apptainer]
        if self.launcher == "torchrun":
            words += [self.torchrun, '--nnodes="$SLURMTOPO_NNODES"',
                      '--nproc-per-node="$SLURMTOPO_NPROC_PER_NODE"', NODE_RANK_WORD,
                      '--master-addr="$MASTER_ADDR"', '--master-port="$MASTER_PORT"']
            words += torchrun_args(command)
        else:
            words += [str(c) for c in command]
        return words

    def doc(self) -> Dict[str, Any]:
        """What the start-time step needs to know (in the plan document)."""
        return {"launcher": self.launcher}

    def comment(self) -> str:
        where = ("one task per rank" if self.launcher == "srun"
                 else "one torchrun per node, static rendezvous on the first host")
        box = (f", in container {self.container_image} (pyxis)" if self.container_image
               else f", in apptainer image {self.apptainer}" if self.apptainer else "")
        return f"launcher: {self.launcher} ({where}){box}"


#: the torchrun words that reference the batch shell's variables (kept
#: unquoted-but-safe: they are fixed text, not user input)
_VAR_WORDS = {'--nnodes="$SLURMTOPO_NNODES"', '--nproc-per-node="$SLURMTOPO_NPROC_PER_NODE"',
              '--master-addr="$MASTER_ADDR"', '--master-port="$MASTER_PORT"'}


def render_words(words: Sequence[str]) -> str:
    """Shell text for ``words``: user words ``shlex.quote``-d, the fixed
    variable references of :meth:`Launch.argv` left to expand."""
    return " ".join(w if w in _VAR_WORDS else shlex.quote(w) for w in words)
