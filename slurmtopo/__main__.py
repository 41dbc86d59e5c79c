from slurmtopo.cli import main

main()
