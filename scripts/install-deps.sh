#!/usr/bin/env bash
# Install everything slurmtopo's tests need on Debian 12 (run as root).
#
#   * Slurm 22.05 (slurmctld, slurmd, client tools) and munge, used by the
#     dev cluster (scripts/devcluster.py) and the integration tests;
#   * openssh-server, used by the sshd-marked tests;
#   * Debian's python3 and slurmtopo's runtime dependencies as Debian packages,
#     for the integration tests that run slurmtopo as unprivileged users;
#   * when ../shared/slurm/ holds Slurm release tarballs: what building them
#     needs (scripts/test.sh builds them once into a cached prefix with
#     scripts/devcluster.py build, and pyslurm with scripts/install-pyslurm.sh);
#   * the project itself, editable, with its test, bench, metrics and
#     frameworks extras (metrics: prometheus-client, the daemon's
#     Prometheus metrics; frameworks: torch, for the integration tests' real
#     torch.distributed ranks; PyPI's Linux wheel is the CUDA build, about
#     3 GB to fetch with its nvidia-* libraries and 5.3 GB installed).
#
# Python packages come at the versions CI tested: constraints.txt pins
# them (and everything they pull in), so two installs a month apart get the
# same releases; docs/dependencies.md states the tested range of each.
#
#   bash scripts/install-deps.sh                 everything above
#   bash scripts/install-deps.sh --python-only   the Python packages alone
#                                                (what the unit tests need)
#
# Idempotent: a second run only re-checks (a few seconds). No daemon is
# started: the packages' init scripts are held back with a temporary
# policy-rc.d, and the dev cluster runs its own private daemons anyway.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
python_only=""
case "${1:-}" in
    --python-only) python_only=1 ;;
    "") ;;
    *) echo "install-deps.sh: unknown argument ${1} (only --python-only)" >&2; exit 2 ;;
esac
PKGS=(slurmctld slurmd slurm-client munge openssh-server)
# Standalone Lua 5.4 and 5.1, to run slurmtopo's cli_filter/job_submit
# scripts (slurmtopo/data/hooks/*.lua) outside Slurm in the unit tests under
# both dialects: Debian's packaged 22.05 plugins embed Lua 5.1, the built
# 25.11/26.05 ones Lua 5.4.
PKGS+=(lua5.4 lua5.1)
# Debian's own python3 with slurmtopo's runtime dependencies: the
# integration tests run slurmtopo as unprivileged users (docs/security.md),
# who cannot run a Python installed under /root.
PKGS+=(python3 python3-yaml python3-click python3-rich python3-clustershell python3-defusedxml
       python3-prometheus-client)
SHARED_SLURM="${SLURMTOPO_SHARED_SLURM:-$ROOT/../shared/slurm}"
if ls "$SHARED_SLURM"/slurm-*.tar.gz >/dev/null 2>&1; then
    PKGS+=(build-essential pkg-config libmunge-dev libjson-c-dev libyaml-dev
           libdbus-1-dev libhttp-parser-dev
           # cli_filter/lua and job_submit/lua (devcluster.py builds --with-lua)
           liblua5.4-dev)
fi

need_apt=()
[[ -n "$python_only" ]] && PKGS=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        need_apt+=("$p")
    fi
done

if [[ -n "$python_only" ]]; then
    echo "install-deps.sh: --python-only: no apt packages"
elif ((${#need_apt[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "install-deps.sh: need root to apt-get install: ${need_apt[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # man-db's trigger rebuilds the whole man index after every install and
    # costs minutes; turn it off first.
    echo 'man-db man-db/auto-update boolean false' | debconf-set-selections 2>/dev/null || true
    rm -f /var/lib/man-db/auto-update
    # Keep the packages' init scripts from starting system-wide munged/sshd/
    # slurm daemons (the dev cluster runs its own); only if no policy exists.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    echo "install-deps.sh: apt-get install ${need_apt[*]}"
    # Only refresh the package lists when they are missing or a first try fails.
    if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
        apt-get update -q
    fi
    if ! apt-get install -y -q --no-install-recommends "${need_apt[@]}"; then
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${need_apt[@]}"
    fi
else
    echo "install-deps.sh: apt packages already installed: ${PKGS[*]}"
fi

# The project, editable, with test and bench extras. Skipped when nothing
# that pip looks at changed since the last successful install from this
# checkout (FORCE_DEPS=1 reinstalls anyway). Where slurmtopo imports from
# is asked with -I: without it the working directory (this checkout) comes
# first on sys.path and hides an editable install of another checkout.
stamp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/slurmtopo"
stamp="$stamp_dir/install-deps.$(printf '%s' "$ROOT" | sha256sum | cut -c1-16)"
want="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/constraints.txt" 2>/dev/null | sha256sum | cut -c1-32) $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
where="$("$PY" -I -c 'import os, slurmtopo; print(os.path.dirname(os.path.dirname(os.path.abspath(slurmtopo.__file__))))' 2>/dev/null || true)"
if [[ -z "${FORCE_DEPS:-}" && -f "$stamp" && "$(cat "$stamp")" == "$want" && "$where" == "$ROOT" ]] \
        && "$PY" -m pip check >/dev/null 2>&1; then
    echo "install-deps.sh: python packages up to date (FORCE_DEPS=1 to reinstall)"
else
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
        echo "install-deps.sh: $PY has no pip; apt-get install python3-pip"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pip
    fi
    pip_args=(-q --disable-pip-version-check)
    # Debian's own python3 refuses pip installs (PEP 668) unless told otherwise;
    # pyenv's and venvs do not carry the marker.
    if [[ -e "$("$PY" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]] \
            && [[ -z "${VIRTUAL_ENV:-}" ]]; then
        pip_args+=(--break-system-packages)
    fi
    PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install "${pip_args[@]}" \
        -c "$ROOT/constraints.txt" -e "${ROOT}[test,bench,frameworks,metrics]"
    mkdir -p "$stamp_dir" && printf '%s\n' "$want" > "$stamp"
fi
echo "install-deps.sh: done"
