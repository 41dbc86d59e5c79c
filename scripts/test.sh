#!/usr/bin/env bash
# The project's test command: installs what the tests need, runs the unit
# tests, then the integration tests against a private Slurm cluster that the
# tests/integration fixture brings up and tears down (scripts/devcluster.py).
#
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh --unit     the unit tests alone: installs only the
#                                   Python packages (no apt, no Slurm)
#   SKIP_DEPS=1 bash scripts/test.sh    do not run install-deps.sh first
#   extra arguments go to both pytest runs (e.g. -x, -k name)
#
# Python packages are installed at the versions CI tested, from
# constraints.txt (docs/dependencies.md). scripts/test-newest.py runs the
# unit tests against the newest releases instead and names any release that
# breaks them.
#
# Integration tests run once per Slurm: the packaged one and every release
# tarball in ../shared/slurm/ (25.11, 26.05; built once into a cached prefix).
# A checkout without ../shared/slurm/ runs the packaged Slurm only and says
# which versions were skipped. SLURMTOPO_IT_VERSIONS="packaged 25.11 26.05"
# (the default) picks a subset.
#
# Exit status: 0 only if every run passes. pytest's exit code 5 ("no tests
# collected") fails the integration run: those tests exist, so collecting
# none means something broke. For the unit run, 5 is accepted only while no
# unit test file exists at all (tests/**/test_*.py outside tests/integration).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"

unit_only=""
if [[ "${1:-}" == "--unit" ]]; then
    unit_only=1
    shift
fi

if [[ -z "${SKIP_DEPS:-}" ]]; then
    bash scripts/install-deps.sh ${unit_only:+--python-only} \
        || { echo "test.sh: install-deps.sh failed" >&2; exit 1; }
fi

# Each integration run gets its own cluster state dir (run_integration
# below), stopped after the run even when pytest was killed; on failure the
# directory (daemon logs under log/) is kept and named.
status=0

# The tests run against their own cluster, never a developer's.
unset SLURM_CONF SLURMTOPO_DEVCLUSTER_DIR SLURMTOPO_IT_REUSE

start=$SECONDS

echo "=== unit tests: pytest -m 'not integration'"
timeout --kill-after=30 900 "$PY" -m pytest -m "not integration" -q "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
    if find tests -name 'test_*.py' -not -path 'tests/integration/*' | grep -q .; then
        echo "test.sh: unit run collected no tests, but unit test files exist" >&2
        status=1
    else
        echo "test.sh: no unit tests yet (pytest exit 5), not a failure"
    fi
elif [[ $rc -ne 0 ]]; then
    echo "test.sh: unit tests failed (exit $rc)" >&2
    status=1
fi

if [[ -n "$unit_only" ]]; then
    echo "=== test.sh --unit: $([[ $status -eq 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - start))s" \
         "(integration tests not run: bash scripts/test.sh runs them)"
    exit $status
fi

# Integration tests, once per Slurm: the packaged one (Debian 12: 22.05, the
# oldest still accepted) and each release tarball in ../shared/slurm/ (built
# once into a cached prefix by install-deps.sh). 25.11 runs with the pyslurm
# backend too and with TopologyParam=SwitchAsNodeRank (docs/slurm.md).
SHARED_SLURM="${SLURMTOPO_SHARED_SLURM:-$ROOT/../shared/slurm}"
ran=() skipped=() failed=()
run_integration() {   # label, then env assignments for the run
    local label=$1; shift
    echo "=== integration tests: Slurm $label (private cluster: pytest -m integration)"
    local dir
    dir="$(mktemp -d /tmp/slurmtopo-it.XXXXXX)"
    current_dir=$dir
    SLURMTOPO_IT_DIR="$dir" env "$@" timeout --kill-after=30 1200 "$PY" -m pytest -m integration -q "${pytest_args[@]}"
    local rc=$?
    "$PY" scripts/devcluster.py down --dir "$dir" >/dev/null 2>&1 || true
    current_dir=""
    if [[ $rc -eq 0 ]]; then
        ran+=("$label"); rm -rf "$dir"
    else
        [[ $rc -eq 5 ]] && echo "test.sh: integration run collected no tests" >&2
        [[ $rc -eq 124 || $rc -eq 137 ]] && echo "test.sh: integration run timed out" >&2
        echo "test.sh: integration tests on Slurm $label failed (exit $rc); logs in $dir/log" >&2
        failed+=("$label"); status=1
    fi
}
pytest_args=("$@")
current_dir=""
# a test.sh killed mid-run still stops the cluster it started
trap '[[ -n "$current_dir" ]] && "$PY" scripts/devcluster.py down --dir "$current_dir" >/dev/null 2>&1' EXIT
versions=" ${SLURMTOPO_IT_VERSIONS:-packaged 25.11 26.05} "

if [[ $versions == *" packaged "* ]]; then
    packaged="$(PATH="/usr/sbin:$PATH" slurmctld -V 2>/dev/null | awk '{print $2}')"
    run_integration "${packaged:-?} (packaged)" SLURMTOPO_IT_SLURM= SLURMTOPO_BACKEND=cli
fi

for version in 25.11 26.05; do
    [[ $versions == *" $version "* ]] || continue
    tarball="$(ls "$SHARED_SLURM"/slurm-"$version".*.tar.gz 2>/dev/null | sort -V | tail -1)"
    if [[ -z "$tarball" ]]; then
        skipped+=("$version (no $SHARED_SLURM/slurm-$version.*.tar.gz)")
        continue
    fi
    prefix="$("$PY" scripts/devcluster.py build --tarball "$tarball")" || {
        echo "test.sh: building Slurm from $tarball failed" >&2
        failed+=("$version (build)"); status=1; continue; }
    label="$(basename "$tarball" .tar.gz | sed 's/^slurm-//')"
    if [[ $version == 25.11 ]]; then
        pyslurm_dir="$(bash scripts/install-pyslurm.sh "$prefix")" || {
            echo "test.sh: pyslurm for $prefix did not build" >&2
            failed+=("$version (pyslurm)"); status=1; continue; }
        run_integration "$label (cli + pyslurm backends, TopologyParam=SwitchAsNodeRank)" \
            SLURMTOPO_IT_SLURM="$prefix" SLURMTOPO_IT_BACKENDS=cli,pyslurm \
            SLURMTOPO_IT_TOPOLOGY_PARAM=SwitchAsNodeRank \
            PYTHONPATH="$pyslurm_dir${PYTHONPATH:+:$PYTHONPATH}"
    else
        run_integration "$label (cli backend)" SLURMTOPO_IT_SLURM="$prefix" SLURMTOPO_BACKEND=cli
    fi
done

echo "=== integration summary"
for r in "${ran[@]}"; do echo "  passed:  Slurm $r"; done
for r in "${failed[@]}"; do echo "  FAILED:  Slurm $r"; done
for r in "${skipped[@]}"; do echo "  SKIPPED: Slurm $r"; done
((${#skipped[@]})) && echo "  (versions above were skipped: their release tarballs are not in $SHARED_SLURM)"

echo "=== test.sh: $([[ $status -eq 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - start))s"
exit $status
