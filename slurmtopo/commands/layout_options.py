"""The parallel-layout options shared by ``groups``, ``plan`` and ``sbatch``.

One definition, so the three commands read a layout the same way; every
framework's own settings become options from its registered knobs
(:mod:`slurmtopo.job.frameworks.registry`).
"""
from __future__ import annotations

from typing import Callable, Sequence, Tuple

import click

from slurmtopo.api import framework_config
from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.groups import CONVENTIONS, DEFAULT_CONVENTION
from slurmtopo.plan.launch_detect import world_of

#: option names the decorator adds (the keyword arguments it passes on)
LAYOUT_PARAMS = ("tp", "cp", "ep", "pp", "dp", "expert_tp", "world", "order", "convention")


class RegistryChoice(click.Choice):
    """A :class:`click.Choice` over names read from a registry whenever
    click asks for them (parsing a value, completing one, printing help and
    the error for an unknown one), not once when the command's module is
    imported: a framework registered afterwards (a site's own, a test's) is
    a valid ``--framework`` as it is an api one. The help line and the error
    are click's own, word for word."""

    def __init__(self, names: Callable[[], Sequence[str]], case_sensitive: bool = True) -> None:
        # not Choice.__init__: it would store the names it is given once
        self._names = names
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> Tuple[str, ...]:  # type: ignore[override]
        return tuple(self._names())


def layout_options(func):
    """Add --tp --cp --ep --pp --dp --expert-tp --world --order --convention."""
    options = [
        click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel size."),
        click.option("--cp", type=int, default=1, show_default=True, help="Context-parallel size."),
        click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel size."),
        click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel size."),
        click.option("--dp", type=int, default=None,
                     help="Data-parallel size (default: from --world)."),
        click.option("--expert-tp", "expert_tp", type=int, default=None,
                     help="Expert tensor-parallel size (default: --tp)."),
        click.option("--world", type=int, default=None,
                     help="Total ranks (default: tp*cp*pp*dp)."),
        click.option("--order", default=None,
                     help="Rank order. megatron: first name fastest (default tp-cp-ep-dp-pp); "
                          "torch: last name fastest (default pp-dp-ep-cp-tp)."),
        click.option("--convention", type=click.Choice(list(CONVENTIONS)),
                     default=DEFAULT_CONVENTION, show_default=True, help="How to read --order."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


#: click's defaults of the layout options, to tell a given value from none
_LAYOUT_DEFAULTS = {"tp": 1, "cp": 1, "ep": 1, "pp": 1, "dp": None, "expert_tp": None,
                    "world": None, "order": None, "convention": DEFAULT_CONVENTION}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def framework_params():
    """The framework settings framework_options adds besides --framework and
    the layout options (dp_replicate, zero_stage ...)."""
    return tuple(n for n in registry.all_knobs() if n not in LAYOUT_PARAMS)


def framework_options(func):
    """Add --framework and every framework's own settings that the layout
    options do not already define (--dp-replicate, --dp-shard, --zero-stage ...).

    Use with :func:`layout_options`; :func:`framework_layout_from` reads both.
    Each setting's default is None (the framework's own default applies), so
    a setting given to a framework that has none is refused by name."""
    options = [click.option(
        "--framework", type=RegistryChoice(registry.names),
        default=registry.DEFAULT_FRAMEWORK,
        show_default=True,
        help="Whose groups: each framework builds them its own way and names them its way.")]
    for name in framework_params():
        owner, knob = _owner_of(name)
        text = f"{owner}: {knob.help}"
        if knob.kind is bool:
            options.append(click.option(_flag(name), name, is_flag=True, default=None, help=text))
        elif isinstance(knob.kind, tuple):
            options.append(click.option(_flag(name), name, type=click.Choice(list(knob.kind)),
                                        default=None, help=text))
        else:
            options.append(click.option(_flag(name), name, type=int, default=None, help=text))
    options.append(click.option(
        "--config", "config", default=None, metavar="FILE",
        help="Take the framework's settings from its own configuration: torchtitan's TOML "
             "job file ([parallelism]), a DeepSpeed JSON config, a file with Megatron-LM's "
             "arguments. Options given here win over it."))
    for option in reversed(options):
        func = option(func)
    return func


def _owner_of(name: str):
    for fw in registry.FRAMEWORKS.values():
        for knob in fw.knobs:
            if knob.name == name:
                return fw.name, knob
    raise KeyError(name)  # pragma: no cover - names come from the registry


def framework_knobs(framework, values, config=None):
    """The chosen framework's settings: those its ``config`` file sets (a
    :class:`~slurmtopo.job.spec.FrameworkConfig`, read once, or None),
    overridden by the option values given (that differ from the option's
    default). A setting the framework does not have is refused by name
    when it was given."""
    fw = registry.get(framework)
    own = {k.name for k in fw.knobs}
    knobs = dict(config.knobs) if config is not None else {}
    for name, value in values.items():
        given = (value is not None and value is not False
                 and value != _LAYOUT_DEFAULTS.get(name))
        if name in own:
            if given or name not in knobs:
                knobs[name] = value
        elif given:
            raise LayoutError(f"{_flag(name)} is not a {fw.name} setting; {fw.name}'s: "
                              f"{', '.join(_flag(k.name) for k in fw.knobs)}")
    return knobs


def world_from_command(command):
    """The world size a ``torchrun --nnodes N --nproc-per-node M ...``
    command (or ``python -m torch.distributed.run ...``) starts (N*M), or
    None when the command does not say (slurmtopo.plan.launch_detect reads it)."""
    return world_of(command)


def framework_layout_from(framework=None, config=None, **values):
    """The FrameworkLayout for these option values and ``--config`` file
    (a path; raises LayoutError)."""
    fw = registry.get(framework or registry.DEFAULT_FRAMEWORK)
    settings = framework_config(fw, config) if config is not None else None
    return fw.layout(**framework_knobs(fw, values, settings))
