"""``slurmtopo daemon``: the placement daemon and its status.

    slurmtopo daemon [run] --inventory INV --spool DIR [--interval 10] [--once]
    slurmtopo daemon status --spool DIR [--json]

``run`` (the default sub-command) watches held jobs submitted with
``slurmtopo sbatch --daemon`` and releases each onto topology-good nodes
(docs/daemon.md). ``status`` shows the queue it manages and why each job
waits, from the status file the daemon rewrites every cycle.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Optional

import click

# through the package, so that a fake backend patched into slurmtopo.slurm reaches it
from slurmtopo import slurm as backends
from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.commands.numbers import FiniteFloat
from slurmtopo.daemon.decisions import Config
from slurmtopo.daemon.loop import Daemon, inventory_loader
from slurmtopo.daemon.metrics import recorder
from slurmtopo.daemon.protocol import DEFAULT_SPOOL
from slurmtopo.daemon.spool import (EventLogLimits, STATUS_FILE, SpoolLock, prepare_spool,
                                    read_events, spool_path)
from slurmtopo.daemon.status import liveness, read_status, stale, unseen_jobs
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_file
from slurmtopo.show.termsafe import PrintableFormatter, printable


class _DefaultRun(SentenceGroup):
    """``slurmtopo daemon --inventory ...`` means ``slurmtopo daemon run ...``."""

    def parse_args(self, ctx, args):
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["run"] + list(args)
        return super().parse_args(ctx, args)


@click.group("daemon", cls=_DefaultRun, context_settings={"help_option_names": ["-h", "--help"]})
def command():
    """The placement daemon: gang release of held jobs onto topology-good nodes.

    Jobs submitted with `slurmtopo sbatch --daemon` wait held; the daemon
    plans each against the live cluster in priority order, pins the nodes it
    chose and releases it. See docs/daemon.md.
    """


@command.command("run", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--inventory", "inventory_path", metavar="PATH", required=True, multiple=True,
              help="Inventory file or directory of node reports (repeatable); re-read when it "
                   "changes.")
@click.option("--spool", default=DEFAULT_SPOOL, show_default=True,
              help="Directory for the journal, the event log and status.json.")
@click.option("--interval", type=FiniteFloat(min=0, min_open=True), default=10.0, show_default=True,
              help="Seconds between cycles.")
@click.option("--once", is_flag=True, help="Run one cycle and exit (for cron or tests).")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--release-grace", type=FiniteFloat(min=0), default=30.0, show_default=True,
              help="Seconds a released job may pend on free GPUs before it is held again and "
                   "re-planned elsewhere.")
@click.option("--reservations", type=int, default=1, show_default=True,
              help="How many blocked jobs (highest priority first) reserve the free GPUs of "
                   "their future placement (0: none).")
@click.option("--alternatives", type=int, default=4, show_default=True,
              help="Placements compared per job for best fit.")
@click.option("--max-releases", type=int, default=100, show_default=True,
              help="Jobs released per cycle at most (0: no limit); the rest are planned "
                   "next cycle, in priority order.")
@click.option("--best-fit-releases", type=int, default=16, show_default=True,
              help="Releases per cycle that compare --alternatives for best fit (0: all); "
                   "later ones in a burst take the planner's placement.")
@click.option("--release-tries", type=click.IntRange(0, 1000), default=3, show_default=True,
              help="Refused releases in a row (the job's record disagrees, Slurm refuses its "
                   "pin) after which a job is let go, held, with the reason in its comment "
                   "(0: never); it backs off, unplanned, between tries.")
@click.option("--pack", type=click.Choice(["domains"]), default=None,
              help="domains: pack jobs one rack can hold into racks already in use, keeping "
                   "whole multi-node NVLink domains (GB200 NVL72 racks) free for the jobs that "
                   "need one.")
@click.option("--default-wait", type=FiniteFloat(min=0), default=0.0, show_default=True,
              help="Seconds to wait for a --prefer that has no --wait of its own.")
@click.option("--on-reject", type=click.Choice(["cancel", "hold"]), default="cancel",
              show_default=True,
              help="A job that can never fit: cancel it, or leave it held (with the reason "
                   "in its comment either way).")
@click.option("--dry-run", is_flag=True, help="Decide and log, but change nothing in Slurm.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (/metrics; needs prometheus-client).")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True,
              help="Address --metrics-port listens on (anyone who can connect reads the "
                   "metrics; docs/security.md).")
@click.option("--metrics-textfile", default=None, metavar="PATH",
              help="Write Prometheus metrics to this *.prom file after every cycle, for "
                   "node-exporter's textfile collector (needs prometheus-client).")
@click.option("--events-max-mib", type=click.IntRange(1, 1 << 20),
              default=EventLogLimits().max_bytes >> 20, show_default=True,
              help="Rotate the spool's events.log when it would grow past this many MiB.")
@click.option("--events-keep", type=click.IntRange(1, 100), default=EventLogLimits().keep,
              show_default=True,
              help="Rotated event logs kept (events.log.1 the newest); older ones are removed.")
def run_cmd(inventory_path, spool, interval, once, backend_name, release_grace, reservations,
            alternatives, max_releases, best_fit_releases, release_tries, pack, default_wait,
            on_reject, dry_run,
            log_level, metrics_port, metrics_addr, metrics_textfile, events_max_mib,
            events_keep):
    """Watch held slurmtopo jobs and release each onto a good placement."""
    if interval <= 0:
        raise SlurmtopoError("--interval must be > 0")
    if reservations < 0 or alternatives < 1:
        raise SlurmtopoError("--reservations must be >= 0 and --alternatives >= 1")
    if max_releases < 0 or best_fit_releases < 0:
        raise SlurmtopoError("--max-releases and --best-fit-releases must be >= 0")
    if metrics_port is None and metrics_addr != "127.0.0.1":
        raise SlurmtopoError("--metrics-addr needs --metrics-port")
    # prometheus-client and the textfile's directory are checked now, before anything
    metrics = recorder(metrics_textfile, metrics_port is not None)

    # job names, comments and reasons reach the log: escaped (termsafe)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s slurmtopo-daemon: %(message)s",
                                            datefmt="%Y-%m-%dT%H:%M:%S"))
    logging.basicConfig(level=getattr(logging, log_level.upper()), handlers=[handler])
    loader = inventory_loader(list(inventory_path))
    inv = loader()

    prepare_spool(spool)
    lock = SpoolLock(spool)
    lock.acquire()
    try:
        if metrics_port is not None:
            metrics.serve(metrics_addr, metrics_port)
        backend = backends.get_backend(backend_name)
        cfg = Config(release_grace=release_grace, reservations=reservations,
                     alternatives=alternatives, max_releases=max_releases,
                     best_fit_releases=best_fit_releases, default_wait=default_wait,
                     release_tries=release_tries, retry_backoff=max(60.0, 3 * interval),
                     pack=pack or "")
        daemon = Daemon(backend, inv, spool, cfg, on_reject=on_reject, dry_run=dry_run,
                        inventory_loader=loader, metrics=metrics,
                        inventory_label=", ".join(os.path.abspath(p) for p in inventory_path),
                        events_limits=EventLogLimits(events_max_mib << 20, events_keep))
        daemon.locked = True

        def stop(signum, frame):
            logging.getLogger("slurmtopo.daemon").info("signal %d: stopping after this cycle",
                                                        signum)
            daemon.stop_event.set()

        old_handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        log = logging.getLogger("slurmtopo.daemon")
        if not once:
            log.info("started: %d nodes in the inventory, spool %s, every %gs, backend %s%s",
                     len(inv), os.path.abspath(spool), interval, backend.name,
                     " (dry run)" if dry_run else "")
        try:
            rc = daemon.run(interval=interval, once=once)
        finally:
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
    finally:
        metrics.close()
        lock.release()
    if rc:
        sys.exit(rc)


def _age(t: Optional[float], now: float) -> str:
    if t is None:
        return "-"
    d = max(0.0, now - float(t))
    if d < 120:
        return f"{d:.0f}s"
    if d < 7200:
        return f"{d / 60:.0f}m"
    return f"{d / 3600:.1f}h"


#: ``daemon status``'s exit code when no daemon holds the spool (as an init
#: script's status: 3, "not running"); the status is printed all the same
NOT_RUNNING = 3


@command.command("status", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--spool", default=DEFAULT_SPOOL, show_default=True,
              help="The daemon's spool directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the status document as JSON.")
@click.option("--events", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also show the last N events of the event log.")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm", "none"]),
              help="How to ask Slurm for held slurmtopo jobs the last cycle did not see "
                   "('none': do not).")
def status_cmd(spool, as_json, events, backend_name):
    """Show the queue the daemon manages and why each job waits.

    Exit code 0 when the spool's daemon runs (told from its process, on
    its host; from its last cycle's time elsewhere), 3 when it does not
    (the last status is shown all the same), 2 on an error."""
    spool = spool_path(spool)
    path = os.path.join(spool, STATUS_FILE)
    try:
        owner = {os.stat(spool).st_uid}
    except FileNotFoundError:
        owner = set()  # no spool yet: no status file either
    except OSError as exc:
        raise SlurmtopoError(f"cannot use the spool directory ({exc.strerror})", spool) from None
    try:
        # the daemon's own file only (the spool's owner's): what it says
        # of the daemon's process is what liveness trusts
        raw = read_file(spool, STATUS_FILE, MAX_STATUS_BYTES, owner, "status file")
    except FileNotFoundError:
        # no cycle yet (never started, or down since the spool was made):
        # the jobs Slurm holds for it are still worth listing
        doc = {"jobs": []}
    else:
        doc = read_status(raw.decode("utf-8", errors="replace"), path)
    now = time.time()
    alive = liveness(spool, doc, now)
    holder = alive.pid if alive.running else None
    recent = _events(spool, events, read_events) if events else []
    unseen, slurm_note = _unseen(doc, backend_name)
    rc = 0 if alive.running else NOT_RUNNING
    old = stale(doc.get("daemon") or {}, now) if alive.running else None
    if as_json:
        doc["running"] = alive.running
        doc["liveness"] = alive.how
        if old is not None:
            doc["stale_s"] = round(old, 1)
        doc["unseen"] = [{"job_id": j.job_id, "user": j.user, "name": j.name,
                          "slurm_state": j.state, "submit_time": j.submit_time}
                         for j in unseen]
        if slurm_note:
            doc["slurm_note"] = slurm_note
        if events:
            doc["events"] = recent
        click.echo(json.dumps(doc, indent=1, default=str))
        if rc:
            sys.exit(rc)
        return
    d = doc.get("daemon", {})
    state = (f"running (pid {printable(holder) if holder is not None else '?'})"
             if alive.running else "NOT running")
    if "daemon" not in doc:
        click.echo(f"daemon: {state}; no cycle has run with this spool ({printable(spool)})")
    else:
        click.echo(f"daemon: {state}; last cycle {_age(d.get('at'), now)} ago "
                   f"({d.get('cycles', 0)} cycles, {d.get('cycle_s', 0)}s each); "
                   f"inventory {printable(d.get('inventory') or '?')}"
                   + ("; DRY RUN" if d.get("dry_run") else ""))
    if d.get("spool_error"):
        click.echo(f"SPOOL PROBLEM: {printable(d['spool_error'])}")
    elif old is not None:
        click.echo(f"SPOOL PROBLEM: the daemon runs, but its status is {_age(d.get('at'), now)} "
                   "old: it cannot write its spool (a full file system?) or a cycle is stuck; "
                   "see its log")
    jobs = list(doc.get("jobs") or [])
    for j in unseen:  # from Slurm: held for the daemon, not in its last cycle
        jobs.append({"job_id": j.job_id, "user": j.user, "name": j.name,
                     "slurm_state": j.state, "action": "unseen", "submit_time": j.submit_time,
                     "reason": "held for the daemon; not in its last cycle (submitted since, "
                               "or while it is down)"})
    if slurm_note:
        click.echo(f"note: {printable(slurm_note)}")
    if not jobs:
        click.echo("no jobs managed")
    else:
        rows = [("JOBID", "USER", "NAME", "SLURM", "DAEMON", "AGE", "WHY / WHAT")]
        for j in jobs:
            action = j.get("action", "")
            why = j.get("reason") or ""
            if j.get("drift"):
                why += f" [drift: {j['drift']}]"
            if j.get("preference_notes"):
                why += " [" + "; ".join(map(str, j["preference_notes"])) + "]"
            rows.append((str(j.get("job_id")), printable(j.get("user") or "", 16),
                         printable(j.get("name") or "", 20), printable(j.get("slurm_state") or ""),
                         printable(action), _age(j.get("submit_time") or j.get("since"), now),
                         printable(why)))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for r in rows:
            click.echo("  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6])
    rej = doc.get("rejected") or []
    if rej:
        click.echo("rejected recently:")
        for r in rej[-10:]:
            click.echo(f"  job {r.get('job_id')} ({printable(r.get('policy'))}, "
                       f"{_age(r.get('at'), now)} ago): {printable(r.get('reason'))}")
    if events:
        click.echo("events:")
        for e in recent:
            at = e.get("at")
            at = time.strftime("%H:%M:%S", time.localtime(at)) \
                if isinstance(at, (int, float)) and 0 <= at < 1 << 40 else "?"
            rest = {k: v for k, v in e.items() if k not in ("at", "event", "job")}
            click.echo(f"  {at} {printable(e.get('event'))} job {printable(e.get('job', '-'))} "
                       + json.dumps(rest, separators=(",", ":"), default=str))
    if rc:
        sys.exit(rc)


def _unseen(doc, backend_name):
    """(held slurmtopo jobs Slurm has that the status does not list, a note
    when Slurm could not be asked)."""
    if backend_name == "none":
        return [], None
    try:
        return unseen_jobs(doc, backends.get_backend(backend_name).jobs(states=["PENDING"])), None
    except SlurmtopoError as exc:
        return [], f"Slurm not asked for held jobs: {exc.render()}"


#: the largest status.json read (1,000 jobs take about 1 MiB)
MAX_STATUS_BYTES = 64 << 20


def _events(spool: str, n: int, read_events) -> list:
    """The last ``n`` events, or one error line: the event log is readable
    by the daemon's user only (docs/security.md)."""
    try:
        return read_events(spool, limit=n)
    except SlurmtopoError as exc:
        raise SlurmtopoError(f"{exc.message} (the event log is the daemon's: readable by its "
                             "user only; the status above is what users see)", exc.path) from None
