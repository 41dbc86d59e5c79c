"""``slurmtopo hooks``: what Slurm's hooks run (docs/admin.md, "Slurm hooks").

* ``slurmtopo hooks plan`` is the planning call of cli_filter.lua: for a
  job with a ``#SLURMTOPO`` directive it plans the job as ``slurmtopo
  sbatch`` would, and prints the sbatch options to set, one per line, for
  the Lua script to apply (:data:`PROTOCOL`);
* ``slurmtopo hooks task-prolog`` is TaskProlog's: the ``export`` lines of
  one task (:mod:`slurmtopo.hooks.taskprolog`);
* ``slurmtopo hooks check SCRIPT`` shows a user what the hook would do to
  a script, without submitting it.

The planning call never prints to stderr and never fails with a
traceback: every outcome is a line of its protocol on stdout and an exit
status (0 planned, 2 the directive is wrong, 3 the job could not be
planned and goes in unchanged), because it runs inside sbatch, where a
confused hook must never stop a submission.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import sys
from typing import Any, Dict, List, Optional, Tuple

import click

from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.errors import SlurmtopoError
from slurmtopo.plan.planenv import plan_env_value
from slurmtopo.show.termsafe import printable

#: the first line of the planning call's answer (its protocol's version);
#: then ``set<TAB>OPTION<TAB>VALUE``, ``note<TAB>TEXT``, and ``done``; or
#: ``error<TAB>TEXT`` (exit 2) / ``warning<TAB>TEXT`` (exit 3)
PROTOCOL = "slurmtopo-hook 1"
#: the planning call's default bound on itself (cli_filter.lua bounds the
#: process too, with timeout(1))
DEFAULT_DEADLINE = 5.0


@click.group("hooks", cls=SentenceGroup, context_settings={"help_option_names": ["-h", "--help"]})
def command():
    """Run what Slurm's cli_filter and TaskProlog hooks call."""


class _Late(Exception):
    """The planning call ran past its deadline."""


def _on_alarm(signum, frame):  # pragma: no cover - timing
    raise _Late()


def _clean(text: str) -> str:
    return " ".join(printable(str(text)).split())


def plan_hook(options_json: str, kind: str, site: Dict[str, Any],
              environ=os.environ) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(option changes, notes) for the job whose options are
    ``options_json`` (cli_filter's ``slurm.json_cli_options``). ``site``:
    the hooks' configuration (inventory, state, backend, slurm_topology,
    slurm_conf, spool). Raises DirectiveError for a bad directive, any
    other SlurmtopoError when the job cannot be planned; returns ([], [])
    for a job without a directive."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo import api
    from slurmtopo.commands.directive import parse_directive
    from slurmtopo.commands.job_options import (LIVE_STATES, LazyBackend, load_job_cluster,
                                                script_options_from, spec_from, state_for)
    from slurmtopo.commands.sbatch import parse_wait
    from slurmtopo.hooks.directive import find_directive, header_problem, DirectiveError
    from slurmtopo.hooks.submit import (SubmitOptions, job_shape, option_changes, plan_inputs,
                                        script_launcher)

    opts = SubmitOptions.from_json(options_json, kind)
    script_text, name = None, "script"
    if kind == "sbatch" and opts.argv and opts.get("wrap") is None:
        # lazy: off the path of `slurmtopo hooks task-prolog` (start-up time)
        from slurmtopo.files.fileio import read_text

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
        # lazy: off the path of `slurmtopo hooks task-prolog` (start-up time)
        import shlex

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
    # lazy: off the path of `slurmtopo hooks plan`, `hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.inventory.hostlist import fold_hostlist

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
    # lazy: off the path of `slurmtopo hooks plan`, `hooks task-prolog` (start-up time)
    from slurmtopo.daemon.jobhazards import JobHazards
    from slurmtopo.daemon.protocol import Shape, make_comment

    hazards = None
    if options is not None:
        hazards = JobHazards.of(options.hazards,
                                options.nccl_version or options.nccl_version_env)
    return make_comment(req, Shape(nodes=script.nodes, gpus_per_node=_int(script.gpus_per_node),
                                   tasks_per_node=1 if launcher == "torchrun"
                                   else script.ntasks_per_node),
                        spool, launcher=launcher, hazards=hazards)


def own_file(path: str, cwd: str, where: str) -> str:
    """``path`` (relative to the job's working directory ``cwd``), absolute,
    when it is a regular file of the user's or root's that nobody else may
    write; else DirectiveError. A directive's file sets how the job is laid
    out: one another user can write would let them lay out this user's job."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.hooks.directive import DirectiveError

    full = os.path.normpath(os.path.join(cwd, path))
    try:
        st = os.stat(full)
    except OSError as exc:
        raise DirectiveError(f"{where}: {full}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DirectiveError(f"{where}: {full}: not a regular file")
    if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
        # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
        from slurmtopo.files.safedir import user_name

        raise DirectiveError(f"{where}: {full}: {user_name(st.st_uid)}'s file, or one others "
                             "may write: a directive reads only your own files")
    return full


def _int(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    tail = str(text).rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


@command.command("plan")
@click.option("--inventory", required=True, metavar="PATH",
              help="The site's inventory (file or report directory).")
@click.option("--state", "state_path", default="live", show_default=True,
              metavar="live|none|FILE", help="Cluster state to plan against.")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--slurm-topology", default=None, metavar="FILE",
              help="Plan on the site's topology.conf/topology.yaml instead of the inventory's "
                   "fabric.")
@click.option("--slurm-conf", default=None, metavar="FILE",
              help="slurm.conf naming each partition's Topology=.")
@click.option("--spool", default=None, help="The placement daemon's spool directory.")
@click.option("--tag-for-daemon", is_flag=True,
              help="Put the placement daemon's request in the job's environment "
                   "(SLURMTOPO_DAEMON_TAG), for job_submit.lua's hold_for_daemon.")
@click.option("--options", "options_json", required=True, metavar="JSON",
              help="The job's options: cli_filter's slurm.json_cli_options(options).")
@click.option("--kind", type=click.Choice(["sbatch", "srun", "salloc"]), default="sbatch",
              show_default=True, help="Which command submits the job.")
@click.option("--deadline", type=click.FloatRange(0.1, 600), default=DEFAULT_DEADLINE,
              show_default=True, metavar="SECONDS",
              help="Give up (the job goes in unchanged) after this long.")
def plan_command(inventory, state_path, backend_name, slurm_topology, slurm_conf, spool,
                 tag_for_daemon, options_json, kind, deadline):
    """Plan a job with a #SLURMTOPO directive for cli_filter.lua (its protocol on stdout)."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.hooks.directive import DirectiveError

    site = {"inventory": inventory, "state": state_path, "backend": backend_name,
            "slurm_topology": slurm_topology, "slurm_conf": slurm_conf, "spool": spool,
            "tag_for_daemon": tag_for_daemon}
    out = sys.stdout
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, deadline)
    try:
        changes, notes = plan_hook(options_json, kind, site)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _Late:
        _answer(out, [("warning", f"planning took longer than {deadline:g} s")])
        raise click.exceptions.Exit(3)
    except DirectiveError as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _answer(out, [("error", exc.render())])
        raise click.exceptions.Exit(2)
    except SlurmtopoError as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _answer(out, [("warning", exc.render())])
        raise click.exceptions.Exit(3)
    except Exception as exc:  # a bug must not stop a submission: one line, never a traceback
        signal.setitimer(signal.ITIMER_REAL, 0)
        _answer(out, [("warning", f"internal error ({type(exc).__name__}: {exc})")])
        raise click.exceptions.Exit(3)
    finally:
        signal.signal(signal.SIGALRM, old)
    _answer(out, [("set", f"{k}\t{v}") for k, v in changes] + [("note", n) for n in notes]
            + [("done", None)])


def _answer(out, lines) -> None:
    text = [PROTOCOL]
    for kind, value in lines:
        if value is None:
            text.append(kind)
        elif kind == "set":
            text.append(f"set\t{value}")
        else:
            text.append(f"{kind}\t{_clean(value)}")
    out.write("\n".join(text) + "\n")
    out.flush()


@command.command("task-prolog")
def task_prolog_command():
    """Print this task's TaskProlog lines (export/unset/print); always exits 0."""
    try:
        # lazy: off the path of `slurmtopo hooks plan`, `--help` (start-up time)
        from slurmtopo.hooks.taskprolog import prolog_lines

        lines = prolog_lines(os.environ)
    except SlurmtopoError as exc:
        lines = [f"print slurmtopo: the task's variables are not set: {_clean(exc.render())}"]
    except Exception as exc:  # a bug must not stop a task: one line, never a traceback
        lines = [f"print slurmtopo: the task's variables are not set: internal error "
                 f"({_clean(f'{type(exc).__name__}: {exc}')})"]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


@command.command("check")
@click.argument("script", required=False, type=click.Path(dir_okay=False))
@click.option("--inventory", required=True, metavar="PATH",
              help="The inventory the site's hooks plan with.")
@click.option("--state", "state_path", default="live", show_default=True,
              metavar="live|none|FILE", help="Cluster state to plan against.")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--sbatch", "sbatch_args", multiple=True, metavar="OPTION",
              help="An option as given on sbatch's command line, e.g. --sbatch=--nodes=2 "
                   "(repeatable; for a script on stdin or --wrap, give the directive in "
                   "$SLURMTOPO_DIRECTIVE).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: whether the job has a directive, the sbatch "
                   "options the hook sets (the plan's value shortened), the notes.")
def check_command(script, inventory, state_path, backend_name, sbatch_args, as_json):
    """Show what the cli_filter hook would do to a batch script (submits nothing)."""
    # lazy: off the path of `slurmtopo hooks plan`, `hooks task-prolog` (start-up time)
    from slurmtopo.files.fileio import read_text
    from slurmtopo.sbatch.directives import option_values, script_options

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
