#!/usr/bin/env bash
# Build pyslurm against a Slurm install prefix (scripts/devcluster.py build)
# into a cached directory of its own, and print that directory: put it on
# PYTHONPATH to use pyslurm with that Slurm only (the system Python never
# sees a pyslurm that does not match the Slurm it talks to).
#
#   bash scripts/install-pyslurm.sh /var/cache/slurmtopo/slurm/slurm-25.11.7-<sha16>-lua
#
# pyslurm 25.11.x builds only against Slurm 25.11 (no release supports 26.05
# yet). Cached by prefix and pyslurm version; about a minute on 2 cores.
set -euo pipefail
PY="${PYTHON:-python3}"
prefix="${1:?usage: install-pyslurm.sh SLURM_PREFIX}"
prefix="$(cd "$prefix" && pwd)"
version="$("$prefix/sbin/slurmctld" -V | awk '{print $2}')"
series="${version%.*}"                       # 25.11.7 -> 25.11
want="pyslurm>=${series}.0,<${series}.99"
cache="${SLURMTOPO_SLURM_CACHE:-/var/cache/slurmtopo/slurm}"
target="$cache/pyslurm-$(basename "$prefix")"
stamp="$target/.slurmtopo-pyslurm"
# (importing pyslurm needs a reachable slurm.conf: libslurm exits the process
# without one, so the check here looks at files, not at an import)
if [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$want" ]] && [[ -f "$target/pyslurm/__init__.py" ]]; then
    echo "$target"
    exit 0
fi
echo "install-pyslurm.sh: building $want against $prefix into $target" >&2
rm -rf "$target"
mkdir -p "$target"
cfg="$(mktemp)"
trap 'rm -f "$cfg"' EXIT
printf '[build_ext]\nparallel=2\n' > "$cfg"
pip_args=(-q --disable-pip-version-check --no-cache-dir --target "$target")
PIP_ROOT_USER_ACTION=ignore DIST_EXTRA_CONFIG="$cfg" PYSLURM_BUILD_JOBS=2 CFLAGS="-O0 -g0" \
    SLURM_INCLUDE_DIR="$prefix/include" SLURM_LIB_DIR="$prefix/lib" \
    "$PY" -m pip install "${pip_args[@]}" "$want" >&2
[[ -f "$target/pyslurm/__init__.py" ]] || { echo "install-pyslurm.sh: no pyslurm in $target" >&2; exit 1; }
printf '%s\n' "$want" > "$stamp"
echo "$target"
