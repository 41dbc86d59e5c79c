"""The launch lines of README.md and docs/: every documented `slurmtopo
sbatch` or `slurmtopo plan` line that gives a training command (after
``--`` or with ``--wrap``), and how the integration tests run it on the
dev cluster (issue 32: "every launch line in the docs runs").

:data:`HOW` names, for each line as printed, what
tests/integration/test_framework_ranks.py does with it; a line it does
not run says why. tests/test_docs.py fails when a launch line is added to
the docs without an entry here, or an entry outlives its line.
"""
from __future__ import annotations

import shlex
from typing import Dict, List, Tuple

#: the printed line (its words after `slurmtopo`, shell-joined) -> how the
#: integration test runs it, or "not run: WHY"
HOW: Dict[str, str] = {
    # docs/frameworks/torchtitan.md: the command's own torchrun, once per node
    "sbatch --inventory etc/examples/h100-4node-2leaf.yaml --state none --dry-run --framework "
    "torchtitan --config tests/fixtures/frameworks/train.toml -- torchrun --nnodes 2 "
    "--nproc-per-node 4 train.py": "ranks",
    # docs/frameworks/deepspeed.md: srun starts every rank
    "sbatch --inventory etc/examples/h100-4node-2leaf.yaml --state none --dry-run --framework "
    "deepspeed --world 8 --tp 2 --zero-stage 3 -- python train.py": "ranks",
    # README.md's Submit block, docs/slurm.md's and docs/sbatch.md's: 32 ranks
    "sbatch --inventory /var/lib/slurmtopo/reports --tp 8 --pp 2 --dp 2 --partition gpu "
    "--time 12:00:00 --job-name llama -- python train.py --cfg a.yaml": "submit",
    "sbatch --inventory cluster.yaml --tp 8 --pp 2 --dp 2 --job-name llama --partition gpu "
    "--time 1-00:00:00 -- python train.py --config c.yaml": "submit",
    "plan --inventory etc/examples/h100-4node-2leaf.yaml --tp 8 --pp 2 --dp 2 --job-name llama "
    "--partition gpu --time 1-00:00:00 --output-dir /tmp/plan -- python train.py --config "
    "conf.yaml": "plan-then-sbatch",
    # docs/devcluster.md's walk-through
    "plan --inventory etc/examples/devcluster.yaml --tp 2 --dp 4 --output-dir out/plan -- "
    "python3 train.py": "plan-then-sbatch",
    "sbatch --inventory etc/examples/devcluster.yaml --tp 2 --dp 4 --output out/%x-%j.out -- "
    "sh -c 'echo \"rank $RANK of $WORLD_SIZE on $SLURMD_NODENAME GPUs "
    "$CUDA_VISIBLE_DEVICES\"'": "echo",
    "sbatch --inventory etc/examples/devcluster.yaml --world 64 -- true": "never",
    "sbatch --inventory etc/examples/devcluster.yaml --tp 8 --dp 2 -- true": "queued",
    # refusals: Slurm's own (docs/slurm.md), slurmtopo's before Slurm (docs/sbatch.md)
    "sbatch --inventory inv.yaml --tp 2 --partition nosuch -- true": "slurm-refuses",
    "sbatch --inventory etc/examples/h100-4node-2leaf.yaml --tp 8 --state none --dry-run -N 2 "
    "-- true": "refused",
    # not run
    "plan --inventory etc/examples/h100-32node-fattree.yaml --state "
    "etc/examples/h100-32node-state.yaml --tp 8 --pp 4 --dp 4 --output-dir ./slurmtopo-plan -- "
    "python train.py --config 'my run.yaml'":
        "not run: README's quick start plans 128 GPUs of a 32-node example, the dev cluster "
        "has 32 GPUs (tests/test_docs.py runs the plan)",
    "sbatch --daemon --inventory /etc/slurmtopo/inventory --tp 4 --dp 2 --require tp=nvlink "
    "--prefer dp=leaf -- python train.py":
        "not run: needs the placement daemon (tests/integration/test_daemon.py submits and "
        "releases such jobs)",
    "plan --inventory etc/examples/h100-4node-2leaf.yaml --tp 8 --dp 2 --launcher torchrun "
    "--container-image 'nvcr.io#nvidia/pytorch:24.05-py3' --output-dir /tmp/plan -- python "
    "train.py --lr 3e-4":
        "not run: the dev cluster has no pyxis/enroot (tests/integration/test_slurm_sbatch.py "
        "checks the refusal at submit; tests/test_docs.py runs the plan)",
}


def launch_lines() -> List[Tuple[str, List[str]]]:
    """(where, words after `slurmtopo`) of every documented launch line."""
    from tests.test_docs import shell_commands

    out = []
    for param in shell_commands():
        argv, = param.values
        if argv[0] in ("sbatch", "plan") and ("--" in argv or any(
                w == "--wrap" or w.startswith("--wrap=") for w in argv)):
            out.append((param.id, list(argv)))
    return out


def key(argv) -> str:
    return shlex.join(argv)
