"""How a run is reported: metrics, report.md, plots, comparing two runs, the trajectory viewer.
May import core, contracts, tasks, trace and rollout; never a step."""
