"""The node agent: discovers one GPU node and reports it.

It runs on every GPU node (``slurmtopo agent discover``/``gres``/``run``)
and writes a *node report*, an inventory document of exactly one node, so
the planner reads a directory of reports with no conversion step.

Sources, in the order the agent trusts them:

* NVML (:mod:`slurmtopo.agent.nvml_discovery`) for GPUs, NVLink, MIG and
  the multi-node NVLink fabric;
* sysfs (:mod:`slurmtopo.agent.sysfs`) for NICs, PCIe paths and the CPU
  layout, which NVML does not describe;
* offline, the text of ``nvidia-smi topo -m`` (:mod:`slurmtopo.agent.smi`),
  which admins already collect with pdsh.

Nothing here imports :mod:`pynvml` at import time: NVML is an argument, so
the tests drive the same code with a fake of it.
"""
from slurmtopo import __version__

AGENT_VERSION = __version__
