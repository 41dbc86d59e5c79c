"""``slurmtopo topology``: write Slurm's topology.conf/topology.yaml, check one."""
from __future__ import annotations

import click

from slurmtopo import api
from slurmtopo.commands.cliutil import (Messages, checked, guard, json_option, publish_report,
                                        report_check, topology_version_option, write_options)
from slurmtopo.commands.helpgroup import SentenceGroup


@click.group("topology", cls=SentenceGroup)
def command():
    """Generate or check Slurm's network topology file."""


@command.command("generate")
@click.option("--reports", type=click.Path(exists=True),
              help="Node reports (directory of agent reports, or an inventory).")
@click.option("--ibnetdiscover", "ibnet", type=click.Path(exists=True, dir_okay=False),
              help="Output of ibnetdiscover (default format).")
@click.option("--fabric", "fabric_path", type=click.Path(exists=True, dir_okay=False),
              help="A fabric description instead: 'slurmtopo: fabric' YAML (Ethernet/RoCE), "
                   "or an existing topology.conf/topology.yaml to convert.")
@click.option("--format", "fmt", type=click.Choice(["tree", "block", "ring", "yaml", "fabric"]),
              default=None,
              help="topology/tree, topology/block, topology/ring (Slurm 26.05+; the "
                   "inventory's rings) or topology.yaml (Slurm 25.05+; 26.05+ for rings and "
                   "toruses); or fabric: the 'slurmtopo: fabric' document plan and sbatch "
                   "read, to put in the node-report directory (its hosts: those with a "
                   "report, with --reports). Default: yaml for a .yaml output, block or ring "
                   "if slurm.conf says so, ring for an inventory with rings, yaml for one "
                   "with toruses, else tree.")
@click.option("--hca", default=None,
              help="Compute HCAs by name, e.g. 'mlx5_[0-7]' (others are storage); "
                   "mlx5_N also selects HCA-(N+1), the older name of the same port.")
@click.option("--rails", default=None,
              help="Compute rails by number, e.g. '0-7' (mlx5_N and HCA-(N+1) are rail N).")
@click.option("--allow-missing", "allow_missing", is_flag=True,
              help="Write even when the HCA selection leaves hosts of the fabric out "
                   "(by default that stops with the counts per reason).")
@click.option("--block-sizes", "block_sizes", default=None,
              help="BlockSizes, e.g. 18,36,72 (default: smallest block and its doublings).")
@click.option("--block-name", "block_name", default=None, metavar="REGEXP=FORMAT",
              help="Name blocks from their node names, as topograph's blockName: REGEXP "
                   "(searched in each node name) and FORMAT with $1/${name} groups, e.g. "
                   "'r([0-9]+)-=rack$1'. Every node of a block must give the same name.")
@write_options
@topology_version_option
@json_option
@guard
def generate(reports, ibnet, fabric_path, fmt, hca, rails, allow_missing, block_sizes,
             block_name, output,
             diff, slurm_conf, nodes, force, reconfigure, keep_backups, slurm_version, as_json):
    """Write topology.conf (or topology.yaml) from the fabric and node reports.

    With only --ibnetdiscover, the hosts are the named HCAs it finds. The
    file is checked before it is written: nothing Slurm would reject (a
    format --slurm-conf's TopologyPlugin cannot read included), no node of
    --slurm-conf left off every switch (--force overrides that).
    """
    msgs = Messages(as_json)
    made = api.generate_topology(
        reports=reports, ibnetdiscover=ibnet, fabric=fabric_path, fmt=fmt, hca=hca, rails=rails,
        allow_missing=allow_missing, block_sizes=block_sizes, block_name=block_name,
        slurm_conf=slurm_conf, nodes=nodes, output=output, slurm_version=slurm_version,
        reconfigure=reconfigure, echo=msgs.echo)
    changed = api.publish_file(made, output, diff=diff, force=force, reconfigure=reconfigure,
                               keep_backups=keep_backups, echo=msgs.echo, out=msgs.out)
    publish_report(msgs, made.what, output, diff, changed, made.problems)


@command.command("check")
@click.argument("path", type=click.Path())
@click.option("--slurm-conf", "slurm_conf", type=click.Path(dir_okay=False),
              help="slurm.conf whose nodes must all be covered.")
@json_option
@guard
def check_cmd(path, slurm_conf, as_json):
    """Read an existing topology.conf/topology.yaml and check it."""
    report_check(checked(api.check_topology, path, slurm_conf, as_json), as_json)
