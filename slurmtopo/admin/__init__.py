"""Admin tooling: from node reports and the fabric to Slurm's topology files.

Cluster admins regenerate ``topology.conf`` (or ``topology.yaml``) and
``gres.conf`` whenever nodes or cables change. This package does it without
hand edits and without ever leaving slurmctld a broken file:

* :mod:`.collect` gathers node reports (shared directory or SSH);
* :mod:`.ibnetdiscover` parses the fabric, :mod:`.switch_tree` turns it into the
  switch tree Slurm should see (scalable units, levels, logical switches);
* :mod:`.generate` builds the topology and :mod:`slurmtopo.slurmfmt` writes
  and reads Slurm's files, with the checks that refuse output Slurm would
  reject or that drops nodes;
* :mod:`.publish` shows the diff or writes atomically with a backup.

Parsing and generation are pure (text in, model out); only :mod:`.collect`,
:mod:`.publish` and the ``read_*`` helpers touch files or the network.
"""

#: what ``slurmtopo collect`` runs on each node over SSH unless told otherwise:
#: the agent's discovery, which prints the node report (kept here, not in
#: :mod:`.collect`, so the command's --help need not import the collector)
COLLECT_COMMAND = "slurmtopo agent discover"
