"""One job as the user gave it, resolved once: :class:`JobSpec`.

A job is given as a framework's settings (``--tp 8``, ``--dp-shard -1``, a
``--config`` file), placement constraints (``--require``, ``--prefer``
...) and the model it trains. :func:`build_spec` turns them, in one pass,
into the spec every later step is handed whole:

* the **framework** (its registered object),
* its **layout**: the settings as the framework resolves them and every
  group it builds, by its own kind names (what ``groups`` prints and the
  rank map's ``framework_groups`` hold),
* the planner's **request**: the Megatron layout numbering the ranks as the
  framework does, the constraints in the planner's kinds (a framework's own
  kind names translated, :func:`translate_kinds`), and the step it runs
  (:class:`~slurmtopo.job.workload.Workload`: its data-parallel style, the
  model, the overlaps, the NCCL release).

The layout is resolved once, here (``Framework.layout``), and the planner's
terms come from that resolution (``Framework.terms``); nothing downstream
resolves it again. A framework's configuration file is read once into a
:class:`FrameworkConfig`, whose settings, model keys and overlaps its
framework's reader parses when first asked.

Pure: the caller reads files (:func:`slurmtopo.api.job_spec` does) and
parses the model text (a ModelSpec is kept as given, as the workload keeps
it).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Dict, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.frameworks.base import Framework, RequestTerms
from slurmtopo.job.frameworks.common import FrameworkLayout
from slurmtopo.job.request import JobRequest
from slurmtopo.job.workload import Workload

__all__ = ["FrameworkConfig", "JobSpec", "build_spec", "translate_kinds", "workload_of",
           "WORKLOAD_FLAGS"]


@dataclass(frozen=True)
class FrameworkConfig:
    """A framework's own configuration file (``--config``), read once:
    each part is parsed by the framework's reader when first asked, and
    its refusals name ``where``."""

    framework: Framework
    text: str
    where: str

    @cached_property
    def knobs(self) -> Dict[str, object]:
        """The framework's settings the file sets."""
        return self.framework.config_knobs(self.text, self.where)

    @cached_property
    def model_keys(self) -> Dict[str, object]:
        """The ``--model`` keys the file gives (``preset``: a model preset)."""
        return self.framework.config_model(self.text, self.where)

    @cached_property
    def overlaps(self) -> Dict[str, bool]:
        """The Workload overlaps the file turns on."""
        return self.framework.config_overlaps(self.text, self.where)


@dataclass(frozen=True)
class JobSpec:
    """One job, resolved once (see the module doc)."""

    #: the registered framework that lays the job out
    framework: Framework
    #: its settings as the framework resolves them and its groups
    layout: FrameworkLayout
    #: what the planner is given: layout, constraints, workload
    request: JobRequest
    #: what the framework's terms say the planner leaves out
    notes: Tuple[str, ...] = ()

    @property
    def knobs(self) -> Dict[str, object]:
        """The framework's settings, resolved (``dp_shard=-1`` filled in)."""
        return dict(self.layout.knobs)

    @property
    def workload(self) -> Optional[Workload]:
        return self.request.workload

    @property
    def framework_groups(self) -> Optional[FrameworkLayout]:
        """The layout by the framework's own kind names, for the preview's
        header and the rank map's ``framework_groups``; None when its kinds
        are the planner's own (Megatron)."""
        return None if self.framework.planner_kinds else self.layout


def translate_kinds(terms: RequestTerms, framework: Framework,
                    levels: Mapping[str, Any], what: str) -> Dict[str, Any]:
    """``--require``/``--prefer`` (or message sizes, waits) given in the
    framework's kind names -> the planner's kinds. A framework whose kinds
    are the planner's passes them unchanged (JobRequest checks them); a
    framework kind the planner has no kind for is refused by name."""
    if framework.planner_kinds:
        return dict(levels)
    out: Dict[str, Any] = {}
    for kind, level in levels.items():
        if kind in terms.kinds:
            target = terms.kinds[kind]
        else:
            have = ", ".join(sorted(terms.kinds))
            raise LayoutError(f"--{what} {kind}={level}: this {framework.name} layout has no "
                              f"{kind!r} groups the planner can place (it places: {have})")
        if target in out and out[target] != level:
            raise LayoutError(f"--{what} names the {target!r} groups twice ({out[target]} and "
                              f"{level})")
        out[target] = level
    return out


#: the Workload flags a job's configuration may set
WORKLOAD_FLAGS = ("sequence_parallel", "tp_comm_overlap", "ep_comm_overlap",
                  "overlap_grad_reduce", "overlap_param_gather")


def workload_of(framework: Framework, fl: FrameworkLayout, model=None, nccl_version=None,
                overlaps: Optional[Mapping[str, bool]] = None) -> Workload:
    """The step ``fl`` runs for ``model`` (a ModelSpec; None: the default
    model): the framework's data-parallel style for its settings, HSDP's
    shard group, sequence parallelism where the framework always runs it,
    the overlaps its own settings turn on (``Framework.overlap_knobs``), and
    ``overlaps``: the Workload flags the job's configuration turns on
    (``tp_comm_overlap``, ``sequence_parallel`` ...), which win."""
    k = dict(fl.knobs)
    flags = {"sequence_parallel": framework.sequence_parallel}
    # its own settings that turn overlaps on, then what the caller says
    flags.update({flag: True for name, flag in framework.overlap_knobs.items() if k.get(name)})
    flags.update({n: v for n, v in (overlaps or {}).items()
                  if n in WORKLOAD_FLAGS and v is not None})
    return Workload(framework=framework.name, style=framework.style(k), model=model,
                    shard=framework.hsdp_shard(k), nccl_version=nccl_version, **flags)


def build_spec(framework, knobs: Mapping[str, Any], *,
               require: Optional[Mapping[str, str]] = None,
               prefer: Optional[Mapping[str, str]] = None,
               message_bytes: Optional[Mapping[str, int]] = None,
               wait: Optional[Mapping[str, float]] = None, gpus_per_node: Optional[int] = None,
               exclusive: bool = False, nodelist=None, exclude=(), model=None,
               nccl_version: Optional[Tuple[int, int, int]] = None,
               overlaps: Optional[Mapping[str, bool]] = None) -> JobSpec:
    """The job laid out by ``framework`` (a name or the object) with its
    own settings ``knobs`` (None: the framework's default): its layout
    resolved, the planner's layout and kinds, the constraints translated
    into them with the preferences of the framework's data-parallel style
    added unless the job says otherwise, and the workload. Raises
    LayoutError for a layout the framework refuses, with its reason."""
    fw = registry.get(framework)
    fl = fw.layout(**knobs)
    terms = fw.terms(fl)
    require = translate_kinds(terms, fw, dict(require or {}), "require")
    prefer = translate_kinds(terms, fw, dict(prefer or {}), "prefer")
    for kind, level in terms.prefer.items():
        if kind not in require:
            prefer.setdefault(kind, level)
    request = JobRequest(
        layout=terms.layout, require=require, prefer=prefer, gpus_per_node=gpus_per_node,
        exclusive=exclusive, nodelist=nodelist, exclude=exclude,
        message_bytes=translate_kinds(terms, fw, dict(message_bytes or {}), "message-bytes"),
        wait=translate_kinds(terms, fw, dict(wait or {}), "wait"),
        workload=workload_of(fw, fl, model, nccl_version, overlaps))
    return JobSpec(fw, fl, request, terms.notes)
