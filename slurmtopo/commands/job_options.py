"""The job options shared by ``plan`` and ``sbatch``, defined once.

``plan`` and ``sbatch`` read a job the same way: the inventory, the layout
(:mod:`slurmtopo.commands.layout_options`), the placement request
(``--require``, ``--prefer``, ...) and how to write the script
(``--job-name``, ``--partition``, ...). Each group is one decorator here,
and :func:`spec_from` / :func:`script_options_from` turn the values into
the use-case layer's inputs (:mod:`slurmtopo.api`: the job's spec and the
script's options).
"""
from __future__ import annotations

import gc
import os
from typing import Dict, Mapping, Optional, Sequence, Tuple

import click

from slurmtopo import api
from slurmtopo.commands.layout_options import (LAYOUT_PARAMS, framework_knobs,
                                               framework_options, framework_params,
                                               layout_options, world_from_command)
from slurmtopo.commands.sbatch_options import options_from, sbatch_flag, sbatch_options
from slurmtopo.cost import parse_bytes
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.groups import GROUP_KINDS
from slurmtopo.job.request import LEVELS, parse_pairs
from slurmtopo.placement.segments import SlurmFeatures
from slurmtopo.plan import launchers
from slurmtopo.plan.hazards import HazardPolicy, KINDS, nccl_version
from slurmtopo.sbatch.launch import Launch
from slurmtopo.slurmfmt.gres_lines import parse_slurm_version
from slurmtopo.slurmfmt.slurm_conf import read_slurm_conf


def _apply(func, options):
    for option in reversed(options):
        func = option(func)
    return func


def job_options(func):
    """--inventory, the layout options, the request options, the script
    options and the sbatch options, in that order."""
    func = sbatch_options(func)
    func = sbatch_flag("wrap", "wrap", default=None, metavar="COMMAND",
                       help="The training command as one shell line, as for sbatch --wrap "
                            "(every rank runs `/bin/sh -c COMMAND`); instead of a command "
                            "after --.")(func)
    func = guardrail_options(func)
    func = script_options(func)
    func = request_options(func)
    func = framework_options(func)
    func = layout_options(func)
    func = click.option("--slurm-conf", "slurm_conf", default=None, metavar="FILE",
                        help="slurm.conf naming each partition's Topology= (with "
                             "--slurm-topology; default $SLURM_CONF or /etc/slurm/slurm.conf).")(func)
    func = click.option("--slurm-topology", default=None, metavar="FILE",
                        help="Plan on the site's topology.conf or topology.yaml (Slurm 25.05+: "
                             "the topology of the job's partition) instead of the inventory's "
                             "fabric.")(func)
    return click.option("--inventory", "inventory_path", metavar="PATH", required=True,
                        help="Inventory file or directory of node reports.")(func)


def _kinds_and_levels() -> str:
    """The help's list of group kinds and levels (from their one home)."""
    return (f"KIND: {', '.join(GROUP_KINDS)}. LEVEL, tightest first: {', '.join(LEVELS)}.")


def load_job_cluster(o, write_cache: bool = True):
    """The cluster of ``--inventory`` as the job's partition sees it, and
    the notes saying so (:func:`partition_view`).

    The loaded cluster lives as long as the command and holds most of its
    objects (a 12,500-node inventory is about a million); nothing in it is
    garbage. ``gc.freeze()`` moves it out of the collector's generations,
    so the collections that planning and pricing trigger no longer walk
    it again and again (about a tenth of a 16,384-GPU plan's time). The
    collector is off from here until the command ends (its context
    closes): a command's objects are freed by reference counting, and the
    ~200 collections that loading, planning and pricing triggered cost
    another twentieth."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and gc.isenabled():
        gc.disable()
        ctx.call_on_close(gc.enable)
    out = partition_view(api.load_cluster(o["inventory_path"], write_cache), o)
    gc.freeze()
    return out


def state_options(default: str):
    """--state and --backend, alike on ``plan`` (default ``none``) and
    ``sbatch`` (default ``live``)."""
    def add(func):
        func = click.option("--backend", "backend_name", default="auto", show_default=True,
                            type=click.Choice(["auto", "cli", "pyslurm"]),
                            help="How to talk to Slurm (--state live, submission; also "
                                 "$SLURMTOPO_BACKEND).")(func)
        return click.option("--state", "state_path", default=default, show_default=True,
                            metavar="live|none|FILE",
                            help="Cluster state to plan against: 'live' (what Slurm says now; "
                                 "a job that does not fit now is planned for the queue, as "
                                 "`slurmtopo sbatch` submits it), 'none' (every node idle) or "
                                 "a snapshot file.")(func)
    return add


class LazyBackend:
    """The Slurm backend, made when first needed (a plan against a snapshot
    never asks Slurm)."""

    def __init__(self, name: str):
        self.name = name
        self._backend = None

    def get(self):
        if self._backend is None:
            # lazy: the one import of the Slurm backends (slurmtopo.slurm: 7 modules, ~8 ms):
            # a plan against a snapshot or `--state none` never asks Slurm. Through the
            # package, so that a fake backend patched into slurmtopo.slurm reaches it
            from slurmtopo import slurm as backends

            self._backend = backends.get_backend(self.name)
        return self._backend


#: the ``--state`` values that mean "what Slurm says now"
LIVE_STATES = ("live", "slurm")


def state_for(inv, state_path, backend: LazyBackend, partition=None):
    """The cluster state ``--state`` names: ``live`` (or ``slurm``): what
    Slurm says now; ``none`` (or nothing): every node idle; else a snapshot
    file. ``plan`` and ``sbatch`` read it alike, so what a user previews is
    what is submitted."""
    if state_path in LIVE_STATES:
        return api.live_state(inv, backend.get(), partition)
    if state_path in (None, "none"):
        return api.LiveState(api.load_state_file(inv, None), "no state (every node idle)")
    return api.LiveState(api.load_state_file(inv, state_path), state_path)


def with_live_topology(inv, notes, state_path, backend: LazyBackend, o):
    """(cluster, notes) with Slurm's own topology when the plan reads the
    live state, no --slurm-topology is given and the inventory has no
    fabric (:func:`slurmtopo.api.live_topology`, which says which it used);
    a plan against a snapshot or ``none`` never asks Slurm."""
    if state_path not in LIVE_STATES or o.get("slurm_topology"):
        return inv, notes
    inv, more = api.live_topology(inv, backend.get())
    return inv, tuple(notes) + tuple(more)


def partition_view(inv, o):
    """The inventory as the job's partition sees it (``--slurm-topology``),
    and the notes saying so; see :func:`slurmtopo.api.cluster_for_partition`."""
    conf = o.get("slurm_conf")
    if conf is None and o.get("slurm_topology"):
        conf = next((c for c in (os.environ.get("SLURM_CONF"), "/etc/slurm/slurm.conf")
                     if c and os.path.isfile(c)), None)
    return api.cluster_for_partition(inv, o.get("slurm_topology"), o.get("partition"), conf)


def request_options(func):
    """--require --prefer --gpus-per-node --exclusive --nodelist --exclude
    --message-bytes --model --memory-check."""
    kl = _kinds_and_levels()
    return _apply(func, [
        click.option("--require", multiple=True, metavar="KIND=LEVEL",
                     help=f"Hard constraint, e.g. tp=nvlink (repeatable). {kl}"),
        click.option("--prefer", multiple=True, metavar="KIND=LEVEL",
                     help="Soft preference, e.g. dp=leaf (repeatable); kinds and levels as "
                          "for --require."),
        click.option("--gpus-per-node", type=int, default=None,
                     help="Use this many GPUs of every node (default: as the plan needs)."),
        click.option("--exclusive", is_flag=True,
                     help="Whole nodes only; adds #SBATCH --exclusive."),
        sbatch_flag("nodelist", "nodelist", default=None,
                     help="Only these nodes (hostlist); passed to sbatch."),
        sbatch_flag("exclude", "exclude", default=None,
                     help="Never these nodes (hostlist); passed to sbatch."),
        click.option("--message-bytes", multiple=True, metavar="KIND=SIZE",
                     help="Bytes per collective for the cost model, e.g. dp=1GiB "
                          "(repeatable)."),
        click.option("--model", "model", default=None, metavar="SPEC",
                     help="The model the training step is priced for (the plan's choice, the "
                          "preview, --json, the memory check): a preset (llama3-8b, "
                          "llama3-70b, llama3.1-405b, deepseek-v3, mixtral-8x7b, qwen3-30b-a3b "
                          "... or 7b, 8b, 13b, 70b, 405b), optionally changed "
                          "(llama3-70b,seq_len=8192,global_batch=256,dtype=fp8), or "
                          "layers=...,hidden=...,params=..., or a Hugging Face config.json "
                          "(path/config.json,seq_len=8192) (docs/cost-model.md, 'The model'); "
                          "keys the framework's --config gives are read too. Without one: "
                          "the step's communication for Llama 3 70B's shape."),
        click.option("--memory-check", "memory_check", default=None,
                     type=click.Choice(["error", "warn", "off"]),
                     help="A layout whose model (--model or --config) does not fit in GPU "
                          "memory: refuse it, warn, or say nothing (default: warn for plan, "
                          "error for sbatch)."),
    ])


def script_options(func):
    """The batch script's options (job name, partition, topology request,
    start-time step)."""
    return _apply(func, [
        sbatch_flag("job-name", "job_name", default=None, help="#SBATCH --job-name."),
        sbatch_flag("partition", "partition", default=None, help="#SBATCH --partition."),
        sbatch_flag("time", "time_limit", default=None, help="#SBATCH --time."),
        sbatch_flag("account", "account", default=None, help="#SBATCH --account."),
        click.option("--sbatch", "extra_sbatch", multiple=True, metavar="OPTION",
                     help="Any other #SBATCH option, e.g. --sbatch=--comment=x (repeatable); "
                          "those the plan sets (--nodes, --ntasks, --gpus*, --nodelist, ...) "
                          "are refused."),
        click.option("--switch-wait", default=None,
                     help="Max wait for the --switches request (Slurm time; default 5:00; "
                          "0 = no wait limit given)."),
        click.option("--slurm-version", "slurm_version", default=None, metavar="X.Y",
                     help="The cluster's Slurm release: segment options it lacks are not "
                          "asked (default: sbatch asks `sinfo --version`; plan assumes a "
                          "current release)."),
        click.option("--topology-request", type=click.Choice(["auto", "tree", "block", "none"]),
                     default="auto", show_default=True,
                     help="Ask Slurm for --switches (tree), --segment (block) or nothing."),
        click.option("--cgroup-devices", type=click.Choice(["auto", "yes", "no"]),
                     default="auto", show_default=True,
                     help="Does a device cgroup renumber GPUs? (start-time step)"),
        click.option("--master-port", type=click.IntRange(1, 65535), default=None,
                     help="MASTER_PORT (default: 20000 + job id % 10000)."),
        click.option("--socket-ifname", default=None,
                     help="NCCL_SOCKET_IFNAME (default: the compute NICs' netdevs, else "
                          "^lo,docker)."),
        click.option("--python", "python", default="python3", show_default=True,
                     help="Python with slurmtopo installed, on the first node of the job (it "
                          "runs the start-time step; the other nodes need only /bin/sh)."),
        click.option("--launcher", type=click.Choice(list(launchers.names())),
                     default=None,
                     help=" ".join(launchers.get(n).help for n in launchers.names())
                     + f" Default: {launchers.DEFAULT}, or torchrun when the command after -- "
                       "starts torchrun itself (its --nnodes and --nproc-per-node then "
                       "checked against the plan; deepspeed and accelerate launch are refused "
                       "with the command to use)."),
        click.option("--torchrun", "torchrun_cmd", default=None,
                     help="The torchrun command on the compute nodes (--launcher torchrun; "
                          "default: torchrun): a path, or words such as 'python3 -m "
                          "torch.distributed.run'."),
        click.option("--container-image", default=None,
                     help="Run the ranks in this container through pyxis/enroot (srun "
                          "--container-image)."),
        click.option("--container-mounts", default=None,
                     help="pyxis --container-mounts, e.g. /data:/data (needs "
                          "--container-image)."),
        click.option("--container-workdir", default=None,
                     help="pyxis --container-workdir (needs --container-image)."),
        click.option("--apptainer", "apptainer_image", default=None, metavar="IMAGE",
                     help="Run the command as `apptainer exec --nv IMAGE ...`."),
    ])


def guardrail_options(func):
    """--hazard, --nccl-version and --spares: the pre-launch hazard checks
    (docs/hazards.md) and spare nodes inside the job's domain (docs/sbatch.md)."""
    return _apply(func, [
        click.option("--hazard", "hazards", multiple=True, metavar="KIND=error|warn|off",
                     help="How a pre-launch hazard is treated (repeatable; KIND: "
                          f"{', '.join(KINDS)}, or all). Default: each finding's own "
                          "severity (docs/hazards.md)."),
        click.option("--nccl-version", default=None, metavar="X.Y[.Z]",
                     help="The NCCL release the job loads, for the multi-node NVLink clique "
                          "check (default: $NCCL_VERSION, as NVIDIA's containers set it)."),
        click.option("--spares", type=click.IntRange(0, 64), default=0, show_default=True,
                     metavar="N",
                     help="Ask for N idle spare nodes inside the job's block or leaf and "
                          "submit with --no-kill: when a node is lost, the job re-plans onto "
                          "a spare and restarts its step (at most N times)."),
        click.option("--check", type=click.Choice(["warn", "stop"]), default=None,
                     help="Run `slurmtopo check` as the job's first step: what Slurm gave "
                          "and what every task really gets against the plan; warn: report "
                          "in the job's log, stop: end the job on a broken contract."),
    ])


#: the job name sbatch gives a --wrap job
WRAP_JOB_NAME = "wrap"


def command_from(o: Mapping, cmd: Sequence[str]) -> Tuple[str, ...]:
    """The training command: the words after ``--``, or ``--wrap``'s line
    run by ``/bin/sh -c`` (named "wrap" like sbatch names such a job, unless
    ``--job-name`` says otherwise)."""
    wrap = o.get("wrap")
    if wrap is None:
        command = tuple(cmd)
    elif cmd:
        raise SlurmtopoError("give the command either with --wrap or after --, not both")
    elif not str(wrap).strip():
        raise SlurmtopoError("--wrap: the command is empty")
    else:
        command = ("/bin/sh", "-c", str(wrap))
    # a launcher in the command (deepspeed, torchrun under --launcher srun)
    # is refused before the layout or the inventory is read
    launch_from(**o).for_command(command)
    return command


def job_name_from(o: Mapping) -> Optional[str]:
    """``--job-name``, else sbatch's name for a ``--wrap`` job."""
    if o.get("job_name") is None and o.get("wrap") is not None:
        return WRAP_JOB_NAME
    return o.get("job_name")


def parse_message_bytes(items: Sequence[str]) -> Dict[str, int]:
    """``dp=1GiB`` items -> {kind: bytes} (units as the cost model reads them)."""
    out: Dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SlurmtopoError(f"--message-bytes {item!r}: expected KIND=SIZE, e.g. dp=256MiB")
        try:
            out[key.strip()] = parse_bytes(value)
        except ValueError as exc:
            raise SlurmtopoError(f"--message-bytes {item!r}: bad size ({exc})") from None
    return out


def spec_from(o: Mapping, wait: Optional[Mapping[str, float]] = None, command=()):
    """The JobSpec (:func:`slurmtopo.api.job_spec`) for the layout and
    request options in ``o``: the framework's settings from its ``--config``
    file (read once) and the options given over them, the world size of a
    ``torchrun --nnodes --nproc-per-node`` ``command`` when nothing else
    gives it, ``--require``/``--prefer`` in the framework's kind names."""
    fw = registry.get(o.get("framework") or registry.DEFAULT_FRAMEWORK)
    config = api.framework_config(fw, o["config"]) if o.get("config") is not None else None
    knobs = framework_knobs(fw, {k: o.get(k) for k in LAYOUT_PARAMS + framework_params()},
                            config)
    if knobs.get("world") is None and not fw.sizes_world(knobs):
        # the ranks a `torchrun --nnodes N --nproc-per-node K` command starts
        knobs["world"] = world_from_command(command)
    kind_of = None if fw.planner_kinds else (lambda k: str(k).strip())
    return api.job_spec(fw, config=config,
                        require=parse_pairs(o["require"], "require", kind_of),
                        prefer=parse_pairs(o["prefer"], "prefer", kind_of),
                        gpus_per_node=o["gpus_per_node"], exclusive=o["exclusive"],
                        nodelist=o["nodelist"], exclude=o["exclude"],
                        message_bytes=parse_message_bytes(o["message_bytes"]),
                        wait=dict(wait or {}), model=o.get("model"),
                        nccl_version=o.get("nccl_version"), **knobs)


def script_options_from(o: Mapping, inventory_path: Optional[str] = None,
                        run_dir: Optional[str] = None):
    """The api.ScriptOptions for the script options in ``o``."""
    sw = o["switch_wait"]
    sb_options, requeue = options_from(**o)
    return api.ScriptOptions(
        job_name=job_name_from(o), partition=o["partition"], time=o["time_limit"],
        account=o["account"], topology=o["topology_request"],
        switch_wait=api.DEFAULT_SWITCH_WAIT if sw is None else (None if sw in ("0", "") else sw),
        extra=tuple(o["extra_sbatch"]), python=o["python"], cgroup_devices=o["cgroup_devices"],
        master_port=o["master_port"], socket_ifname=o["socket_ifname"], run_dir=run_dir,
        inventory_path=inventory_path, launch=launch_from(**o), options=tuple(sb_options),
        requeue=requeue, slurm=slurm_features(o), hazards=hazard_policy_items(o),
        nccl_version=nccl_version(o.get("nccl_version"), {}),
        nccl_version_env=nccl_version(None, os.environ), spares=int(o.get("spares") or 0),
        check=o.get("check"))


def hazard_policy_items(o: Mapping) -> Tuple[str, ...]:
    """The hazard policy: a site's ``SLURMTOPO_HAZARDS`` (``KIND=LEVEL``
    items, comma-separated: /etc/profile.d sets it for every user), then
    ``--hazard`` options, which win (docs/hazards.md)."""
    site = tuple(x.strip() for x in os.environ.get("SLURMTOPO_HAZARDS", "").split(",")
                 if x.strip())
    HazardPolicy.parse(site, "SLURMTOPO_HAZARDS")
    return site + tuple(o.get("hazards") or ())


def slurm_features(o: Mapping, version: Optional[str] = None):
    """What the cluster's Slurm can be asked (``--slurm-version``, else
    ``version``; SwitchType from ``--slurm-conf`` or the default slurm.conf
    when there is one): a placement.segments.SlurmFeatures."""
    text = o.get("slurm_version") or version
    given = o.get("slurm_conf")
    conf = given or next((c for c in (os.environ.get("SLURM_CONF"), "/etc/slurm/slurm.conf")
                          if c and os.path.isfile(c)), None)
    switch = None
    if conf:
        try:
            switch = read_slurm_conf(conf).switch_type
        except SlurmtopoError:
            if given:  # the user's file: its error is theirs to see
                raise
            # the site's default slurm.conf only tells the IMEX switch; a file
            # slurmtopo cannot read must not stop a plan that never needed it
    try:
        version = parse_slurm_version(text) if text else None
    except ValueError as exc:
        raise SlurmtopoError(f"--slurm-version: {exc}") from None
    return SlurmFeatures.of(version, switch)


def launch_from(launcher=None, torchrun_cmd=None, container_image=None,
                container_mounts=None, container_workdir=None, apptainer_image=None, **_ignored):
    """The Launch for these option values (``launcher`` None: not given,
    the default or the command's own torchrun)."""
    return Launch(launcher=launcher or launchers.DEFAULT, torchrun=torchrun_cmd,
                  container_image=container_image, container_mounts=container_mounts,
                  container_workdir=container_workdir, apptainer=apptainer_image,
                  chosen=launcher is not None)


def check_color_by(color_by: Optional[str], placement) -> None:
    """A ``--color-by`` that names no group kind of the planned layout is a
    typo: refused before anything is written, instead of a grid silently
    left uncoloured under the caption "colour = <typo> group"."""
    if color_by is not None and color_by not in placement.groups:
        raise SlurmtopoError(f"--color-by {color_by!r}: not a group kind of this layout "
                             f"(one of {', '.join(placement.groups)})")
