"""The planning call of ``slurmtopo hooks plan`` and ``hooks check``
(:mod:`slurmtopo.commands.hooks` holds the commands and their protocol).

Apart from the commands' module because the two hooks need different
worlds: the planning call loads the api, the planner and the job's
options, while ``slurmtopo hooks task-prolog``, which Slurm runs for every
task of every job, loads none of them (commands/hooks.py imports this
module where a command plans, and only there).
"""
from __future__ import annotations

import json
import os
import shlex
import stat
from typing import Any, Dict, List, Optional, Tuple

import click

from slurmtopo import api
from slurmtopo.commands.directive import parse_directive
from slurmtopo.commands.job_options import (LIVE_STATES, LazyBackend, load_job_cluster,
                                            script_options_from, spec_from, state_for)
from slurmtopo.commands.sbatch import parse_wait
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_text
from slurmtopo.files.safedir import user_name
from slurmtopo.hooks.directive import DirectiveError, find_directive, header_problem
from slurmtopo.hooks.submit import (SubmitOptions, job_shape, option_changes, plan_inputs,
                                    script_launcher)
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.plan.planenv import plan_env_value
from slurmtopo.sbatch.directives import option_values, script_options


def plan_answer(options_json: str, kind: str,
                site: Dict[str, Any]) -> Tuple[List[Tuple[str, Optional[str]]], int]:
    """The planning call's answer for the job whose options are
    ``options_json``: the protocol's lines after its first (``set``, ``note``
    and ``done``; or one ``error`` or ``warning``) and the exit status (0
    planned or no directive, 2 the directive is wrong, 3 the job could not be
    planned). Anything but a SlurmtopoError propagates: the command turns it
    into a warning."""
    try:
        changes, notes = plan_hook(options_json, kind, site)
    except DirectiveError as exc:
        return [("error", exc.render())], 2
    except SlurmtopoError as exc:
        return [("warning", exc.render())], 3
    return ([("set", f"{k}\t{v}") for k, v in changes] + [("note", n) for n in notes]
            + [("done", None)]), 0


def plan_hook(options_json: str, kind: str, site: Dict[str, Any],
              environ=os.environ) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(option changes, notes) for the job whose options are
    ``options_json`` (cli_filter's ``slurm.json_cli_options``). ``site``:
    the hooks' configuration (inventory, state, backend, slurm_topology,
    slurm_conf, spool). Raises DirectiveError for a bad directive, any
    other SlurmtopoError when the job cannot be planned; returns ([], [])
    for a job without a directive."""
    opts = SubmitOptions.from_json(options_json, kind)
    script_text, name = None, "script"
    if kind == "sbatch" and opts.argv and opts.get("wrap") is None:
        name = opts.argv[0]
        try:
            script_text = read_text(name, limit=4 << 20)
        except (OSError, SlurmtopoError):
            script_text = None
        if script_text is not None:
            problem = header_problem(script_text, os.path.basename(name))
            if problem:
                raise DirectiveError(problem)
    directive = find_directive(script_text, environ, opts.get("comment"),
                               os.path.basename(name))
    if directive is None:
        return [], []
    parsed = parse_directive(directive)
    o = dict(parsed.values)
    if o.get("config"):
        o["config"] = own_file(o["config"], opts.get("chdir") or os.getcwd(),
                               directive.where("--config"))
    o.update(plan_inputs(opts))
    o.update(inventory_path=site["inventory"], slurm_topology=site.get("slurm_topology"),
             slurm_conf=site.get("slurm_conf"))
    world, per = job_shape(opts)
    if not {"world", "dp"} & parsed.given and world is not None:
        o["world"] = world  # the job's own shape (submitit, torchx) sizes the layout
    if "gpus_per_node" not in parsed.given and per is not None:
        o["gpus_per_node"] = per
    launcher = o.get("launcher") or "srun"
    if "launcher" not in parsed.given:
        texts = [t for t in (script_text, opts.get("wrap")) if t]
        if kind == "srun" and opts.argv:  # `srun torchrun ...` making its own job
            texts.append(shlex.join(opts.argv))
        launcher = script_launcher(texts) or "srun"
        o["launcher"] = launcher
    inv, topo_notes = load_job_cluster(o)
    backend = LazyBackend(site.get("backend") or "auto")
    state = site.get("state") or "live"
    live = state_for(inv, state, backend, o.get("partition"))
    if state in LIVE_STATES and not o.get("slurm_version"):
        o["slurm_version"] = api.segment_release(inv, backend.get)
    spec = spec_from(o, parse_wait(o.get("wait")), ())
    req = spec.request
    job = api.prepare(inv, live.state, spec, ("slurmtopo-hook",),
                      script_options_from(o, os.path.abspath(site["inventory"])),
                      with_costs=False, queue=True, for_daemon=bool(o.get("daemon")),
                      partition_members=live.partition_members, features=live.features or None)

    doc = json.loads(job.script.plan_json)
    try:
        value = plan_env_value(doc)
    except SlurmtopoError:  # the site's inventory path is read at start instead
        value = plan_env_value(dict(doc, inventory=None))
    comment = None
    if o.get("daemon"):
        comment = _daemon_tag(job.script, req, launcher, site.get("spool"), job.options)
    extra_env, tag_note = {}, []
    if site.get("tag_for_daemon") and comment is None:
        try:  # for job_submit.lua's hold_for_daemon (no spool file: a comment's worth)
            extra_env["SLURMTOPO_DAEMON_TAG"] = _daemon_tag(job.script, req, launcher, None,
                                                            job.options)
        except SlurmtopoError as exc:
            tag_note.append(f"warning: no request for the placement daemon: {exc.render()}")
    changes = option_changes(job.script, opts, launcher, value, comment, extra_env)
    p = job.placement
    asked = [f"--{k}={v}" for k, v in changes if k in ("switches", "segment")]
    notes = [f"planned {p.world_size} rank(s) on {len(p.hosts)} node(s) "
             f"{fold_hostlist(p.hosts)} against {live.source}"
             + (f", asking Slurm for {' '.join(asked)}" if asked else "")
             + (f" ({launcher}: one task per node)" if launcher == "torchrun" else "")
             + (", held for the placement daemon" if comment else "")]
    notes += [n for n in (*topo_notes, *job.notes, *tag_note)
              if n.startswith(("not now", "warning"))]
    return changes, notes


def _daemon_tag(script, req, launcher: str, spool: Optional[str], options=None) -> str:
    """The placement daemon's job comment for the planned ``script`` (the
    shape sbatch asks for, as slurmtopo sbatch --daemon tags it, with the
    hazard policy and NCCL release of ``options``, the job's ScriptOptions)."""
    # lazy: only a job for the placement daemon (--daemon, --tag-for-daemon) needs its
    #   protocol, which loads hashlib, hmac, socket and 8 daemon modules: 24 ms measured on
    #   top of `hooks plan`'s own
    from slurmtopo.daemon import jobhazards, protocol

    hazards = None
    if options is not None:
        hazards = jobhazards.JobHazards.of(options.hazards,
                                           options.nccl_version or options.nccl_version_env)
    shape = protocol.Shape(nodes=script.nodes, gpus_per_node=_int(script.gpus_per_node),
                           tasks_per_node=1 if launcher == "torchrun" else script.ntasks_per_node)
    return protocol.make_comment(req, shape, spool, launcher=launcher, hazards=hazards)


def own_file(path: str, cwd: str, where: str) -> str:
    """``path`` (relative to the job's working directory ``cwd``), absolute,
    when it is a regular file of the user's or root's that nobody else may
    write; else DirectiveError. A directive's file sets how the job is laid
    out: one another user can write would let them lay out this user's job."""
    full = os.path.normpath(os.path.join(cwd, path))
    try:
        st = os.stat(full)
    except OSError as exc:
        raise DirectiveError(f"{where}: {full}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DirectiveError(f"{where}: {full}: not a regular file")
    if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
        raise DirectiveError(f"{where}: {full}: {user_name(st.st_uid)}'s file, or one others "
                             "may write: a directive reads only your own files")
    return full


def _int(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    tail = str(text).rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def check_script(script: Optional[str], inventory: str, state_path: str, backend_name: str,
                 sbatch_args: Tuple[str, ...], as_json: bool) -> None:
    """``slurmtopo hooks check``: print what the planning call would do to
    ``script`` (None: a script on stdin or --wrap)."""
    text = read_text(script, limit=4 << 20) if script else ""
    values = option_values(script_options(text, sbatch_args))
    options: Dict[str, Any] = {k: ("exclusive" if k == "exclusive" else "set") if v is None
                               else v for k, v in values.items()}
    if not script:
        options.setdefault("wrap", "true")
    else:
        options["argv"] = [os.path.abspath(script)]
    changes, notes = plan_hook(json.dumps(options), "sbatch",
                               {"inventory": inventory, "state": state_path,
                                "backend": backend_name})
    shown = []
    for name, value in changes:
        if name == "export":
            head, _, plan = value.partition("SLURMTOPO_PLAN=")
            rest = plan.partition(",")[2]
            value = (f"{head}SLURMTOPO_PLAN=<the plan, {len(plan.partition(',')[0]):,} bytes>"
                     + (f",{rest}" if rest else ""))
        shown.append((name, value))
    if as_json:
        click.echo(json.dumps({"directive": bool(changes), "set": [list(c) for c in shown],
                               "notes": notes}, separators=(",", ":")))
        return
    if not changes:
        click.echo("no #SLURMTOPO directive: the hooks leave this job as it is")
        return
    for name, value in shown:
        click.echo(f"--{name}={value}" if value != name else f"--{name}")
    for note in notes:
        click.echo(f"slurmtopo: {note}", err=True)
