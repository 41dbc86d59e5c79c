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
  node-contiguous plan (:func:`slurmtopo.plan.rankmap.node_contiguous`), which is
  checked at submit time. The node rank is only known on the node, so the
  line carries :data:`slurmtopo.plan.launchers.NODE_RANK_WORD` and the task
  fragment replaces it. (What differs between launchers is in
  :mod:`slurmtopo.plan.launchers`.)
* **Containers**: pyxis/enroot options go on the srun step (the snippet then
  runs inside the container, which needs only ``/bin/sh``); Apptainer is a
  wrapper (``apptainer exec --nv IMAGE``) between the snippet and the
  command, so the environment and CPU binding are set before it starts.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.plan import launchers
from slurmtopo.plan.launch_detect import Adoption, resolve
from slurmtopo.plan.launchers import torchrun_args  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Launch:
    """Launcher and container choices of one job."""

    launcher: str = launchers.DEFAULT
    #: the launcher's program on the compute nodes (``--torchrun``): one
    #: word, or words split as the shell would (``python3 -m
    #: torch.distributed.run``); None: the launcher's own default
    torchrun: Optional[str] = None
    container_image: Optional[str] = None  # pyxis/enroot
    container_mounts: Optional[str] = None
    container_workdir: Optional[str] = None
    apptainer: Optional[str] = None  # image for `apptainer exec --nv`
    #: the user named the launcher (``--launcher``) rather than leaving the
    #: default: a command that starts torchrun is then refused under srun
    #: instead of adopted (:meth:`for_command`)
    chosen: bool = False
    #: the command's own torchrun, run by the torchrun launcher
    #: (:meth:`for_command`); None: the command starts no launcher
    adopted: Optional[Adoption] = None

    @property
    def kind(self) -> launchers.Launcher:
        """The launcher object (see slurmtopo.plan.launchers)."""
        return launchers.get(self.launcher)

    def for_command(self, command: Sequence[str]) -> "Launch":
        """This launch for ``command``: when the command starts torchrun
        itself, the torchrun launcher running the user's torchrun once per
        node (:func:`slurmtopo.plan.launch_detect.resolve`; another launcher in
        the command, or torchrun under a chosen srun, is refused with the
        command line to use). Unchanged when the command starts none."""
        if self.adopted is not None:
            return self
        asked = self.launcher if (self.chosen or self.launcher != launchers.DEFAULT) else None
        adoption = resolve(command, asked, self.torchrun)
        if adoption is None:
            return self
        return replace(self, launcher=launchers.TORCHRUN.name, torchrun=None, adopted=adoption)

    def requirement(self, placement) -> Optional[str]:
        """None when this launch can start ``placement``: the launcher's own
        requirement, and the node count and ranks per node of an adopted
        torchrun's ``--nnodes``/``--nproc-per-node``."""
        why = self.kind.requirement(placement)
        if why is None and self.adopted is not None:
            why = self.adopted.requirement(placement)
        return why

    def refusal(self, why: str) -> str:
        """The one-line error for a plan :meth:`requirement` refuses."""
        if self.adopted is not None and why.startswith("the command's torchrun"):
            return (f"{why}: give torchrun the plan's numbers, or leave --nnodes and "
                    "--nproc-per-node out (slurmtopo sets them from the plan)")
        return self.kind.refusal(why)

    def check(self) -> None:
        launchers.get(self.launcher)  # a known launcher, else its one-line error
        for what, value in (("--container-image", self.container_image),
                            ("--container-mounts", self.container_mounts),
                            ("--container-workdir", self.container_workdir),
                            ("--apptainer", self.apptainer), ("--torchrun", self.torchrun)):
            if value is not None and (not str(value).strip() or "\n" in str(value)
                                      or "\r" in str(value)):
                raise SlurmtopoError(f"{what} {value!r}: give one non-empty line")
        self.program()
        if (self.container_mounts or self.container_workdir) and not self.container_image:
            raise SlurmtopoError("--container-mounts/--container-workdir need --container-image")
        if self.container_image and self.apptainer:
            raise SlurmtopoError("give --container-image (pyxis) or --apptainer, not both")

    def program(self) -> Tuple[str, ...]:
        """The launcher's own command words (``--torchrun``, split as the
        shell would, so ``python3 -m torch.distributed.run`` works)."""
        if not self.kind.default_program:
            return ()
        if self.adopted is not None:
            return self.adopted.program
        if self.torchrun is None:
            return self.kind.default_program
        try:
            words = tuple(shlex.split(self.torchrun))
        except ValueError as exc:
            raise SlurmtopoError(f"--torchrun {self.torchrun!r}: {exc}") from None
        if not words:
            raise SlurmtopoError(f"--torchrun {self.torchrun!r}: give one non-empty line")
        return words

    def srun_options(self) -> List[str]:
        """pyxis/enroot options for the srun step."""
        out = []
        for key, value in (("container-image", self.container_image),
                           ("container-mounts", self.container_mounts),
                           ("container-workdir", self.container_workdir)):
            if value is not None:
                out.append(f"--{key}={value}")
        return out

    def check_srun(self, known: Optional[AbstractSet[str]]) -> None:
        """Refuse, before submitting, a container option this cluster's
        srun does not know (``known``: its long options, from ``srun
        --help`` on the login node; None: unknown, nothing refused): the
        job would otherwise fail at run time with srun's "unrecognized
        option"."""
        if known is None:
            return
        for option in self.srun_options():
            name = option.split("=", 1)[0]
            if name not in known:
                raise SlurmtopoError(
                    f"{name}: this cluster's srun has no such option (its pyxis plugin, which "
                    "runs containers through enroot, is not installed: `srun --help` does not "
                    "list it); ask the admins for pyxis, or run the image with --apptainer "
                    "IMAGE instead")

    def argv(self, command: Sequence[str]) -> List[str]:
        """The words after the task snippet: wrapper, launcher, command.
        Words holding ``$VAR`` are marked by :meth:`render_words`."""
        words: List[str] = []
        if self.apptainer:
            words += ["apptainer", "exec", "--nv", self.apptainer]
        if self.adopted is not None:
            return words + self.kind.argv(self.program(), command, self.adopted.tail)
        return words + self.kind.argv(self.program(), command)

    def doc(self) -> Dict[str, Any]:
        """What the start-time step needs to know (in the plan document)."""
        return {"launcher": self.launcher}

    def comment(self) -> str:
        box = (f", in container {self.container_image} (pyxis)" if self.container_image
               else f", in apptainer image {self.apptainer}" if self.apptainer else "")
        own = f"; {self.adopted.describe()}" if self.adopted is not None else ""
        return f"launcher: {self.launcher} ({self.kind.summary}{own}){box}"


def render_words(words: Sequence[str], launch: Launch) -> str:
    """Shell text for ``words``: user words ``shlex.quote``-d, the fixed
    variable references of ``launch``'s launcher left to expand."""
    keep = launch.kind.var_words
    return " ".join(w if w in keep else shlex.quote(w) for w in words)
