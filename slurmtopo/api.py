"""The use cases, as the public Python API: load a cluster, prepare a job,
submit it.

Everything slurmtopo does for a job runs through here, in one order::

    cluster = load_cluster("cluster.yaml")            # read and validate once
    job = prepare(cluster, state, request, command)    # plan, cost, script
    submit(job, backend)                               # sbatch (or held, for the daemon)

``slurmtopo plan`` and ``slurmtopo sbatch`` only turn their options into a
:class:`~slurmtopo.job.spec.JobSpec` (:func:`job_spec`: the framework, its
layout, the planner's request) and a :class:`ScriptOptions`, call
:func:`prepare`, and show or write its result (the plan's documents:
``PreparedJob.documents``); the placement daemon loads
its inventory with :func:`load_cluster` (from :mod:`slurmtopo.plan.cluster`,
below the daemon and this module) and prices placements with
:func:`slurmtopo.cost.step.price_step`, as :func:`price_step` here does.
A notebook or a launcher library calls the same three functions
(docs/api.md has a runnable example).

The admin's use cases are exported here too (:data:`ADMIN`, from
:mod:`slurmtopo.api_admin`): Slurm's topology and gres files generated,
checked and published, node reports collected and compiled, NCCL topology
files written; ``slurmtopo topology``, ``gres``, ``collect``, ``inventory``
and ``nccl-topo`` call them, and so can a site's own tooling.

Nothing here parses command-line options or prints; Slurm is reached only
through the backend passed to :func:`submit`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, List, Mapping, Optional, Sequence, Tuple, Union

from slurmtopo.cost import cost_params, evaluate, lower_bound
from slurmtopo.cost import step as cost_step
from slurmtopo.cost.memory import memory_finding, memory_of_request
from slurmtopo.cost.hf_config import hf_model_keys
from slurmtopo.cost.model_spec import (ModelSpec, model_from_mapping, model_pairs,
                                       model_with_config, parse_model)
from slurmtopo.cost.report import CostReport
from slurmtopo.errors import LayoutError, NotNowError, PlacementError, SlurmError, SlurmtopoError
from slurmtopo.files.fileio import read_text
from slurmtopo.files.rundirs import (DEFAULT_KEEP_DAYS, check_location, clean_old, run_dir_for,
                                     save_script)
from slurmtopo.inventory.model import ClusterState, Inventory, Placement
from slurmtopo.inventory.state import load_state
from slurmtopo.inventory.topology import made_from
from slurmtopo.job.frameworks import registry
from slurmtopo.job.request import JobRequest
from slurmtopo.job.spec import FrameworkConfig, JobSpec, build_spec
from slurmtopo.job.workload import parse_nccl_version
from slurmtopo.placement import naive_plan
from slurmtopo.placement.queue import (eligible_state, fits_ever, plan_for_queue,
                                       shape_for_preferences)
from slurmtopo.placement.spares import choose_spares
from slurmtopo.plan import choice
from slurmtopo.plan.cluster import load_cluster  # noqa: F401  (the api's, kept below it)
from slurmtopo.plan.hazards import HazardPolicy, HazardReport, check_hazards, nccl_version
from slurmtopo.plan.rankmap import RankDocuments
from slurmtopo.sbatch import SbatchRequest, sanitize_job_name
from slurmtopo.sbatch.launch import Launch
from slurmtopo.sbatch.options import DEFAULT_SWITCH_WAIT, ScriptOptions

__all__ = ["DEFAULT_SWITCH_WAIT", "ScriptOptions", "Costs", "PreparedJob", "SubmittedJob",
           "LiveState", "load_cluster", "cluster_for_partition", "load_state_file",
           "live_state", "live_topology", "segment_release", "framework_config", "job_spec",
           "job_request",
           "step_communication", "plan_job", "default_placement", "price", "price_step",
           "step_time", "prepare",
           "job_hazards", "request_for_launcher", "submission_notes", "submit"]

#: the admin's use cases (slurmtopo.api_admin), exported here as well
ADMIN = ("GeneratedFile", "FileCheck", "UnreadableFile", "CollectedReports",
         "CompiledInventory", "NcclTopologyFile", "generate_topology", "generate_gres",
         "publish_file", "check_topology", "check_gres", "collect_reports",
         "compile_inventory", "nccl_topology_files")


def __getattr__(name: str):
    """``api.generate_topology`` and the admin's other use cases, loaded on
    first use: `slurmtopo plan` imports this module, and the admin side
    (the ibnetdiscover reader, the topology and gres writers, the
    collector, the NCCL XML reader) would add about 100 ms to its start."""
    if name in ADMIN:
        # lazy: the admin's side: 127 modules, 92 ms measured on `plan`'s path
        from slurmtopo import api_admin

        return getattr(api_admin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Costs:
    """The modelled step time of the plan and of Slurm's default placement
    (``naive`` is None when there is no default placement to compare with)."""

    plan: CostReport
    naive: Optional[CostReport] = None
    #: cost.lower_bound on the free GPUs: what no placement can beat now
    bound: Optional[CostReport] = None
    #: the same bound on an idle cluster (``bound`` itself when nothing is
    #: busy): how much of the gap the running jobs make
    idle_bound: Optional[CostReport] = None


@dataclass(frozen=True)
class PreparedJob:
    """A planned job, ready to show, write or submit."""

    cluster: Inventory
    state: ClusterState
    #: the planner's request (the spec's, as the command's own launcher
    #: adopted it)
    request: JobRequest
    placement: Placement
    #: None when :func:`prepare` was asked not to price the plan
    costs: Optional[Costs]
    #: the batch script as data (None without a command)
    script: Optional[SbatchRequest]
    #: the rendered script (None without a command)
    script_text: Optional[str]
    #: what the user should know (names sanitised, placements relaxed, ...)
    notes: Tuple[str, ...] = ()
    options: ScriptOptions = ScriptOptions()
    #: the pre-launch hazards found on the placement (slurmtopo.plan.hazards);
    #: errors have already refused the job, the warnings are in ``notes``
    hazards: Optional[HazardReport] = None
    #: the spare nodes asked for besides the planned ones (``--spares``;
    #: a placement.spares.SpareChoice), None without
    spares: Optional[object] = None
    #: the job as given (None: :func:`prepare` was handed a bare request)
    spec: Optional[JobSpec] = None

    @cached_property
    def documents(self) -> RankDocuments:
        """The plan's documents for its ranks (rankmap.json, rankmap.csv,
        env.json and the rank map as data), each rendered when first asked."""
        framework = self.spec.framework_groups if self.spec is not None else None
        return RankDocuments(self.placement, self.request.layout, self.cluster, framework,
                             self.options.master_port or "20000 + SLURM_JOB_ID % 10000",
                             self.options.socket_ifname)


@dataclass(frozen=True)
class SubmittedJob:
    job_id: int
    held: bool
    notes: Tuple[str, ...] = field(default_factory=tuple)
    #: the job's run directory (None: :func:`submit` was not asked to keep one)
    run_dir: Optional[str] = None
    #: the kept copy of the batch script (None: not kept, see ``notes``)
    script_path: Optional[str] = None


@dataclass(frozen=True)
class LiveState:
    """What Slurm says about the cluster now, as the planner needs it."""

    state: ClusterState
    #: where it came from, for the user ("live Slurm state (cli backend)")
    source: str
    #: the nodes of the job's partition (None: all nodes, or the partition
    #: is unknown, which Slurm refuses in its own words at submission)
    partition_members: Optional[Tuple[str, ...]] = None
    #: node -> Slurm's features of it
    features: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)


def live_state(cluster: Inventory, backend, partition: Optional[str] = None) -> LiveState:
    """The cluster's state as ``backend`` (a
    :class:`slurmtopo.slurm.SlurmBackend`) reports it: busy nodes and GPUs,
    the members of ``partition`` and every node's features."""
    # lazy: only --state live asks Slurm: the backends (slurmtopo.slurm, 7 modules) add 4.3 ms
    #   measured to `plan --state none`'s path
    from slurmtopo.slurm.backend import cluster_state_from

    slurm_nodes = backend.nodes()
    state = cluster_state_from(slurm_nodes, cluster, source=f"slurm:{backend.name}")
    members = None
    if partition:
        members = tuple(n.name for n in slurm_nodes if partition in n.partitions) or None
    return LiveState(state=state, source=f"live Slurm state ({backend.name} backend)",
                     partition_members=members,
                     features={n.name: tuple(n.features) for n in slurm_nodes})


def live_topology(cluster: Inventory, backend) -> Tuple[Inventory, Tuple[str, ...]]:
    """The cluster with Slurm's own topology (``scontrol show topology``
    through ``backend``) when its inventory has no fabric, and the note
    saying which the plan uses; the cluster unchanged (no note) when the
    inventory has a fabric: the admin's inventory is the authority, Slurm
    only the fallback. Nodes Slurm lists that the inventory lacks are
    dropped (:func:`slurmtopo.slurmfmt.topology_files.apply_fabric`)."""
    f = cluster.fabric
    if f.switches or f.blocks or f.rings or f.toruses:
        return cluster, ()
    # lazy: only an inventory without a fabric asks Slurm for its topology: the backends
    #   (4.3 ms) and the topology files' readers (PyYAML: 10 ms) measured on `plan`'s path
    from slurmtopo.slurm.topology import fabric_from_scontrol_topology
    from slurmtopo.slurmfmt.topology_files import apply_fabric

    try:
        fabric = fabric_from_scontrol_topology(backend.topology_text())
    except SlurmError as exc:
        return cluster, (f"the inventory has no fabric and Slurm's topology could not be read "
                         f"({exc.render()}): planned as if every node shared one switch",)
    seen = apply_fabric(cluster, fabric, "scontrol show topology", whole=True)
    if not (seen.fabric.switches or seen.fabric.blocks):
        return cluster, ("the inventory has no fabric and Slurm reports no topology for its "
                         "nodes: planned as if every node shared one switch",)
    what = (f"{len(seen.fabric.switches)} switch(es)" if seen.fabric.switches else
            f"{sum(1 for b in seen.fabric.blocks if b.nodes)} block(s)")
    return seen, (f"the inventory has no fabric: planned on Slurm's live topology "
                  f"(scontrol show topology: {what}); `slurmtopo topology generate --format "
                  "fabric` writes one into the inventory",)


def segment_release(cluster: Inventory, backend_of: Callable[[], object]) -> Optional[str]:
    """The Slurm release to choose a job's segment options for
    (:mod:`slurmtopo.placement.segments`): what ``backend_of()`` (a
    :class:`slurmtopo.slurm.SlurmBackend`, made only when asked) reports,
    for a cluster with topology/block segments; None for one without (its
    jobs ask for no segment, so Slurm is not asked) or when Slurm cannot
    say (then the options of current releases are used)."""
    if not cluster.fabric.blocks:
        return None

    backend = backend_of()
    try:
        text = backend.version() if hasattr(backend, "version") else ""
    except SlurmError:
        return None
    parts = str(text).split(".")
    return text if 2 <= len(parts) <= 3 and all(p.isdigit() for p in parts) else None


def cluster_for_partition(cluster: Inventory, slurm_topology: Optional[str],
                          partition: Optional[str] = None,
                          slurm_conf: Optional[str] = None) -> Tuple[Inventory, Tuple[str, ...]]:
    """The cluster as the job's partition sees it: with ``slurm_topology``
    (a site's topology.conf or 25.05+ topology.yaml), the switches and blocks
    of the topology that partition uses (its ``Topology=`` in
    ``slurm_conf``, else the cluster default) replace the inventory's, so a
    job on a block partition asks for ``--segment`` and a job on a tree
    partition for ``--switches``. Returns (cluster, notes)."""
    if not slurm_topology:
        return cluster, ()
    # lazy: Slurm's files are read through PyYAML (topology.yaml): 10 ms and 28 modules
    #   measured on `plan`'s path, which loads them only with --slurm-topology
    from slurmtopo.slurmfmt import slurm_conf as conf_file, topology_files

    wanted = (conf_file.read_slurm_conf(slurm_conf).partition_topology(partition)
              if slurm_conf else None)
    name, fabric = topology_files.read_one_topology(slurm_topology, wanted)
    seen = topology_files.apply_fabric(cluster, fabric, whole=True)
    kind = "block" if seen.fabric.blocks else (
        made_from(seen.fabric) or ("tree" if seen.fabric.switches else "flat"))
    where = f"partition {partition}" if partition else "the default partition"
    return seen, (f"{where} uses Slurm topology {name!r} ({kind}) of {slurm_topology}",)


def load_state_file(cluster: Inventory, path: Optional[str]) -> ClusterState:
    """A state snapshot (``None``: every node idle)."""
    if not path:
        return ClusterState()
    return load_state(path, cluster)


#: the most bytes of a Hugging Face config.json ``--model`` reads
HF_CONFIG_LIMIT = 1 << 20


def model_spec(text: str) -> ModelSpec:
    """``--model``'s text as a model: a preset, changed or not
    (``llama3-70b,seq_len=8192``), explicit keys, or the path of a Hugging
    Face ``config.json`` (its name ends in ``.json``), changed like a
    preset (``config.json,seq_len=8192,micro_batch=2``;
    :mod:`slurmtopo.cost.hf_config`). The file is read here, at most
    :data:`HF_CONFIG_LIMIT` bytes, by the user's own command: the daemon
    and the simulator take models as keys, never as paths. Raises
    LayoutError, or InventoryError for a file that cannot be read."""
    path = _config_path(text)
    if path is None:
        return parse_model(text)
    given = model_pairs([p.strip() for p in str(text).split(",")[1:] if p.strip()])
    keys = hf_model_keys(read_text(path, limit=HF_CONFIG_LIMIT), path, given)
    spec = model_from_mapping(keys, path)
    return model_from_mapping(given, "--model", spec) if given else spec


def framework_config(framework, path: str) -> FrameworkConfig:
    """``framework``'s own configuration file at ``path`` (``--config``),
    read once (at most 1 MiB); its parts are parsed when first asked."""
    fw = registry.get(framework)
    return FrameworkConfig(fw, read_text(path, limit=1 << 20), path)


def job_spec(framework=registry.DEFAULT_FRAMEWORK, *, config=None,
             require: Optional[Mapping[str, str]] = None,
             prefer: Optional[Mapping[str, str]] = None,
             message_bytes: Optional[Mapping[str, int]] = None,
             wait: Optional[Mapping[str, float]] = None, gpus_per_node: Optional[int] = None,
             exclusive: bool = False, nodelist=None, exclude=(), model=None,
             nccl_version=None, overlaps: Optional[Mapping[str, bool]] = None,
             **knobs) -> JobSpec:
    """The job laid out by ``framework`` (a name or a registered
    Framework) with its own settings (``knobs``: ``dp_replicate=2,
    dp_shard=-1, world=16`` for torchtitan, ``zero_stage=3`` for DeepSpeed
    ...; None means the framework's default), resolved once into a
    :class:`~slurmtopo.job.spec.JobSpec` (:func:`slurmtopo.job.spec.build_spec`)
    that :func:`prepare` takes whole.

    ``config``: the framework's own configuration file (a path, or a
    :class:`~slurmtopo.job.spec.FrameworkConfig` from :func:`framework_config`):
    its settings under ``knobs`` (a knob given wins), the model it
    describes under ``model``'s keys, the overlaps it turns on under
    ``overlaps``.

    The request's ``workload`` is the step the framework runs (its
    data-parallel style) for ``model`` (a ``--model`` text such as ``70b``
    or ``params=7e9,layers=32,hidden=4096``, or a ModelSpec; None: the
    default model), which every price of the job uses, with the NCCL
    release it loads (``nccl_version``: ``2.27.7``; None: the inventory's
    ``cost: nccl_version``, else the newest the cost model knows), and the
    overlaps the framework is set to make (``overlaps``: Workload fields
    such as ``tp_comm_overlap=True``).

    ``require``, ``prefer``, ``message_bytes`` and ``wait`` may name group
    kinds by the framework's names (``dp_shard``, ``data_parallel``); the
    planner gets the Megatron layout that numbers the ranks as the framework
    does, and the preferences of the framework's data-parallel style (a
    FSDP shard group or a ZeRO-3 data-parallel group inside NVLink) unless
    the job says otherwise. Raises LayoutError for a layout the framework
    refuses, with its reason."""
    fw = registry.get(framework)
    if isinstance(config, str):
        config = framework_config(fw, config)
    if config is not None:
        knobs = {**config.knobs, **{k: v for k, v in knobs.items() if v is not None}}
    if isinstance(model, str) or (config is not None and model is None):
        model = (model_spec(model) if config is None or _config_path(model)
                 else model_with_config(model, config.model_keys, config.where))
    if config is not None:
        overlaps = {**config.overlaps, **(overlaps or {})}
    if nccl_version is not None and not isinstance(nccl_version, tuple):
        nccl_version = parse_nccl_version(nccl_version)
    return build_spec(fw, knobs, require=require, prefer=prefer, message_bytes=message_bytes,
                      wait=wait, gpus_per_node=gpus_per_node, exclusive=exclusive,
                      nodelist=nodelist, exclude=exclude, model=model,
                      nccl_version=nccl_version, overlaps=overlaps)


def _config_path(model: Optional[str]) -> Optional[str]:
    """The config.json path a ``--model`` text starts with, else None (a
    path wins over the model a framework configuration describes; a
    preset's name is merged with it)."""
    head = str(model or "").split(",", 1)[0].strip()
    return head if head and "=" not in head and head.lower().endswith(".json") else None


def job_request(framework=registry.DEFAULT_FRAMEWORK, **kwargs) -> JobRequest:
    """The planner's request of :func:`job_spec` (same arguments): what a
    caller that plans and prices, but writes no rank map, needs."""
    return job_spec(framework, **kwargs).request


def memory_check(job: "PreparedJob", policy: str) -> Optional[str]:
    """Does the job's model fit in the memory of its placement's GPUs
    (:func:`slurmtopo.cost.memory.memory_of_request`)? ``policy``:
    ``error`` raises LayoutError when it does not, ``warn`` returns the
    warning, ``off`` says nothing (docs/cost-model.md, "Memory per GPU").
    Nothing is checked for a job that describes no model."""
    return memory_finding(memory_of_request(job.cluster, job.placement, job.request), policy)


def step_communication(cluster: Inventory, placement: Placement, model: str,
                       framework: str = registry.DEFAULT_FRAMEWORK, **knobs):
    """One training step of ``placement`` for ``model`` (a ``--model``
    text: ``70b``, ``params=7e9,layers=32,hidden=4096``), per the
    framework's data-parallel style: :func:`price_step` of the request
    :func:`job_request` makes of them (a
    :class:`slurmtopo.cost.step.StepPrice`)."""
    req = job_request(framework, model=model, **knobs)
    return price_step(cluster, placement, req)


def price_step(cluster: Inventory, placement: Placement, request: JobRequest, params=None):
    """One training step of ``request`` on ``placement``: every collective
    its framework runs, priced (:func:`slurmtopo.cost.step.price_step`, the
    number the planner, the daemon, ``simulate`` and ``audit`` use)."""
    return cost_step.price_step(cluster, placement, request, params)


def step_time(cluster: Inventory, placement: Placement, request: JobRequest,
              params=None) -> float:
    """Seconds of :func:`price_step` (its ``time_s``)."""
    return price_step(cluster, placement, request, params).time_s


def default_placement(cluster: Inventory, request: JobRequest,
                      state: Optional[ClusterState] = None) -> Placement:
    """Where Slurm's default placement puts the job (nodes in hostname
    order, ranks in block order): what the preview compares the plan with.
    Raises PlacementError where it cannot."""
    return naive_plan(cluster, state, request)


def plan_job(cluster: Inventory, state: Optional[ClusterState], request: JobRequest) -> Placement:
    """The topology-aware placement (raises PlacementError)."""
    return choice.plan(cluster, state, request)


def price(cluster: Inventory, placement: Placement, request: JobRequest):
    """The cost model's report for ``placement`` (a CostReport)."""
    return evaluate(cluster, placement, request, cost_params(cluster))


def prepare(cluster: Inventory, state: Optional[ClusterState], job: Union[JobSpec, JobRequest],
            command: Sequence[str] = (), options: ScriptOptions = ScriptOptions(), *,
            with_costs: bool = True, queue: bool = False, for_daemon: bool = False,
            partition_members: Optional[Sequence[str]] = None,
            features: Optional[Mapping[str, Sequence[str]]] = None) -> PreparedJob:
    """Plan ``job`` (a :class:`~slurmtopo.job.spec.JobSpec` from
    :func:`job_spec`, or the planner's JobRequest alone) on ``cluster``
    around ``state``, price it against Slurm's default placement, and write
    the batch script for ``command``. The result holds the spec and the
    plan's documents for its ranks (``documents``: rankmap.json,
    rankmap.csv, env.json), each rendered when first asked.

    Only eligible nodes are planned on: ``partition_members`` (None: all)
    and those matching the options' ``--constraint`` (inventory features,
    plus Slurm's ``features`` per node). ``queue``: when nothing fits now,
    plan on the nodes that could run it (Slurm queues the job; the
    start-time step re-plans) and say so in a note; without it, fail with
    "not now" or "never" in the message. Either way a job that can never run
    raises PlacementError worded "never". Raises LayoutError or
    SlurmtopoError (a bad job name, time, partition) before anything is
    written or submitted.
    """
    spec = job if isinstance(job, JobSpec) else None
    request = spec.request if spec is not None else job
    state = state if state is not None else ClusterState()
    if options.job_name is not None:  # cheap checks before the planner
        sanitize_job_name(options.job_name)
    HazardPolicy.parse(options.hazards)
    state, elig_notes = eligible_state(cluster, state, partition_members, options.constraint,
                                       features)
    # a launcher the command starts itself: its torchrun adopted (its
    # --nnodes/--nproc-per-node become the request's), any other refused
    launch_notes: List[str] = []
    if command:
        launch = (options.launch or Launch()).for_command(command)
        if launch.adopted is not None:
            request = request_for_launcher(request, launch.adopted)
            spec = replace(spec, request=request) if spec is not None else None
            options = replace(options, launch=launch)
            launch_notes = list(launch.adopted.notes)
    # the launcher's requirement (torchrun: node-contiguous ranks) is part
    # of the choice between the planner's proposals, not a refusal after it
    admit = options.launch.requirement if options.launch is not None else None

    def planner(c: Inventory, s: ClusterState, r: JobRequest) -> Placement:
        return choice.plan(c, s, r, admit=admit)
    notes = list(elig_notes) + launch_notes
    busy_note = None
    naive: Optional[Placement] = None  # Slurm's default, when the planner built it
    if queue:
        queued = plan_for_queue(cluster, state, request, planner)
        placement, busy_note = queued.placement, queued.note
        if for_daemon:
            placement, pref_notes = shape_for_preferences(cluster, state, request, placement,
                                                          planner)
            notes.extend(pref_notes)
    else:
        try:
            placement, naive = choice.plan_and_default(cluster, state, request, admit=admit)
        except PlacementError as exc:
            never = fits_ever(cluster, state, request, planner)
            if never is not None:
                raise PlacementError(f"never: this job cannot run here even with every "
                                     f"eligible node idle: {never}") from None
            raise NotNowError(f"not now: {exc.message} (it fits once running jobs end: "
                                 "`slurmtopo sbatch` plans it on the nodes that could run it "
                                 "and Slurm queues it)") from None
    hazards = job_hazards(cluster, placement, options)
    hazards.raise_for_errors()  # before anything is priced, written or submitted
    notes.extend(h.line() for h in hazards.warnings)
    spares = None
    if options.spares:
        spares = choose_spares(cluster, state, placement, options.spares,
                               queued=busy_note is not None)
        notes.extend(spares.notes)
    costs = None
    if with_costs:
        try:
            naive = naive if naive is not None else naive_plan(cluster, state, request)
        except PlacementError as exc:
            naive = None
            notes.append(f"no naive placement to compare with: {exc.render()}")
        params = cost_params(cluster)
        bound = lower_bound(cluster, request, params, state=state)
        idle = bound if state is None or not state.nodes else \
            lower_bound(cluster, request, params)
        costs = Costs(plan=price(cluster, placement, request),
                      naive=price(cluster, naive, request) if naive is not None else None,
                      bound=bound, idle_bound=idle)
    script = text = None
    if command:
        script = SbatchRequest.from_plan(
            cluster, placement, request.layout, command, request, options,
            exclusive=request.exclusive, spares=spares,
            inventory_path=options.inventory_path or _source_path(cluster))
        text = script.render()  # validates before anything is written
        notes.extend(script.notes)
    if busy_note:
        notes.append(busy_note)
    return PreparedJob(cluster=cluster, state=state, request=request, placement=placement,
                       costs=costs, script=script, script_text=text, notes=tuple(notes),
                       options=options, hazards=hazards, spares=spares, spec=spec)


def job_hazards(cluster: Inventory, placement: Placement,
                options: ScriptOptions = ScriptOptions()) -> HazardReport:
    """The pre-launch hazards of ``placement`` under the options' policy
    and NCCL release (:func:`slurmtopo.plan.hazards.check_hazards`, docs/hazards.md)."""
    version = nccl_version(options.nccl_version or options.nccl_version_env, {}, cluster)
    return check_hazards(cluster, placement, nccl_version=version,
                         policy=HazardPolicy.parse(options.hazards))


def request_for_launcher(request: JobRequest, adoption) -> JobRequest:
    """``request`` as the command's own torchrun (a
    :class:`slurmtopo.plan.launch_detect.Adoption`) asks: its ``--nproc-per-node``
    the GPUs of every node, its ``--nnodes`` times that the world size.
    A layout or ``gpus_per_node`` that says otherwise is refused here,
    before the planner runs, naming both."""
    world = request.layout.world
    if adoption.world is not None and adoption.world != world:
        raise LayoutError(
            f"the command's torchrun starts {adoption.nnodes[0]} node(s) x "
            f"{adoption.nproc_per_node} = {adoption.world} ranks, the layout has {world}: give "
            f"--world {adoption.world} (or a layout of that size), or leave --nnodes and "
            "--nproc-per-node out of the command (slurmtopo sets them from the plan)")
    per_node = adoption.gpus_per_node(world)
    if per_node is None:
        return request
    if request.gpus_per_node not in (None, per_node):
        raise LayoutError(
            f"--gpus-per-node {request.gpus_per_node} and the command's torchrun "
            f"(--nproc-per-node {per_node}) disagree: give one of them")
    if world % per_node:
        raise LayoutError(f"the command's torchrun runs {per_node} rank(s) per node, which "
                          f"does not divide the layout's {world} ranks")
    return replace(request, gpus_per_node=per_node)


def submission_notes(prepared: PreparedJob, held: bool = False,
                     spool: Optional[str] = None) -> List[str]:
    """What the user should know about submitting ``prepared`` (``held``:
    for the placement daemon, whose spool is ``spool``, None: the default
    one) beyond the job's own notes: who releases a job that does not fit
    now, a ``wait`` that only the daemon reads, and no daemon holding the
    spool (the job would stay held)."""
    notes: List[str] = []
    if held and any(n.startswith("not now") for n in prepared.notes):
        notes.append("the placement daemon releases it when a placement is free")
    if prepared.request.wait and not held:
        notes.append("--wait only matters with --daemon (the placement daemon waits; sbatch "
                     "does not)")
    if held:
        try:
            # lazy: the daemon package may be absent here (the except below says so)
            from slurmtopo.daemon.submit import no_daemon_warnings
        except ImportError:  # no daemon package: submit() says so
            return notes
        notes.extend(no_daemon_warnings(spool))
    return notes


def submit(prepared: PreparedJob, backend, held: bool = False,
           spool: Optional[str] = None, *, submit_dir: Optional[str] = None,
           keep_days: float = DEFAULT_KEEP_DAYS) -> SubmittedJob:
    """Submit the prepared script through ``backend`` (a
    :class:`slurmtopo.slurm.SlurmBackend`). ``held``: submit it held and
    tagged for the placement daemon, which picks the nodes and releases it
    (``spool``: the daemon's spool directory, for requests too long for a
    job comment). Slurm's refusal is a SlurmError with Slurm's own words.

    ``submit_dir`` (the job's submit directory, as sbatch sees it): keep
    the job's run directory as ``slurmtopo sbatch`` does. Its place (the
    options' ``run_dir``, else $SLURMTOPO_RUN_DIR, else ``<submit_dir>/
    .slurmtopo/runs``) must be the user's own before the job exists (a
    refusal submits nothing; docs/security.md); after submission the
    script is kept there (so ``slurmtopo show`` finds the plan after Slurm
    forgets the job) and run directories untouched for ``keep_days`` are
    removed. A failure after submission is a note, never a failed
    submission. A container option the cluster's srun lacks (no pyxis)
    is refused first (:meth:`slurmtopo.sbatch.launch.Launch.check_srun`)."""
    if prepared.script_text is None:
        raise SlurmtopoError("nothing to submit: the job was prepared without a command")
    if prepared.options.launch is not None and prepared.options.launch.srun_options():
        # pyxis missing: refused here rather than by srun once the job runs
        prepared.options.launch.check_srun(backend.srun_options())
    run_dir = prepared.options.run_dir
    if submit_dir is not None:
        # SLURMTOPO_RUN_DIR travels into the job (sbatch exports the
        # environment) and wins there
        undo = check_location(run_dir or os.environ.get("SLURMTOPO_RUN_DIR") or None,
                              submit_dir)
        try:
            done = _submit(prepared, backend, held, spool)
        except BaseException:
            undo()  # no job: no empty .slurmtopo/runs left behind
            raise
    else:
        done = _submit(prepared, backend, held, spool)
    if submit_dir is None:
        return done
    notes = list(done.notes)
    where, path = _keep_run_dir(done.job_id, run_dir, submit_dir, prepared.script_text,
                                keep_days, notes, backend)
    return SubmittedJob(job_id=done.job_id, held=done.held, notes=tuple(notes), run_dir=where,
                        script_path=path)


def _keep_run_dir(job_id: int, run_dir: Optional[str], submit_dir: str, text: str,
                  keep_days: float, notes: list, backend=None) -> Tuple[str, Optional[str]]:
    """Keep the submitted script in the job's run directory and remove the
    run directories of old jobs, never of a job Slurm still lists (a job
    running for weeks has files that look old, and its later `srun` steps
    and `slurmtopo show` need them): when Slurm cannot say which, nothing
    is removed. Returns (run dir, script path or None)."""
    where = os.path.abspath(run_dir) if run_dir else run_dir_for(submit_dir, job_id)
    path = None
    try:
        path = save_script(where, text)
    except (OSError, SlurmtopoError) as exc:
        notes.append(f"could not keep the script in {where} ({exc}); `slurmtopo show {job_id}` "
                     "will ask Slurm for it")
    try:
        removed = clean_old(submit_dir, keep_days, keep=(str(job_id),),
                            listed=(lambda: backend.job_ids(os.geteuid()))
                            if backend is not None else None)
    except SlurmtopoError as exc:
        removed = []
        notes.append(f"old run directories not removed: {exc.render()}")
    if removed:
        notes.append(f"removed {len(removed)} run director{'y' if len(removed) == 1 else 'ies'} "
                     f"older than {keep_days:g} days from {os.path.dirname(removed[0])}")
    return where, path


def _submit(prepared: PreparedJob, backend, held: bool, spool: Optional[str]) -> SubmittedJob:
    if not held:
        return SubmittedJob(job_id=int(backend.submit(prepared.script_text)), held=False)
    try:
        # lazy: the daemon package may be absent here (the except below says so)
        from slurmtopo.daemon.submit import submit_for_daemon
    except ImportError as exc:
        raise SlurmtopoError("--daemon needs the placement daemon (slurmtopo.daemon.submit), "
                             f"which this installation lacks ({exc}); submit without "
                             "--daemon") from None

    notes: list = []
    launch = prepared.options.launch
    o = prepared.options
    job_id = submit_for_daemon(backend, prepared.request, prepared.script_text,
                               o.inventory_path or _source_path(prepared.cluster),
                               spool=spool, notes=notes,
                               launcher=launch.launcher if launch is not None else None,
                               hazards=o.hazards, nccl_version=o.nccl_version or o.nccl_version_env)
    return SubmittedJob(job_id=int(job_id), held=True, notes=tuple(notes))


def _source_path(cluster: Inventory) -> Optional[str]:
    src = cluster.source
    if not src or src.startswith("<"):
        return None
    return src
