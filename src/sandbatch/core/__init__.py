"""Shared basics: the run config, errors, ids, file helpers, kill points, the run instance's identity,
the rollout's record file names, a model_calls.jsonl line. Imports no other sandbatch package."""
