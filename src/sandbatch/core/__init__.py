"""Shared basics every other package uses: the run config, errors, ids, small file helpers,
kill points, the run instance's identity. Imports no other sandbatch package."""
