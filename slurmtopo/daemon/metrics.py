"""The placement daemon's Prometheus metrics (docs/daemon.md, "Metrics").

An admin sizing the daemon's wait knob wants to see, over time, how many
jobs it keeps held, how many it releases, how long they waited, why the
others wait, how long a cycle takes and what goes wrong. One
:class:`Recorder` holds those metrics in its own registry; the loop calls
it at a few points (a cycle's decisions, an error of some kind, the end of
each cycle) and it exports them either on an HTTP port or as a
node-exporter textfile, or both.

``prometheus-client`` is optional (the ``metrics`` extra, Debian's
``python3-prometheus-client``): without a metrics option the daemon gets
:data:`NO_METRICS`, which records nothing and imports nothing, so a daemon
without the library runs as it always did; with an option and without the
library, :func:`recorder` refuses in one line at start.

Labels are the daemon's own words only, never a user's: a decision's
``reason`` label is one of :data:`REASONS`, made by :func:`reason_of`
from the decision's action and structured fields (and the fixed opening
words of the scheduler's own messages), never from the free text after
them; an error's ``kind`` is one of :data:`ERROR_KINDS`. So the number of
series is fixed, whatever users submit.
"""
from __future__ import annotations

import logging
import os
import socket
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Mapping, Optional, Sequence

from slurmtopo.daemon.decisions import (FAULT, LEFT_ALONE, OUTSIDE, REHOLD, REJECT, RELEASE,
                                        RUNNING, STARTING, WAIT, Decision, QueuedJob)
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import Output, write_all

log = logging.getLogger("slurmtopo.daemon")

#: the ``reason`` label of ``slurmtopo_daemon_decisions_total`` and
#: ``slurmtopo_daemon_jobs``: every value :func:`reason_of` can return
REASONS = (
    "release-preferred",     # released on the placement it preferred (waited for)
    "release-best",          # released on the best placement; it had nothing to wait for
    "release-fallback",      # released on the fallback: its wait for a preference ran out
    "wait-preference",       # held: still waiting for a preferred placement
    "wait-reserved",         # held: the GPUs it could use are reserved for a higher-priority job
    "wait-release-limit",    # held: not planned this cycle (--max-releases reached)
    "wait-no-room",          # held: no placement meeting its requirements is free
    "wait-backoff",          # held, unplanned: its last release was refused; backing off
    "wait-hazard",           # held: what was free for it has an error hazard (its policy)
    "reject-request",        # rejected: its request (tag, request file) is not valid
    "reject-never-fits",     # rejected: it can never run on this cluster as asked
    "rehold-lost-race",      # held again: another job took its pinned GPUs
    "rehold-grace-expired",  # held again: Slurm kept it pending past --release-grace
    "starting",              # released, Slurm has not started it yet
    "running",               # released and running
    "outside",               # released or held by someone else: no longer the daemon's
    "left-alone",            # held by an admin or changed since submission
    "fault",                 # the daemon failed on this job (a bug)
)

#: the ``kind`` label of ``slurmtopo_daemon_errors_total``
ERROR_KINDS = (
    "cycle",      # a whole cycle failed (Slurm unreachable, or a bug outside any one job)
    "slurm",      # a Slurm command on one job failed (the job is tried again next cycle)
    "fault",      # the daemon failed on one job (a bug): the job is out of its hands
    "spool",      # the spool could not take a write (nothing acted on without it)
    "inventory",  # the inventory could not be reloaded (the previous one is kept)
    "metrics",    # the metrics textfile could not be written
)

#: the largest wait the histogram tells apart (then +Inf): a day
WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
#: a cycle is about 0.2 s on a small cluster, seconds on a big one
CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: the textfile's mode: node-exporter (its own user) reads it; nothing in
#: it is more than what `slurmtopo daemon status` shows every user
TEXTFILE_MODE = 0o644
#: seconds one HTTP client may take for its whole request and our answer
#: (a client that sends a byte every few seconds is dropped at this
#: deadline, whatever it sends)
HTTP_DEADLINE_S = 10.0
#: HTTP clients served at once, at most; one more is closed at once
HTTP_MAX_CLIENTS = 16
#: the longest request (line and headers) read
HTTP_MAX_REQUEST = 8192


def reason_of(d: Decision) -> str:
    """The ``reason`` label of a decision: one of :data:`REASONS`."""
    a = d.action
    if a == RELEASE:
        return {"preferred": "release-preferred",
                "fallback": "release-fallback"}.get(d.taken or "", "release-best")
    if a == WAIT:
        if d.refused is not None:
            return "wait-hazard"
        text = d.reason or ""
        if text.startswith("not planned in this cycle"):
            return "wait-release-limit"
        if text.startswith("backing off"):
            return "wait-backoff"
        if text.startswith(("the GPUs it could use are reserved for job",
                            "the free GPUs it could use are reserved for job")):
            return "wait-reserved"
        return "wait-preference" if d.waiting_for else "wait-no-room"
    if a == REJECT:
        text = d.reason or ""
        if text.startswith(("bad slurmtopo request", "no slurmtopo request")):
            return "reject-request"
        return "reject-never-fits"
    if a == REHOLD:
        # a grace time-out avoids the nodes for a while; a lost race does not
        return "rehold-grace-expired" if d.avoid else "rehold-lost-race"
    if a in (STARTING, RUNNING, OUTSIDE, LEFT_ALONE, FAULT):
        return a
    return "fault"  # an action this module does not know: a bug, counted as one


class NoMetrics:
    """What the daemon records without a metrics option: nothing."""

    def observe_cycle(self, decisions: Sequence[Decision], queue: Sequence[QueuedJob],
                      released: Mapping[int, bool], duration: float, now: float) -> None:
        """Record one finished cycle (see :meth:`Recorder.observe_cycle`)."""

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (see :data:`ERROR_KINDS`)."""

    def publish(self) -> None:
        """Write the textfile, where there is one."""

    def spool_problem(self, problem: bool) -> None:
        """Whether the last cycle could not write everything to the spool."""

    def close(self) -> None:
        """Stop serving."""


#: the daemon's recorder when no metrics are asked for
NO_METRICS = NoMetrics()


def _client():
    try:  # lazy: optional dependency (the 'metrics' extra; ~33 ms), only metrics need it
        import prometheus_client
    except ImportError:
        raise SlurmtopoError(
            "the daemon's metrics need prometheus-client: pip install 'slurmtopo[metrics]' "
            "or apt-get install python3-prometheus-client") from None
    return prometheus_client


def check_textfile(path: str) -> str:
    """The textfile's absolute path, or a one-line refusal. node-exporter's
    textfile collector reads only ``*.prom``; the directory must belong to
    root or the daemon's user and be writable by nobody else, so no one
    can put a link or a file of their own where the daemon writes (the
    file itself is replaced by a rename, which never follows a link). The
    directory's own path is the admin's, as the spool's is: a link to it
    is fine."""
    path = os.path.abspath(os.fspath(path))
    if not path.endswith(".prom") or os.path.basename(path) == ".prom":
        raise SlurmtopoError("--metrics-textfile must name a *.prom file (node-exporter's "
                             "textfile collector reads only those)", path)
    directory = os.path.dirname(path)
    try:
        st = os.stat(directory)
    except OSError as exc:
        raise SlurmtopoError(f"cannot use the metrics directory {directory} ({exc.strerror})",
                             path) from None
    if not stat.S_ISDIR(st.st_mode):
        raise SlurmtopoError(f"{directory} is not a directory", path)
    if st.st_uid not in (0, os.geteuid()):
        raise SlurmtopoError(f"the metrics directory {directory} belongs to uid {st.st_uid}, "
                             f"neither root nor the daemon's user (uid {os.geteuid()})", path)
    if st.st_mode & 0o022:
        raise SlurmtopoError(f"the metrics directory {directory} is writable by its group or "
                             f"others (mode {stat.S_IMODE(st.st_mode):04o}; make it 0755)", path)
    try:
        target = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise SlurmtopoError(f"cannot use the metrics textfile ({exc.strerror})", path) from None
    if stat.S_ISDIR(target.st_mode):
        raise SlurmtopoError("the metrics textfile is a directory", path)
    return path


class Recorder(NoMetrics):
    """The daemon's metrics in their own registry (nothing global),
    written to ``textfile`` after every cycle (``None``: not written) and
    served on a port once :meth:`serve` is called."""

    def __init__(self, textfile: Optional[str] = None):
        pc = _client()
        self._pc = pc
        self.textfile = check_textfile(textfile) if textfile is not None else None
        self.registry = pc.CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "slurmtopo_daemon_"
        self.held = pc.Gauge(p + "held_jobs", "Jobs the daemon keeps held after the last cycle "
                             "(waiting for a placement)", registry=r)
        self.jobs = pc.Gauge(p + "jobs", "Jobs the daemon manages, by the reason of their "
                             "decision in the last cycle", ["reason"], registry=r)
        self.decisions = pc.Counter(p + "decisions", "Decisions, one per managed job per "
                                    "cycle, by reason", ["reason"], registry=r)
        self.releases = pc.Counter(p + "releases", "Jobs released (pinned and their hold "
                                   "lifted)", registry=r)
        self.wait = pc.Histogram(p + "release_wait_seconds", "How long a released job waited, "
                                 "from its submission to its release", registry=r,
                                 buckets=WAIT_BUCKETS)
        self.cycle_seconds = pc.Histogram(p + "cycle_seconds", "Duration of a successful "
                                          "cycle", registry=r, buckets=CYCLE_BUCKETS)
        self.errors = pc.Counter(p + "errors", "Errors, by kind", ["kind"], registry=r)
        self.last_success = pc.Gauge(p + "last_success_timestamp_seconds", "When the last "
                                     "successful cycle ended (Unix time)", registry=r)
        self.spool = pc.Gauge(p + "spool_problem", "1 when the last cycle could not write "
                              "everything to the spool (full, read-only), else 0", registry=r)
        for reason in REASONS:  # every series exists from the start, at 0
            self.jobs.labels(reason)
            self.decisions.labels(reason)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        self._write_failed = False
        self._server = None
        #: (address, port) served on, once serving
        self.address: Optional[tuple] = None

    # -- recording -----------------------------------------------------------

    def observe_cycle(self, decisions: Sequence[Decision], queue: Sequence[QueuedJob],
                      released: Mapping[int, bool], duration: float, now: float) -> None:
        """One successful cycle: ``decisions`` as made (a re-held job has
        two, the last one counts for its state), ``released`` the outcome of
        each release tried (job id -> done; empty in a dry run), ``now`` the
        daemon's clock at the end."""
        last: Dict[int, Decision] = {}
        for d in decisions:
            self.decisions.labels(reason_of(d)).inc()
            last[d.job_id] = d
        counts = dict.fromkeys(REASONS, 0)
        held = 0
        for d in last.values():
            counts[reason_of(d)] += 1
            if d.action == WAIT or (d.action == RELEASE and not released.get(d.job_id)):
                held += 1  # (a release not done leaves the job held)
        for reason, n in counts.items():
            self.jobs.labels(reason).set(n)
        self.held.set(held)
        submitted = {q.job_id: q.submit_time for q in queue}
        for job_id, done in sorted(released.items()):
            if not done:
                continue
            self.releases.inc()
            since = submitted.get(job_id)
            if since is not None:
                self.wait.observe(max(0.0, now - since))
        self.cycle_seconds.observe(max(0.0, duration))
        self.last_success.set(now)

    def error(self, kind: str) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {kind!r}")
        self.errors.labels(kind).inc()

    # -- exporting -----------------------------------------------------------

    def text(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return self._pc.generate_latest(self.registry)

    def publish(self) -> None:
        """Replace the textfile (staged beside it and renamed: the collector
        never reads half a file; mode 0644 whatever the umask). A failure
        is logged once until a write succeeds again, and counted."""
        if self.textfile is None:
            return

        try:
            check_textfile(self.textfile)
            # no fsync: the file is worth only as long as the machine is up
            write_all([Output(self.textfile, self.text(), TEXTFILE_MODE)], sync=False)
        except SlurmtopoError as exc:
            self.error("metrics")
            if not self._write_failed:
                log.error("metrics: %s", exc.render())
            self._write_failed = True
            return
        if self._write_failed:
            log.info("metrics: %s written again", self.textfile)
        self._write_failed = False

    def serve(self, addr: str, port: int) -> None:
        """Serve the metrics on ``addr:port`` (:class:`MetricsServer`).
        Port 0 takes a free one (:attr:`address` says which)."""
        try:
            self._server = MetricsServer(addr, port, self.text)
        except (OSError, OverflowError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise SlurmtopoError(f"cannot serve metrics on {addr} port {port} ({why})") \
                from None
        self.address = self._server.server_address[:2]
        self._server.start()
        log.info("metrics on http://%s:%d/metrics", *self.address)

    def spool_problem(self, problem: bool) -> None:
        self.spool.set(1 if problem else 0)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


class MetricsServer(ThreadingHTTPServer):
    """``/metrics`` over HTTP, each client in a thread of its own with a
    deadline for everything it does (:data:`HTTP_DEADLINE_S`: a client
    that sends a byte every few seconds is cut off there, whatever a
    socket time-out would allow), at most :data:`HTTP_MAX_CLIENTS` at
    once (one more is closed at once). One client never delays another,
    and :meth:`stop` returns at once: it closes every client's socket and
    waits for none (the threads are daemons; SIGTERM ended the daemon
    only when the silent client went away)."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, addr: str, port: int, text):
        self.address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.text = text
        #: client socket -> the timer that cuts it off at its deadline
        self._clients: Dict[object, threading.Timer] = {}
        self._guard = threading.Lock()
        super().__init__((addr, port), _MetricsHandler)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                         name="slurmtopo-metrics", daemon=True).start()

    def process_request(self, request, client_address):
        # the deadline: the socket is shut after it, whatever the client does
        timer = threading.Timer(HTTP_DEADLINE_S, _cut, (request,))
        timer.daemon = True
        with self._guard:
            full = len(self._clients) >= HTTP_MAX_CLIENTS
            if not full:
                self._clients[request] = timer
        if full:
            self.shutdown_request(request)
            return
        timer.start()
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._guard:
            timer = self._clients.pop(request, None)
        if timer is not None:
            timer.cancel()
        super().shutdown_request(request)

    def stop(self) -> None:
        """Stop accepting and cut every client off; waits for nothing."""
        self.shutdown()
        with self._guard:
            clients = list(self._clients)
        for request in clients:
            _cut(request)
        self.server_close()


def _cut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _MetricsHandler(BaseHTTPRequestHandler):
    """GET /metrics (or /): the exposition; anything else 404. Nothing
    the client sends is echoed or logged."""

    timeout = HTTP_DEADLINE_S
    protocol_version = "HTTP/1.0"

    def handle(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(HTTP_MAX_REQUEST + 1)
            if not self.raw_requestline or len(self.raw_requestline) > HTTP_MAX_REQUEST:
                return
            if not self.parse_request():
                return
            if self.command != "GET":
                self.send_error(405)
                return
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = self.server.text()  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (OSError, ValueError):
            return  # cut off at the deadline, or went away

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def log_error(self, format, *args):  # noqa: A002 - the base class's name
        pass


def recorder(textfile: Optional[str], serving: bool) -> NoMetrics:
    """The daemon's recorder for its options: :data:`NO_METRICS` when it
    neither writes a textfile nor serves (prometheus-client not needed),
    else a :class:`Recorder` (a one-line refusal without the library or
    with a textfile where it may not write)."""
    if textfile is None and not serving:
        return NO_METRICS
    return Recorder(textfile=textfile)
