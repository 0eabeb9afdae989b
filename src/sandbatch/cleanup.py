"""Delete every sandbox a run left behind, by its run label.

Used by `sandbatch stop` and at the end of the aggregate (once every rollout is graded no
sandbox of the run is in use: what is left belongs to killed jobs). Works through
`sandbatch.sandbox.reaper.reap` when that module is present, else through the Provider
API directly (list by label, delete each), which is the same thing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config


def run_labels(cfg: "Config") -> dict[str, str]:
    from .ids import label_value

    return {"sandbatch.run": label_value(cfg.run)}


def reap_run(cfg: "Config") -> list[str]:
    """Ids of the sandboxes deleted (provider options are relative to the working directory)."""
    from .sandbox import get_provider

    return asyncio.run(_reap(get_provider(cfg.sandbox), run_labels(cfg)))


async def _reap(provider, labels: dict[str, str]) -> list[str]:
    try:
        from .sandbox.reaper import reap
    except ImportError:
        reap = None
    async with provider:
        if reap is not None:
            return list(await reap(provider, labels))
        deleted = []
        for info in await provider.list(labels):
            if await provider.delete(info.id):
                deleted.append(info.id)
        return deleted
