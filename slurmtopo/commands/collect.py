"""``slurmtopo collect``: gather node reports into one directory."""
from __future__ import annotations

import click

from slurmtopo.commands.cliutil import Failed, echo_err, emit_json, guard, json_option, parse_nodes
from slurmtopo.commands.numbers import FiniteFloat

DEFAULT_COMMAND = "slurmtopo agent discover"


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
                   f"default: '{DEFAULT_COMMAND}').")
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
    from slurmtopo.admin.collect import SshFetcher, collect_dir, summary
    from slurmtopo.errors import SlurmtopoError

    names = parse_nodes(nodes)
    if from_dir:
        if remote_command or read_path:
            raise SlurmtopoError("--from-dir reads files; --command and --read are for SSH")
        results = collect_dir(from_dir, output, names, max_age=max_age)
    else:
        if names is None:
            raise SlurmtopoError("--nodes is required to collect over SSH")
        if remote_command and read_path:
            raise SlurmtopoError("give --command or --read, not both")
        fetcher = SshFetcher(command=None if read_path else (remote_command or DEFAULT_COMMAND),
                             read_path=read_path, timeout=timeout, ssh_config=ssh_config,
                             known_hosts=known_hosts or None, user=user, identity=identity,
                             port=port)
        results = _with_progress(names, output, fetcher, workers, quiet or as_json)
    ok, failed, stale = summary(results)
    if as_json:
        emit_json({"output": output, "collected": ok, "total": len(results), "failed": failed,
                   "stale_kept": stale,
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
    echo_err(f"collected {ok}/{len(results)} report(s) into {output}")
    if failed:
        raise Failed(f"{failed} of {len(results)} node(s) failed ({stale} with a stale "
                     "report kept)")


def _with_progress(names, output, fetcher, workers, quiet):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    from slurmtopo.admin.collect import collect_ssh

    console = Console(stderr=True)
    with Progress(TextColumn("collect"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                  console=console, disable=quiet or not console.is_terminal,
                  transient=False) as progress:
        task = progress.add_task("collect", total=len(names), failed=0)
        failed = [0]

        def tick(res):
            failed[0] += not res.ok
            progress.update(task, advance=1, failed=failed[0])

        return collect_ssh(names, output, fetcher, workers=workers, progress=tick)
