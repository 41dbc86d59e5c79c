"""``slurmtopo collect``: gather node reports into one directory."""
from __future__ import annotations

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from slurmtopo import api
from slurmtopo.admin import COLLECT_COMMAND
from slurmtopo.commands.cliutil import Failed, echo_err, emit_json, guard, json_option
from slurmtopo.commands.numbers import FiniteFloat


@click.command("collect")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="Directory for the reports (one <node>.yaml each); created if missing.")
@click.option("--nodes", default=None,
              help="Hostlist of nodes, e.g. 'gpu[001-128]' (required for SSH).")
@click.option("--from-dir", "from_dir", type=click.Path(file_okay=False),
              help="Read the reports agents wrote to this (shared) directory instead of SSH.")
@click.option("--max-age", "max_age", type=FiniteFloat(min=0), default=None,
              help="With --from-dir: refuse reports older than this many seconds.")
@click.option("--command", "remote_command", default=None,
              help=f"Command printing the node report on stdout ({{node}} is replaced; "
                   f"default: '{COLLECT_COMMAND}').")
@click.option("--read", "read_path", default=None,
              help="Instead of running the agent, print its last report from this path "
                   "on the node (e.g. /var/lib/slurmtopo/report.yaml; {node} is replaced).")
@click.option("--workers", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="Nodes contacted at the same time.")
@click.option("--timeout", type=FiniteFloat(0.1), default=60.0, show_default=True,
              help="Seconds per node (connect, run, read).")
@click.option("--ssh-config", "ssh_config", type=click.Path(dir_okay=False),
              help="SSH config file (default ~/.ssh/config).")
@click.option("--known-hosts", "known_hosts", multiple=True, type=click.Path(dir_okay=False),
              help="known_hosts file(s) to verify host keys against (default: as ssh does).")
@click.option("--user", default=None, help="SSH user (default: from the SSH config, else you).")
@click.option("--identity", default=None, type=click.Path(dir_okay=False),
              help="Private key file (default: from the SSH config and ~/.ssh).")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="SSH port (default: from the SSH config).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
@guard
def command(output, nodes, from_dir, max_age, remote_command, read_path, workers, timeout,
            ssh_config, known_hosts, user, identity, port, quiet, as_json):
    """Collect node reports, from a shared directory or over SSH.

    A node that fails keeps its last good report in OUTPUT, marked stale.
    Host keys must be in known_hosts: an unknown key is a failure, never
    added. Exits 1 when any node failed.
    """
    bar = _Progress(quiet or as_json)
    try:
        done = api.collect_reports(
            output, nodes=nodes, from_dir=from_dir, max_age=max_age, command=remote_command,
            read_path=read_path, workers=workers, timeout=timeout, ssh_config=ssh_config,
            known_hosts=known_hosts, user=user, identity=identity, port=port,
            progress=bar.update)
    finally:
        bar.stop()
    results, failed, stale = done.results, done.failed, done.stale_kept
    if as_json:
        emit_json({"output": output, "collected": done.collected, "total": len(results),
                   "failed": failed, "stale_kept": stale,
                   "nodes": [{"node": r.node, "ok": r.ok, "error": r.error, "note": r.note,
                              "stale_kept": r.stale_kept} for r in results]})
        if failed:
            raise Failed(f"{failed} of {len(results)} node(s) failed ({stale} with a stale "
                         "report kept)")
        return
    for r in results:
        if r.ok and r.note:
            echo_err(f"{r.node}: {r.note} (report collected)")
        if not r.ok:
            kept = "kept its last report, marked stale" if r.stale_kept else "no report kept"
            echo_err(f"{r.node}: {r.error} ({kept})")
    echo_err(f"collected {done.collected}/{len(results)} report(s) into {output}")
    if failed:
        raise Failed(f"{failed} of {len(results)} node(s) failed ({stale} with a stale "
                     "report kept)")


class _Progress:
    """The progress bar of a collection over SSH, on stderr when it is a
    terminal: started when the api has its nodes, advanced as each answers."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.progress = None
        self.task = None
        self.failed = 0

    def update(self, total: int, res) -> None:
        if res is None:
            self.start(total)
            return
        self.failed += not res.ok
        self.progress.update(self.task, advance=1, failed=self.failed)

    def start(self, total: int) -> None:
        console = Console(stderr=True)
        self.progress = Progress(TextColumn("collect"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                                 console=console, disable=self.quiet or not console.is_terminal,
                                 transient=False)
        self.progress.start()
        self.task = self.progress.add_task("collect", total=total, failed=0)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
