#!/usr/bin/env bash
# Install slurmtopo and plan a job on a bundled example cluster: the first
# command of the README. Needs Python >= 3.9 with pip (installs Debian's
# python3-pip when pip is missing and apt-get is there).
#
#   bash scripts/demo.sh                 # 32-node H100 fat tree, busy state
#   bash scripts/demo.sh --tp 4 --pp 2   # extra options go to `slurmtopo plan`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"

if ! "$PY" -m pip --version >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null
    else
        echo "demo.sh: $PY has no pip; install pip first" >&2
        exit 1
    fi
fi
pip_flags=(-q)
# Debian's own python refuses system-wide installs unless told (PEP 668)
if "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
fi
echo "+ $PY -m pip install ${pip_flags[*]} ."
"$PY" -m pip install "${pip_flags[@]}" . 2>&1 | grep -v "Running pip as the 'root' user" || true

args=(--inventory etc/examples/h100-32node-fattree.yaml
      --state etc/examples/h100-32node-state.yaml
      --tp 8 --pp 4 --dp 4 --output-dir ./slurmtopo-plan "$@"
      -- python train.py --config "my run.yaml")
echo "+ slurmtopo plan ${args[*]}"
exec "$PY" -m slurmtopo plan "${args[@]}"
