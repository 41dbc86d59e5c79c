"""What a job asks and runs: the request, the parallel groups, the
workload, each framework's groups (docs/design.md).
"""
