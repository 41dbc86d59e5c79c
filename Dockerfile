# slurmtopo in a container: the planner, the submit wrapper and the admin
# tooling. The node agent needs the host's NVIDIA driver (libnvidia-ml.so):
# run it with the NVIDIA container toolkit (`--gpus all`) and /sys mounted.
# Build: docker build -t slurmtopo .
# Use:   docker run --rm -v "$PWD:/work" -w /work slurmtopo plan --inventory etc/examples/h100-4node-2leaf.yaml --tp 8 --pp 2 --dp 2 -- python train.py
FROM python:3.11-slim-bookworm

# slurm-client gives sbatch/squeue/sinfo/scontrol for `slurmtopo sbatch`
# and the live-state backend; openssh-client for `slurmtopo collect`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends slurm-client openssh-client \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/slurmtopo
COPY setup.cfg pyproject.toml README.md ./
COPY slurmtopo ./slurmtopo
COPY etc ./etc
RUN pip install --no-cache-dir '.[collect]' \
 && useradd --create-home --uid 10001 slurmtopo

USER slurmtopo
ENTRYPOINT ["slurmtopo"]
CMD ["--help"]
