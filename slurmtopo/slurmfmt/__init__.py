"""Slurm's file and string formats, one module per format, checks beside them.

One graph (:class:`slurmtopo.inventory.model.Fabric` for the topology, model nodes
for GRES), one writer and reader per format, as NVIDIA topograph's
``pkg/translate`` keeps them:

* :mod:`.slurm_conf` slurm.conf (and the line syntax Slurm's other
  configuration files share: ``Key=Value`` pairs, ``#`` comments, ``\\``
  continuations, case-insensitive keys);
* :mod:`.topology_conf` topology.conf for topology/tree and topology/block,
  :mod:`.topology_yaml` topology.yaml, :mod:`.topology_files` either one
  chosen by name, applied to an inventory, compared; :mod:`.ring_torus`
  topology.yaml's ``ring:`` and ``torus3d:`` sections of 26.05 (Slurm's
  rules for rings and toruses and their trees are
  :mod:`slurmtopo.inventory.ringtree`'s);
* :mod:`.gres_lines` a node's gres.conf lines as slurmd's NVML
  autodetection forms them, :mod:`.gres_conf` the cluster's gres.conf
  written and read back, :mod:`.gres_strings` the GRES strings of
  slurm.conf and of Slurm's commands (one parser);
* :mod:`.checks` the rules of Slurm's own parsers that a file must pass
  before it is written.

Pure: text in, model out (the ``read_*`` helpers read a file through
:func:`slurmtopo.files.fileio.read_text`). It sits below ``admin/``, ``agent/``,
``slurm/``, ``binding/`` and ``api``, which import it; it imports none of
them.
"""
