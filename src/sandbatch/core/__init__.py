"""Shared basics: the run config, errors, ids, file helpers, kill points, the run instance's identity.
Imports no other sandbatch package."""
