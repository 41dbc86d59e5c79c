"""``slurmtopo gres``: write one cluster gres.conf from node reports, check one."""
from __future__ import annotations

import click

from slurmtopo import api
from slurmtopo.commands.cliutil import (Messages, checked, guard, json_option, publish_report,
                                        report_check, slurm_version_option, write_options)
from slurmtopo.commands.helpgroup import SentenceGroup


@click.group("gres", cls=SentenceGroup)
def command():
    """Generate or check Slurm's gres.conf."""


@command.command("generate")
@click.option("--reports", required=True, type=click.Path(exists=True),
              help="Node reports (directory of agent reports, or an inventory).")
@write_options
@slurm_version_option
@json_option
@guard
def generate(reports, output, diff, slurm_conf, nodes, force, reconfigure, keep_backups,
             slurm_version, as_json):
    """Write gres.conf for every node of the reports.

    Nodes with identical GPUs share one NodeName=<hostlist> block; lines
    with Links= keep one device each (gres.conf(5)). Checked against
    --slurm-conf: a node with Gres=gpu there must get the same GPUs here.
    """
    msgs = Messages(as_json)
    made = api.generate_gres(reports, slurm_conf=slurm_conf, nodes=nodes,
                             slurm_version=slurm_version, echo=msgs.echo)
    changed = api.publish_file(made, output, diff=diff, force=force, reconfigure=reconfigure,
                               keep_backups=keep_backups, echo=msgs.echo, out=msgs.out)
    publish_report(msgs, made.what, output, diff, changed, made.problems)


@command.command("check")
@click.argument("path", type=click.Path())
@click.option("--slurm-conf", "slurm_conf", type=click.Path(dir_okay=False),
              help="slurm.conf: GPU counts and types must agree with it.")
@json_option
@guard
def check_cmd(path, slurm_conf, as_json):
    """Read an existing gres.conf and check it."""
    report_check(checked(api.check_gres, path, slurm_conf, as_json), as_json)
