#!/usr/bin/env bash
# Install slurmtopo and plan a job on a bundled example cluster: the first
# command of the README. Needs Python >= 3.9 with pip (installs Debian's
# python3-pip when pip is missing and apt-get is there).
#
#   bash scripts/demo.sh                 # 32-node H100 fat tree, busy state
#   bash scripts/demo.sh --tp 4 --pp 2   # extra options go to `slurmtopo plan`
#
# Runs from any directory: installs the checkout this script is in and writes
# the plan into ./slurmtopo-plan of the directory it was started from.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
# Debian's own python refuses system-wide installs unless told (PEP 668); a
# venv made from it sees the same stdlib marker but installs into itself
if "$PY" -c 'import os, sys, sysconfig; sys.exit(sys.prefix != sys.base_prefix or not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
fi
echo "+ $PY -m pip install ${pip_flags[*]} $ROOT"
# a failed install stops here (set -e), rather than planning with whatever
# slurmtopo was installed before
PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install "${pip_flags[@]}" "$ROOT"

examples="$ROOT/etc/examples"
[[ "$PWD" == "$ROOT" ]] && examples=etc/examples
args=(--inventory "$examples/h100-32node-fattree.yaml"
      --state "$examples/h100-32node-state.yaml"
      --tp 8 --pp 4 --dp 4 --output-dir ./slurmtopo-plan "$@"
      -- python train.py --config "my run.yaml")
printf '+ slurmtopo plan'; printf ' %q' "${args[@]}"; printf '\n'
exec "$PY" -m slurmtopo plan "${args[@]}"
