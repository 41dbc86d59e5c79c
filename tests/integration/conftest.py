"""A real Slurm cluster for the integration tests (scripts/devcluster.py).

Every test under tests/integration is marked ``integration``. Unit runs
deselect them (``pytest -m "not integration"``); ``pytest -m integration``
runs them against a private cluster that the session-scoped ``devcluster``
fixture brings up once (4 nodes x 8 fake GPUs, two leaf switches under one
spine) and always tears down. Without Slurm installed (or without root) the
fixture *fails* with the reason: integration tests never skip themselves
into green.

Environment knobs:

* ``SLURMTOPO_IT_SLURM``: which Slurm to test, an install prefix or a
  release tarball (built once into the cache, see ``devcluster.py build``);
  empty or unset: the packaged Slurm (/usr/sbin, /usr/bin).
* ``SLURMTOPO_IT_TOPOLOGY_PARAM``: ``TopologyParam=`` for every test
  cluster (scripts/test.sh runs 25.11 with ``SwitchAsNodeRank``).
* ``SLURMTOPO_IT_DIR``: the cluster's state directory (default: a pytest
  temp dir). scripts/test.sh sets it so it can clean up after a killed run.
* ``SLURMTOPO_IT_REUSE=DIR``: use the dev cluster already running in DIR
  (``scripts/devcluster.py up --dir DIR``) and leave it running; for fast
  edit-test loops. Tests that reconfigure it put the defaults back.

The fixture's object (:class:`Cluster`)::

    devcluster.env            dict for subprocess (SLURM_CONF, PATH)
    devcluster.dir            Path of the state dir (etc/, log/, dev/, ...)
    devcluster.conf           Path of slurm.conf
    devcluster.nodes          ["node1", ..., "node4"]
    devcluster.gpus_per_node  8
    devcluster.partition      "gpu"
    devcluster.run(cmd, check=True, timeout=60) -> CompletedProcess (text)
    devcluster.sbatch(*args, wrap=None, script=None) -> int job id
    devcluster.wait_job(jobid, timeout=60) -> final state ("COMPLETED", ...)
    devcluster.job(jobid) -> dict of `scontrol -d -o show job` fields (+ "_raw")
    devcluster.gpus(jobid) -> {"node1": [0, 1], ...} GPU indices per node
    devcluster.output(jobid) -> text of DIR/out/<jobid>.out (sbatch's default -o)
    devcluster.wait_state(jobid, states, timeout=30) -> state once in states
    devcluster.reconfigure(topology_conf=None, gres_conf=None)  # paths or text
    devcluster.restart_ctld()
    devcluster.reset()        # back to the default gres.conf/topology.conf
    devcluster.cancel_all()   # scancel everything and wait for idle nodes
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, Optional, Union

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


from tests.integration.helpers import (Cluster, devcluster_mod, it_config, it_slurm,  # noqa: F401
                                       it_version)
DevClusterError = devcluster_mod.DevClusterError

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark everything collected from tests/integration as ``integration``
    (before -m deselects anything)."""
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def devcluster(tmp_path_factory):
    reuse = os.environ.get("SLURMTOPO_IT_REUSE")
    if reuse:
        try:
            dc = devcluster_mod.DevCluster(reuse)
            dc.wait_idle(timeout=10, allow_busy=True)
        except DevClusterError as exc:
            pytest.fail(f"SLURMTOPO_IT_REUSE={reuse}: no usable dev cluster there: {exc}", pytrace=False)
        yield Cluster(dc)
        return
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (the dev cluster mknods fake GPUs and runs "
                    "slurmd as root)", pytrace=False)
    state_dir = os.environ.get("SLURMTOPO_IT_DIR") or str(tmp_path_factory.mktemp("devcluster"))
    cfg = it_config(dir=state_dir, nodes=4, gpus=8, leaves=2,
                    port=devcluster_mod.free_port_base(4))
    try:
        dc = devcluster_mod.DevCluster.up(cfg)
    except DevClusterError as exc:
        pytest.fail(f"dev cluster did not come up: {exc}", pytrace=False)
    try:
        yield Cluster(dc)
    finally:
        dc.down()


@pytest.fixture(scope="session")
def users(devcluster):
    """Two unprivileged users of one group and a group-shared directory on
    the dev cluster (tests/integration/users.py)."""
    from tests.integration.users import Users

    u = Users(devcluster.env, devcluster.dir)
    try:
        yield u
    finally:
        u.close()


@pytest.fixture(autouse=True)
def _no_jobs_left(request):
    """Tests start on an idle cluster: cancel whatever a test left behind."""
    yield
    if "devcluster" in request.fixturenames:
        try:
            cluster = request.getfixturevalue("devcluster")
        except (Exception, pytest.fail.Exception):   # the fixture itself failed: reported already
            return
        cluster.cancel_all()
