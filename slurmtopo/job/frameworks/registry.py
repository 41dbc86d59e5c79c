"""The frameworks slurmtopo speaks, by name, and one way to call each."""
from __future__ import annotations

from typing import Dict, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import deepspeed, megatron, torchtitan
from slurmtopo.job.frameworks.common import FrameworkLayout, Knob

__all__ = ["FRAMEWORKS", "DEFAULT_FRAMEWORK", "knobs_of", "all_knobs", "framework_layout",
           "describe"]

#: name -> module with NAME, KNOBS and layout(**knobs)
FRAMEWORKS = {m.NAME: m for m in (megatron, torchtitan, deepspeed)}
DEFAULT_FRAMEWORK = "megatron"


def _module(framework: str):
    try:
        return FRAMEWORKS[framework]
    except KeyError:
        raise LayoutError(f"unknown framework {framework!r}; known: "
                          f"{', '.join(FRAMEWORKS)}") from None


def knobs_of(framework: str) -> Tuple[Knob, ...]:
    """The framework's knobs, in the order it lists them."""
    return _module(framework).KNOBS


def all_knobs() -> Dict[str, Knob]:
    """Every knob of every framework by name (a name several frameworks share,
    like ``tp``, appears once: the first framework's help and default)."""
    out: Dict[str, Knob] = {}
    for module in FRAMEWORKS.values():
        for knob in module.KNOBS:
            out.setdefault(knob.name, knob)
    return out


def framework_layout(framework: str, **knobs) -> FrameworkLayout:
    """Resolve ``knobs`` (the framework's names; None: its default) as
    ``framework`` does. A knob it does not have is refused by name."""
    module = _module(framework)
    own = {k.name for k in module.KNOBS}
    for name in knobs:
        if name not in own:
            raise LayoutError(f"{framework} has no {name.replace('_', '-')!r} setting; its "
                              f"settings: {', '.join(k.name for k in module.KNOBS)}")
    return module.layout(**{k: v for k, v in knobs.items() if v is not None})


def describe(fl: FrameworkLayout) -> str:
    """The layout in the framework's own words, for a plan's header:
    ``torchtitan world 16 = dp_replicate 2 × dp_shard 4 × tp 2 (mesh pp,
    dp_replicate, dp_shard, cp, tp; ...)``; an MoE layout's ``ep`` last."""
    module = _module(fl.framework)
    knobs = dict(fl.knobs)
    names = list(getattr(module, "MESH", ())) + ["ep"]
    dims = " × ".join(f"{n} {knobs[n]}" for n in names
                      if isinstance(knobs.get(n), int) and not isinstance(knobs.get(n), bool)
                      and knobs[n] > 1) or "1 rank"
    words = getattr(module, "MESH_WORDS", "")
    return f"{fl.framework} world {fl.world} = {dims}" + (f" ({words})" if words else "")
