from slurmtopo.cli import run

run()
