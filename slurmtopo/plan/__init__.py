"""The plan: the choice among the planner's proposals, the loaded
cluster, and what a plan becomes (rank map, plan document, launchers,
NCCL topology files) and is checked against (hazards, task probes)
(docs/design.md).
"""
