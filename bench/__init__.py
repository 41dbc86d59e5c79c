"""slurmtopo benchmarks: placement quality and planner speed.

Run everything with ``python -m bench.run`` (``--quick`` for a short pass);
see docs/benchmarks.md for what is measured and the latest numbers.

* :mod:`bench.scenarios` -- seeded generator of clusters, busy states and jobs
* :mod:`bench.quality`   -- modelled step communication time: slurmtopo vs
  baselines vs the lower bound
* :mod:`bench.speed`     -- planner wall time / peak memory at scale, inventory
  load, agent discovery and topology.conf generation
* :mod:`bench.run`       -- the one command: tables, JSON, plots
"""
