"""``slurmtopo advise``: the parallel layouts to train a model with on N GPUs
of this cluster, ranked by the modelled step, as ready ``plan`` lines.

    slurmtopo advise --inventory etc/examples/h100-32node-fattree.yaml \\
        --model llama3-70b,seq_len=8192,global_batch=256 --gpus 64

See docs/cost-model.md ("The layout advisor").
"""
from __future__ import annotations

import json

import click

from slurmtopo.advisor import advice_json, advise
from slurmtopo.api import load_cluster
from slurmtopo.commands.preview_print import print_parts
from slurmtopo.commands.layout_options import RegistryChoice
from slurmtopo.job.frameworks import registry
from slurmtopo.show.preview import advice_parts


@click.command("advise", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--inventory", "inventory_path", metavar="PATH", required=True,
              help="Inventory file or directory of node reports.")
@click.option("--model", "model", required=True, metavar="SPEC",
              help="The model and how a step feeds it: a preset (llama3-70b, deepseek-v3 ...), "
                   "optionally changed (llama3-70b,seq_len=8192,global_batch=256), or "
                   "layers=...,hidden=...,..., or a Hugging Face config.json "
                   "(path/config.json,seq_len=8192) (docs/cost-model.md, 'The model').")
@click.option("--gpus", type=click.IntRange(1, 1 << 20), required=True,
              help="GPUs to train on.")
@click.option("--top", type=click.IntRange(1, 50), default=5, show_default=True,
              help="How many layouts to show.")
@click.option("--framework", "frameworks", multiple=True,
              type=RegistryChoice(registry.advised),
              help="Lay the model out for this framework only (repeat for several; default: "
                   "Megatron-LM, torchtitan and DeepSpeed).")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking as JSON.")
def command(inventory_path, model, gpus, top, frameworks, as_json):
    """Rank the layouts (framework, TP, PP and interleaving, CP, EP,
    micro-batch, recomputation, distributed optimizer, FSDP, HSDP or a ZeRO
    stage) that fit in memory by their modelled step on this cluster,
    placed by the planner; print the best as ready `slurmtopo plan` lines."""
    cluster = load_cluster(inventory_path)
    a = advise(cluster, model, gpus, inventory_path, top,
               frameworks=tuple(frameworks))
    if as_json:
        click.echo(json.dumps(advice_json(a), separators=(",", ":"), sort_keys=True))
        return
    print_parts(advice_parts(a))
