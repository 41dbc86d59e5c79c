"""Fakes of the outside world (NVML, sysfs, Slurm) for the tests."""
