"""``slurmtopo topology``: write Slurm's topology.conf/topology.yaml, check one."""
from __future__ import annotations

import click

from slurmtopo.commands.cliutil import (Messages, guard, json_option, load_fabric, load_reports,
                                    load_slurm_conf, parse_nameset, parse_nodes, parse_rangeset,
                                    parse_sizes, publish_report, read_checked, report_check,
                                    topology_version_option, write_options)
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
    from slurmtopo.admin.generate import build_topology, header
    from slurmtopo.admin.ibnetdiscover import read_ibnetdiscover
    from slurmtopo.admin.publish import publish
    from slurmtopo.slurmfmt.checks import check_plugin, check_text, ring_torus_release
    from slurmtopo.slurmfmt.topology_conf import parse_topology_conf
    from slurmtopo.model import Fabric
    from slurmtopo.slurmfmt.topology_files import (check, describe_changes, read_one_topology,
                                                   read_topology_conf, render)
    from slurmtopo.topology import made_from
    from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml
    from slurmtopo.errors import SlurmtopoError

    if ibnet and fabric_path:
        raise SlurmtopoError("give --ibnetdiscover or --fabric, not both")
    if not ibnet and (hca or rails or allow_missing):
        raise SlurmtopoError("--hca, --rails and --allow-missing select the hosts of an "
                             "--ibnetdiscover dump: give one, or drop them")
    msgs = Messages(as_json)
    slurm = load_slurm_conf(slurm_conf)
    inv = load_reports(reports)
    fabric_doc = load_fabric(fabric_path)
    if fmt == "fabric":
        _generate_fabric(msgs, inv, fabric_doc, fabric_path, ibnet, slurm, nodes, hca, rails,
                         allow_missing, block_sizes, block_name, output, diff, force,
                         keep_backups, reconfigure)
        return
    if fmt is None:
        ours = Fabric() if ibnet else (fabric_doc or (inv.fabric if inv else None) or Fabric())
        if output and output.endswith((".yaml", ".yml")):
            fmt = "yaml"
        elif slurm is not None and (slurm.topology_plugin or "").endswith(("block", "ring")):
            fmt = "block" if slurm.topology_plugin.endswith("block") else "ring"
        else:
            fmt = "ring" if ours.rings else "yaml" if ours.toruses else "tree"
    built = build_topology(
        fmt, ib=read_ibnetdiscover(ibnet) if ibnet else None,
        fabric_doc=fabric_doc, fabric_source=fabric_path, inv=inv, slurm=slurm,
        nodes=parse_nodes(nodes), hcas=parse_nameset(hca, "--hca"),
        rails=parse_rangeset(rails, "--rails"), block_sizes=parse_sizes(block_sizes),
        block_naming=_block_naming(block_name), allow_missing=allow_missing)
    too_old = ring_torus_release(built.fabric, slurm_version)
    if too_old:
        raise SlurmtopoError(too_old)
    for note in built.notes:
        msgs.echo(f"note: {note}")
    what = "topology.yaml" if fmt == "yaml" else "topology.conf"
    text = render(built.fabric, fmt, header(what, fmt, built))
    slurm_nodes = slurm.node_names() if slurm is not None else None
    problems = check_text(text, what) + check(built.fabric, fmt, slurm_nodes)
    problems += check_plugin(fmt, slurm, slurm_version, yaml_beside=_yaml_beside(slurm))
    if fmt == "block":  # is Slurm's node order the blocks'? (TopologyParam=BlockAsNodeRank)
        from slurmtopo.admin.node_rank import node_rank_problems
        problems += node_rank_problems(built.fabric, slurm.topology_param if slurm else None,
                                       slurm_version)
    # what Slurm will read is the text: it must read back as the same topology
    if fmt == "yaml":
        back = [fab.switches for _n, _d, fab in parse_topology_yaml(text, f"<generated {what}>")]
    else:
        back = [parse_topology_conf(text, f"<generated {what}>").switches]
    if (built.fabric.rings or built.fabric.toruses) and \
            [s for sw in back for s in sw] != list(built.fabric.switches):
        raise SlurmtopoError(f"the generated {what} does not read back as the inventory's "
                             "rings or toruses (a slurmtopo bug; nothing written)")

    def changes(_old_text):
        if built.fabric.rings or built.fabric.toruses:  # the old file's ring/torus trees
            old = read_one_topology(output)[1]
            return describe_changes(old if made_from(old) else Fabric(), built.fabric)
        return describe_changes(read_topology_conf(output), built.fabric)

    changed = publish(text, output, what=what, problems=problems, echo=msgs.echo, out=msgs.out,
                      diff=diff, force=force, changes=changes, reconfigure=reconfigure,
                      keep_backups=keep_backups,
                      next_steps=["scontrol reconfigure   (slurmctld rereads the topology; "
                                  "or pass --reconfigure)"])
    publish_report(msgs, what, output, diff, changed, problems)


@command.command("check")
@click.argument("path", type=click.Path())
@click.option("--slurm-conf", "slurm_conf", type=click.Path(dir_okay=False),
              help="slurm.conf whose nodes must all be covered.")
@json_option
@guard
def check_cmd(path, slurm_conf, as_json):
    """Read an existing topology.conf/topology.yaml and check it."""
    from slurmtopo.slurmfmt.checks import check_plugin, check_text
    from slurmtopo.slurmfmt.topology_files import check, is_yaml_path, topology_from_text
    from slurmtopo.topology import switch_levels

    text, fabric = read_checked(path, topology_from_text, as_json)
    slurm = load_slurm_conf(slurm_conf)
    fmt = "yaml" if is_yaml_path(path) else ("block" if fabric.blocks else "tree")
    rings = _rings(text, path, fabric)  # 26.05 ring/torus3d: checked as they were read
    if rings and not fabric.blocks and (fmt == "tree" or not fabric.switches):
        report_check(path, check_text(text, path), rings, as_json)
        return
    problems = check_text(text, path) + \
        check(fabric, fmt, slurm.node_names() if slurm else None)
    problems += check_plugin(fmt, slurm)
    if fmt == "block":  # is Slurm's node order the blocks'? (TopologyParam=BlockAsNodeRank)
        from slurmtopo.admin.node_rank import node_rank_problems
        problems += node_rank_problems(fabric, slurm.topology_param if slurm else None)
    parts = []
    if fabric.switches:
        levels = 1 + max(switch_levels(fabric).values())
        hosts = {h for s in fabric.switches for h in s.nodes}
        parts.append(f"{len(fabric.switches)} switches, {levels} level(s), {len(hosts)} nodes")
    if fabric.blocks:
        parts.append(f"{len(fabric.blocks)} blocks"
                     + (f", BlockSizes={','.join(map(str, fabric.block_sizes))}"
                        if fabric.block_sizes else ""))
    report_check(path, problems, "; ".join(parts + ([rings] if rings else [])) or "empty",
                 as_json)


def _generate_fabric(msgs, inv, fabric_doc, fabric_path, ibnet, slurm, nodes, hca, rails,
                     allow_missing, block_sizes, block_name, output, diff, force, keep_backups,
                     reconfigure) -> None:
    """``topology generate --format fabric``: the fabric (switches from
    ibnetdiscover or a Slurm topology.conf/topology.yaml, blocks from the
    reports' NVLink domains) as the ``slurmtopo: fabric`` document the
    planner reads beside the node reports (docs/admin.md, "From the fabric
    to the planner"). A fabric document already among the reports is the
    one being replaced, so it is not a source; hosts without a report are
    left out (a note counts them): the planner plans only on reported
    nodes, and a fabric naming others does not load with them."""
    from dataclasses import replace as dc_replace

    from slurmtopo.admin.generate import build_topology
    from slurmtopo.admin.ibnetdiscover import read_ibnetdiscover
    from slurmtopo.admin.publish import publish
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.inventory import dump_inventory, parse_document_text
    from slurmtopo.model import Fabric, Inventory
    from slurmtopo.slurmfmt.topology_files import apply_fabric, describe_changes

    if reconfigure:
        raise SlurmtopoError("--reconfigure: a fabric document is slurmtopo's, not Slurm's "
                             "(plan and sbatch read it as it is written)")
    if not (ibnet or fabric_path):
        raise SlurmtopoError("--format fabric needs the network: give --ibnetdiscover FILE, or "
                             "--fabric with Slurm's topology.conf or topology.yaml")
    if inv is not None:
        inv = dc_replace(inv, fabric=Fabric())
    built = build_topology(
        "yaml", ib=read_ibnetdiscover(ibnet) if ibnet else None, fabric_doc=fabric_doc,
        fabric_source=fabric_path, inv=inv, slurm=slurm, nodes=parse_nodes(nodes),
        hcas=parse_nameset(hca, "--hca"), rails=parse_rangeset(rails, "--rails"),
        block_sizes=parse_sizes(block_sizes), block_naming=_block_naming(block_name),
        allow_missing=allow_missing)
    fabric = built.fabric
    if fabric_doc is not None and (fabric_doc.rings or fabric_doc.toruses):
        fabric = Fabric(rings=fabric_doc.rings, toruses=fabric_doc.toruses)
    elif inv is not None:
        fabric = apply_fabric(inv, fabric, whole=True).fabric
        named = {h for s in built.fabric.switches for h in s.nodes} | \
            {h for b in built.fabric.blocks for h in b.nodes}
        unreported = sorted(named - set(inv.nodes))
        if unreported:
            built.notes.append(f"{len(unreported)} host(s) of the fabric have no node report "
                               "and are left out (the planner plans on reported nodes only)")
    for note in built.notes:
        msgs.echo(f"note: {note}")
    text = ("# slurmtopo fabric document, generated by `slurmtopo topology generate --format "
            "fabric`\n# from " + (", ".join(built.sources) or "nothing") + "\n"
            + dump_inventory(Inventory(nodes={}, fabric=fabric), kind="fabric"))
    parse_document_text(text, "<generated fabric>")  # reads back, or nothing is written

    def changes(old_text):
        return describe_changes(parse_document_text(old_text, output).fabric, fabric)

    changed = publish(text, output, what="fabric document", problems=[], echo=msgs.echo,
                      out=msgs.out, diff=diff, force=force, changes=changes,
                      keep_backups=keep_backups,
                      next_steps=["slurmtopo plan --inventory DIR ...   (reads it with the "
                                  "node reports of DIR)"])
    publish_report(msgs, "fabric document", output, diff, changed, [])


def _yaml_beside(slurm) -> bool:
    """Is there a topology.yaml next to slurm.conf (where Slurm 25.05+ reads
    it, ignoring TopologyPlugin and topology.conf)?"""
    import os

    if slurm is None or not slurm.path:
        return False
    return os.path.exists(os.path.join(os.path.dirname(os.path.abspath(slurm.path)),
                                       "topology.yaml"))


def _block_naming(value):
    """``--block-name REGEXP=FORMAT`` (split at the last '=': a format has none)."""
    if value is None:
        return None
    from slurmtopo.admin.block_domains import BlockNaming
    from slurmtopo.errors import SlurmtopoError
    regexp, eq, fmt = value.rpartition("=")
    if not eq or not regexp or not fmt:
        raise SlurmtopoError(f"--block-name wants REGEXP=FORMAT, got {value!r}")
    naming = BlockNaming(regexp, fmt)
    naming.compiled()
    return naming


def _rings(text: str, path: str, fabric) -> str:
    """What rings and toruses a topology file holds, for ``topology
    check``'s summary ("" when none): a topology.conf's rings are its
    fabric, a topology.yaml's are read again (its checked fabric leaves them
    out)."""
    from slurmtopo.slurmfmt.topology_files import is_yaml_path
    from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml
    from slurmtopo.topology import made_from

    if is_yaml_path(path):
        found = [(name, fab) for name, _default, fab in parse_topology_yaml(text, path)
                 if made_from(fab)]
    else:
        found = [("", fabric)] if made_from(fabric) else []
    out = []
    for name, fab in found:
        kind = made_from(fab)
        units = sorted({(s.description or "").split()[-1] for s in fab.switches})
        hosts = {h for s in fab.switches for h in s.nodes}
        what = {"ring": ("ring", "rings"), "torus3d": ("torus", "toruses")}[kind][len(units) != 1]
        out.append(f"topology/{kind}{' ' + repr(name) if name else ''}: {len(units)} {what}, "
                   f"{len(hosts)} nodes")
    return "; ".join(out)
