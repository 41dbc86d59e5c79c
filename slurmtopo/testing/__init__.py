"""Test doubles of the outside world that slurmtopo's tests and benchmarks
share, and a site's own tests may use (docs/api.md, "Testing against
slurmtopo"):

* :mod:`.slurm_backend`: :class:`~.slurm_backend.FakeSlurm`, the Slurm
  backend interface in memory (submit, hold, release, a scheduler as
  cons_tres allocates), for code that takes a backend (``api.submit``, the
  placement daemon, the start-time step);
* :mod:`.fake_pynvml`: :class:`~.fake_pynvml.FakeNvml`, the pynvml
  functions the node agent calls, answering as NVML on a machine described
  by a YAML fixture (needs nvidia-ml-py for pynvml's own types);
* :mod:`.fake_sysfs`: :func:`~.fake_sysfs.build_sysfs`, a /sys and /proc
  tree for the same machine.

Nothing else in the package imports them (tests/test_import_graph.py), and
this module imports none of them, so pynvml stays optional. The fakes only
the tests use (Slurm's command-line tools on PATH, libslurm under pyslurm)
stay in tests/fakes.
"""
