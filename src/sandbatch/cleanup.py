"""Delete every sandbox a run instance left behind, by its identity labels.

Used at the end of every real run (success or error), at the end of the aggregate (once
every rollout is graded no sandbox of the run is in use: what is left belongs to killed
jobs), by `sandbatch stop` and by `sandbatch reap`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config


def reap_run(cfg: "Config") -> list[str]:
    """Ids of the sandboxes deleted; idempotent. Selects by the run instance's identity
    (sandbatch.instance), never by run name alone: another working directory may use the
    same name on the same engine. Provider options are relative to the working directory."""
    from .sandbox import get_provider
    from .sandbox.reaper import reap
    from .steps.sandbox import selector

    labels = selector(cfg)
    if labels is None:
        return []  # never started in this working directory: nothing of it can exist

    async def go() -> list[str]:
        async with get_provider(cfg.sandbox) as provider:
            return await reap(provider, labels)

    return asyncio.run(go())
