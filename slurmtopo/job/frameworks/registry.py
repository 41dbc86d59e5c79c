"""The frameworks slurmtopo speaks, registered by name: one
:class:`~slurmtopo.job.frameworks.base.Framework` object each (:func:`get`,
:func:`names`), as the launchers are (:mod:`slurmtopo.plan.launchers`).

Every caller asks the object (its knobs, groups, planner terms,
configuration reader, step conventions), never compares a name, so adding
a framework is one object and one :func:`register` call.
"""
from __future__ import annotations

from typing import Dict, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import deepspeed, megatron, torchtitan
from slurmtopo.job.frameworks.base import Framework
from slurmtopo.job.frameworks.common import FrameworkLayout, Knob

__all__ = ["FRAMEWORKS", "DEFAULT_FRAMEWORK", "register", "unregister", "get", "names", "advised",
           "knobs_of", "all_knobs", "framework_layout", "describe"]

#: name -> the registered Framework, in registration order
FRAMEWORKS: Dict[str, Framework] = {}


def register(framework: Framework) -> Framework:
    """Make ``framework`` known by its name (``--framework``, a workload's
    ``framework``, the daemon's requests)."""
    if not framework.name or framework.name in FRAMEWORKS:
        raise ValueError(f"framework {framework.name!r} is registered already (or unnamed)")
    FRAMEWORKS[framework.name] = framework
    return framework


def unregister(name: str) -> None:
    """Forget the framework called ``name`` (a test's own framework)."""
    FRAMEWORKS.pop(name, None)


for _builtin in (megatron.FRAMEWORK, torchtitan.FRAMEWORK, deepspeed.FRAMEWORK):
    register(_builtin)

#: the framework of a job that names none (and of plan documents without one)
DEFAULT_FRAMEWORK = megatron.FRAMEWORK.name


def names() -> Tuple[str, ...]:
    """The registered frameworks' names, in registration order."""
    return tuple(FRAMEWORKS)


def advised() -> Tuple[str, ...]:
    """The frameworks the layout advisor lays models out for."""
    return tuple(n for n, fw in FRAMEWORKS.items() if fw.advised)


def get(framework) -> Framework:
    """The framework called ``framework`` (a Framework is returned as it
    is); LayoutError naming the known ones if none."""
    if isinstance(framework, Framework):
        return framework
    try:
        return FRAMEWORKS[framework]
    except (KeyError, TypeError):
        raise LayoutError(f"unknown framework {framework!r}; known: "
                          f"{', '.join(FRAMEWORKS)}") from None


def knobs_of(framework: str) -> Tuple[Knob, ...]:
    """The framework's knobs, in the order it lists them."""
    return get(framework).knobs


def all_knobs() -> Dict[str, Knob]:
    """Every knob of every framework by name (a name several frameworks share,
    like ``tp``, appears once: the first framework's help and default)."""
    out: Dict[str, Knob] = {}
    for fw in FRAMEWORKS.values():
        for knob in fw.knobs:
            out.setdefault(knob.name, knob)
    return out


def framework_layout(framework: str, **knobs) -> FrameworkLayout:
    """Resolve ``knobs`` (the framework's names; None: its default) as
    ``framework`` does (:meth:`Framework.layout`)."""
    return get(framework).layout(**knobs)


def describe(fl: FrameworkLayout) -> str:
    """The layout in its framework's own words, for a plan's header
    (:meth:`Framework.describe`)."""
    return get(fl.framework).describe(fl)
