#!/usr/bin/env bash
# The project's test command: installs what the tests need, runs the unit
# tests, then the integration tests against a private Slurm cluster that the
# tests/integration fixture brings up and tears down (scripts/devcluster.py).
#
#   bash scripts/test.sh            everything (what CI runs)
#   SKIP_DEPS=1 bash scripts/test.sh    do not run install-deps.sh first
#   extra arguments go to both pytest runs (e.g. -x, -k name)
#
# Exit status: 0 only if both runs pass. pytest's exit code 5 ("no tests
# collected") fails the integration run: those tests exist, so collecting
# none means something broke. For the unit run, 5 is accepted only while no
# unit test file exists at all (tests/**/test_*.py outside tests/integration).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"

if [[ -z "${SKIP_DEPS:-}" ]]; then
    bash scripts/install-deps.sh || { echo "test.sh: install-deps.sh failed" >&2; exit 1; }
fi

# The integration cluster's state dir: known, so a run killed before the
# fixture's teardown still gets its daemons stopped here.
# On failure the directory (daemon logs under log/) is kept and named.
created=""
if [[ -z "${SLURMTOPO_IT_DIR:-}" ]]; then
    SLURMTOPO_IT_DIR="$(mktemp -d /tmp/slurmtopo-it.XXXXXX)"
    created=1
fi
export SLURMTOPO_IT_DIR
status=0
cleanup() {
    "$PY" scripts/devcluster.py down --dir "$SLURMTOPO_IT_DIR" >/dev/null 2>&1 || true
    if [[ $status -eq 0 && -n "$created" ]]; then
        rm -rf "$SLURMTOPO_IT_DIR"
    elif [[ $status -ne 0 && -d "$SLURMTOPO_IT_DIR/log" ]]; then
        echo "test.sh: dev cluster logs kept in $SLURMTOPO_IT_DIR/log" >&2
    fi
}
trap cleanup EXIT

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

echo "=== integration tests: pytest -m integration (private Slurm cluster)"
timeout --kill-after=30 900 "$PY" -m pytest -m integration -q "$@"
rc=$?
if [[ $rc -ne 0 ]]; then
    [[ $rc -eq 5 ]] && echo "test.sh: integration run collected no tests" >&2
    [[ $rc -eq 124 || $rc -eq 137 ]] && echo "test.sh: integration run timed out" >&2
    echo "test.sh: integration tests failed (exit $rc)" >&2
    status=1
fi

echo "=== test.sh: $([[ $status -eq 0 ]] && echo PASSED || echo FAILED) in $((SECONDS - start))s"
exit $status
