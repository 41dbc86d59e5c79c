"""Gathering node reports: from a shared directory or over SSH.

The agents write one node report per node. Admins need all of them in one
directory (``--reports DIR`` of the other commands), each one valid, and a
clear list of the nodes that did not answer. Two sources:

* **a directory the agents write to** (shared filesystem): every report is
  parsed and checked, too-old ones are refused (``max_age``);
* **SSH** (paramiko): the agent command (or ``cat`` of its last report) runs
  on every node in parallel, at most ``workers`` at a time, each node with
  its own deadline. Host keys are checked against known_hosts and an unknown
  key is a failure, never silently added; user, port, key, ProxyCommand and
  known_hosts files come from ``~/.ssh/config`` as ssh reads them.

A node that fails keeps its last good report in the output directory, marked
``stale: true`` (with the reason) in its ``report`` block, so the planner can
still use it and say it is old. Workers only fetch text; parsing, checking
and writing happen in the calling thread, so a node that answers after its
deadline can never overwrite anything.
"""
from __future__ import annotations

import base64
import getpass
import hashlib
import os
import queue
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.errors import InventoryError, SlurmtopoError
from slurmtopo.files.fileio import atomic_write, check_regular, ensure_dir, read_text
from slurmtopo.files.yamlio import load_document, parse_text
from slurmtopo.inventory.schema import node_report, parse_inventory

REPORT_SUFFIXES = (".yaml", ".yml", ".json")
#: largest report accepted from a node (a report is a few KiB)
MAX_REPORT_BYTES = 16 * 1024 * 1024
#: extra seconds past a node's own deadline before it is given up on
GRACE = 5.0


class FetchError(Exception):
    """Why a node gave no report (one line, shown to the admin)."""


@dataclass
class Result:
    node: str
    ok: bool
    error: Optional[str] = None
    stale_kept: bool = False  # its previous report is kept, marked stale
    seconds: float = 0.0
    note: Optional[str] = None  # e.g. the agent exited non-zero (degraded node)


@dataclass
class Fetched:
    """What one node sent: its stdout, exit status and last stderr line."""

    text: str
    status: int = 0
    stderr: str = ""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --------------------------------------------------------------------------
# Reports on disk


def report_path(directory: str, node: str) -> Optional[str]:
    for suffix in REPORT_SUFFIXES:
        p = os.path.join(directory, node + suffix)
        if os.path.exists(p):
            return p
    return None


def check_report(text: str, node: Optional[str], source: str) -> Tuple[str, Dict]:
    """Parse a node report; return its node name and ``report`` block.
    FetchError if it is not a valid report for ``node``."""
    if len(text.encode("utf-8", "replace")) > MAX_REPORT_BYTES:
        raise FetchError(f"report larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB")
    if not text.strip():
        raise FetchError("empty output (no report)")
    try:
        data = parse_text(text, source)
        if isinstance(data, dict) and data.get("slurmtopo") != "node-report":
            raise FetchError(f"not a node report (slurmtopo: {data.get('slurmtopo')!r})")
        inv = parse_inventory(data, source)
    except InventoryError as exc:
        raise FetchError(f"invalid report: {exc.render()}") from None
    name = next(iter(inv.nodes))
    if node is not None and name != node and name.split(".")[0] != node.split(".")[0]:
        raise FetchError(f"the report is for node {name!r}, not {node!r}")
    return name, dict(inv.reports.get(name) or {})


def store_report(directory: str, node: str, text: str) -> str:
    """Write a fresh report as ``<node>.yaml`` (or .json), atomically."""
    suffix = ".json" if text.lstrip().startswith("{") else ".yaml"
    path = os.path.join(directory, node + suffix)
    atomic_write(path, text if text.endswith("\n") else text + "\n")
    for other in REPORT_SUFFIXES:
        if other != suffix and os.path.exists(os.path.join(directory, node + other)):
            os.unlink(os.path.join(directory, node + other))
    return path


def mark_stale(directory: str, node: str, reason: str) -> bool:
    """Keep ``node``'s last good report, flagged stale; False if it has none."""
    path = report_path(directory, node)
    if path is None:
        return False
    try:
        inv = parse_inventory(load_document(path), path)
    except InventoryError:
        return False
    name = next(iter(inv.nodes))
    report = {k: v for k, v in (inv.reports.get(name) or {}).items()}
    report["stale"] = True
    report.setdefault("stale_since", now_iso())
    report["stale_reason"] = reason
    fmt = "json" if path.endswith(".json") else "yaml"
    st = os.stat(path)
    atomic_write(path, node_report(inv.nodes[name], report, fmt=fmt))
    os.utime(path, (st.st_atime, st.st_mtime))  # the content is as old as it was
    return True


def _finish(dest: str, node: str, got: Optional[Fetched], error: Optional[str],
            seconds: float) -> Result:
    if error is None and got is not None:
        note = None
        if got.status != 0:  # the agent still printed a report (a degraded node)
            note = f"agent exited with status {got.status}" + (f": {got.stderr}" if got.stderr else "")
        try:
            check_report(got.text, node, f"{node}:report")
            store_report(dest, node, got.text)
            return Result(node, True, seconds=seconds, note=note)
        except FetchError as exc:
            error = f"{note}; {exc}" if note else str(exc)
    error = error or "no answer"
    return Result(node, False, error, stale_kept=mark_stale(dest, node, error), seconds=seconds)


# --------------------------------------------------------------------------
# From a directory


def collect_dir(src: str, dest: str, nodes: Optional[Sequence[str]] = None,
                max_age: Optional[float] = None, now: Optional[float] = None) -> List[Result]:
    """Check the reports agents wrote to ``src``; copy the good ones to
    ``dest`` (which may be ``src``); mark the missing or bad ones stale."""
    if not os.path.isdir(src):
        raise InventoryError("no such directory", src)
    now = time.time() if now is None else now
    found: Dict[str, Tuple[str, str, float]] = {}  # node -> (path, text, mtime)
    # node (or file stem) -> why its report is not usable
    bad: Dict[str, str] = {}
    for fname in sorted(os.listdir(src)):
        if fname.startswith(".") or not fname.endswith(REPORT_SUFFIXES):
            continue
        path = os.path.join(src, fname)
        stem = fname.rsplit(".", 1)[0]
        try:
            text = read_text(path, MAX_REPORT_BYTES)
            name, report = check_report(text, None, path)
        except InventoryError as exc:
            bad[stem] = exc.render()
            continue
        except FetchError as exc:
            bad[stem] = str(exc)
            continue
        if report.get("stale"):  # marked by an earlier collect, never refreshed since
            bad[name] = f"still stale: {report.get('stale_reason', 'no fresh report')}"
            continue
        found[name] = (path, text, os.path.getmtime(path))
    targets = list(nodes) if nodes is not None else sorted(set(found) | set(bad))
    if not targets:  # a mistyped directory, not a cluster of zero nodes
        raise InventoryError(f"no node reports here (*{', *'.join(REPORT_SUFFIXES)}, as "
                             "`slurmtopo agent discover` writes them)", src)
    ensure_dir(dest, "report directory")
    results = []
    for node in targets:
        if node in found:
            path, text, mtime = found[node]
            age = now - mtime
            if max_age is not None and age > max_age:
                err = f"report {path} is {_age(age)} old (older than {_age(max_age)})"
                results.append(Result(node, False, err, stale_kept=mark_stale(dest, node, err)))
                continue
            if os.path.realpath(os.path.dirname(path)) != os.path.realpath(dest):
                store_report(dest, node, text)
            results.append(Result(node, True))
        else:
            err = bad.get(node, f"no report in {src}")
            results.append(Result(node, False, err, stale_kept=mark_stale(dest, node, err)))
    return results


def _age(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds:.0f} s"


# --------------------------------------------------------------------------
# Over SSH


def _regular(path: str, what: str) -> None:
    """A file paramiko will open must be a regular file (a FIFO would hang
    the collection)."""
    try:
        check_regular(path)
    except SlurmtopoError as exc:
        raise FetchError(f"{what} {exc.render()}") from None


class SshFetcher:
    """Runs one command on a node over SSH and returns its stdout.

    ``command`` may use ``{node}``; with ``read_path`` instead, the node's
    last report file is printed with ``cat``.
    """

    def __init__(self, command: Optional[str] = None, read_path: Optional[str] = None,
                 timeout: float = 60.0, ssh_config: Optional[str] = None,
                 known_hosts: Optional[Sequence[str]] = None, user: Optional[str] = None,
                 identity: Optional[str] = None, port: Optional[int] = None):
        try:
            # lazy: optional dependency (the 'collect' extra; ~110 ms), only SSH collection
            import paramiko
        except ImportError:
            raise InventoryError("collecting over SSH needs paramiko, which is not installed: "
                                 "pip install 'slurmtopo[collect]' (or collect from a "
                                 "directory of reports)") from None

        self.paramiko = paramiko
        if (command is None) == (read_path is None):
            raise InventoryError("give either a command to run or a report path to read")
        self.command = command
        self.read_path = read_path
        self.timeout = timeout
        self.user, self.identity, self.port = user, identity, port
        self.known_hosts = list(known_hosts) if known_hosts else None
        self.config = paramiko.SSHConfig()
        cfg_path = ssh_config or os.path.expanduser("~/.ssh/config")
        if os.path.exists(cfg_path):
            text = read_text(cfg_path)  # a FIFO or device is refused, not waited on
            try:
                self.config = paramiko.SSHConfig.from_text(text)
            except Exception as exc:  # paramiko raises several types for bad files
                raise InventoryError(f"cannot read SSH config: {exc}", cfg_path) from None
        elif ssh_config:
            raise InventoryError("no such file", ssh_config)

    def remote_command(self, node: str) -> str:
        if self.read_path is not None:
            return "cat -- " + shlex.quote(self.read_path.replace("{node}", node))
        return self.command.replace("{node}", shlex.quote(node))

    def _known_hosts_files(self, cfg) -> List[str]:
        if self.known_hosts is not None:
            return self.known_hosts
        files = []
        for key, default in (("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2"),
                             ("globalknownhostsfile", "/etc/ssh/ssh_known_hosts")):
            files += [os.path.expanduser(f) for f in str(cfg.get(key, default)).split()]
        return files

    def fetch(self, node: str) -> Fetched:
        paramiko = self.paramiko
        deadline = time.monotonic() + self.timeout
        cfg = self.config.lookup(node)
        if "proxyjump" in cfg:
            raise FetchError("ProxyJump is not supported; use ProxyCommand ssh -W %h:%p <jump>")
        host = cfg.get("hostname", node)
        port = self.port or int(cfg.get("port", 22))
        user = self.user or cfg.get("user") or getpass.getuser()
        keys = [os.path.expanduser(self.identity)] if self.identity else \
            [os.path.expanduser(k) for k in cfg.get("identityfile", [])]
        keys = [k for k in keys if os.path.exists(k)]
        for k in keys:  # paramiko opens them itself: no FIFO or device
            _regular(k, "identity file")
        client = paramiko.SSHClient()
        for f in self._known_hosts_files(cfg):
            if os.path.exists(f):
                _regular(f, "known_hosts file")
                try:
                    client.load_system_host_keys(f)
                except Exception as exc:
                    raise FetchError(f"cannot read known_hosts file {f}: {exc}") from None
        client.set_missing_host_key_policy(_RejectUnknown(cfg.get("hostkeyalias")))
        sock = paramiko.ProxyCommand(cfg["proxycommand"]) if cfg.get("proxycommand") else None
        t = max(1.0, self.timeout)
        try:
            client.connect(host, port=port, username=user, key_filename=keys or None,
                           timeout=t, banner_timeout=t, auth_timeout=t, channel_timeout=t,
                           sock=sock, allow_agent=True,
                           look_for_keys=str(cfg.get("identitiesonly", "no")).lower() != "yes")
            return self._run(client, self.remote_command(node), deadline)
        except FetchError:
            raise
        except _UnknownHostKey as exc:
            raise FetchError(str(exc)) from None
        except paramiko.BadHostKeyException as exc:
            raise FetchError(f"HOST KEY MISMATCH for {exc.hostname}: the server offers "
                             f"{_fingerprint(exc.key)}, known_hosts has "
                             f"{_fingerprint(exc.expected_key)}; not connecting") from None
        except paramiko.AuthenticationException:
            raise FetchError(f"authentication failed for {user}@{host}") from None
        except paramiko.ssh_exception.NoValidConnectionsError:
            raise FetchError(f"connection refused ({host} port {port})") from None
        except (socket.timeout, TimeoutError):
            raise FetchError(f"no answer from {host} port {port} within {t:g} s") from None
        except socket.gaierror:
            raise FetchError(f"unknown host name {host!r}") from None
        except paramiko.SSHException as exc:
            raise FetchError(f"ssh: {exc}") from None
        except OSError as exc:
            raise FetchError(f"{host} port {port}: {exc.strerror or exc}") from None
        finally:
            client.close()

    def _run(self, client, command: str, deadline: float) -> Fetched:
        chan = client.get_transport().open_session(timeout=max(0.1, deadline - time.monotonic()))
        chan.exec_command(command)
        out, err = bytearray(), bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FetchError(f"timed out after {self.timeout:g} s")
            select.select([chan], [], [], min(left, 0.5))
            while chan.recv_ready():
                out += chan.recv(65536)
                if len(out) > MAX_REPORT_BYTES:
                    raise FetchError("output too large")
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)[:4096]
            if chan.exit_status_ready() and not chan.recv_ready() and chan.eof_received:
                break
        status = chan.recv_exit_status()
        tail = err.decode("utf-8", "replace").strip().splitlines()
        last = tail[-1][:200] if tail else ""
        if status != 0 and not out.strip():
            raise FetchError(f"command exited with status {status}" + (f": {last}" if last else ""))
        try:
            return Fetched(out.decode("utf-8"), status, last)
        except UnicodeDecodeError:
            raise FetchError("output is not UTF-8 text") from None


class _UnknownHostKey(Exception):
    pass


def _fingerprint(key) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


class _RejectUnknown:
    """Missing-host-key policy: reject (like ``StrictHostKeyChecking yes``),
    except a key known under the config's HostKeyAlias."""

    def __init__(self, alias: Optional[str]):
        self.alias = alias

    def missing_host_key(self, client, hostname, key):
        if self.alias:
            known = client.get_host_keys().lookup(self.alias) or \
                client._system_host_keys.lookup(self.alias)
            if known and known.get(key.get_name()) == key:
                return
        host = hostname.strip("[]").split("]:")[0]
        port = hostname.rsplit(":", 1)[1] if hostname.startswith("[") else "22"
        raise _UnknownHostKey(
            f"host key of {hostname} is not in known_hosts (it offers {_fingerprint(key)}); "
            f"verify it, then add it: ssh-keyscan -p {port} {host} >> ~/.ssh/known_hosts")


def run_bounded(nodes: Sequence[str], fetch: Callable[[str], object], workers: int,
                limit: float, on_result: Callable[[str, object, Optional[str], float], None]
                ) -> None:
    """Call ``fetch(node)`` for every node, ``workers`` at a time, each in a
    daemon thread; ``on_result(node, answer, error, seconds)`` runs in this
    thread. A node still running ``limit`` seconds after it started is given
    up (``error``) and its late answer ignored."""
    pending = list(nodes)
    running: Dict[str, float] = {}
    done: "queue.Queue[Tuple[str, object, Optional[str]]]" = queue.Queue()

    def work(node: str) -> None:
        try:
            done.put((node, fetch(node), None))
        except FetchError as exc:
            done.put((node, None, str(exc)))
        except Exception as exc:  # a bug or an odd library error: report, do not hang
            done.put((node, None, f"{type(exc).__name__}: {exc}"))

    while pending or running:
        while pending and len(running) < max(1, workers):
            node = pending.pop(0)
            running[node] = time.monotonic()
            threading.Thread(target=work, args=(node,), daemon=True,
                             name=f"collect-{node}").start()
        try:
            node, text, error = done.get(timeout=0.2)
        except queue.Empty:
            node = None
        if node is not None and node in running:
            on_result(node, text, error, time.monotonic() - running.pop(node))
        now = time.monotonic()
        for n, started in list(running.items()):
            if now - started > limit:
                running.pop(n)
                on_result(n, None, f"no answer within {limit:g} s", now - started)


def collect_ssh(nodes: Sequence[str], dest: str, fetcher: SshFetcher, workers: int = 32,
                progress: Optional[Callable[[Result], None]] = None) -> List[Result]:
    """Fetch every node's report over SSH into ``dest``."""
    ensure_dir(dest, "report directory")
    results: Dict[str, Result] = {}

    def on_result(node, got, error, seconds):
        res = _finish(dest, node, got, error, seconds)
        results[node] = res
        if progress is not None:
            progress(res)

    run_bounded(nodes, fetcher.fetch, workers, fetcher.timeout + GRACE, on_result)
    return [results[n] for n in nodes]


def summary(results: Iterable[Result]) -> Tuple[int, int, int]:
    """(collected, failed, failed but a stale report kept)."""
    results = list(results)
    ok = sum(r.ok for r in results)
    stale = sum(1 for r in results if not r.ok and r.stale_kept)
    return ok, len(results) - ok, stale
