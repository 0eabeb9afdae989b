"""Snakemake finds its logger plugins by module name: this one is `--logger sandbatch` (the
workflow's profile selects it). The handler lives in sandbatch.ops.console."""

from sandbatch.ops.console import LogHandler

__all__ = ["LogHandler"]
