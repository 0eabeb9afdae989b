"""Delete whatever sandboxes a run instance left behind, by label (for every provider).

`reap_run` is the one entry point: the end of every real run (success or error), the end of
the aggregate (once every rollout is graded no sandbox of the run is in use: what is left
belongs to killed jobs), `sandbatch stop` and `sandbatch reap` all call it. `reap` is its
mechanism on an open provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING

from ..core.errors import UserError
from ..core.failures import FailureClass
from ..core.instance import selector
from . import get_provider
from .base import Provider, SandboxError

if TYPE_CHECKING:
    from ..core.config import Config


def reap_run(cfg: "Config", workdir: str | os.PathLike | None = None) -> list[str]:
    """Ids of the run instance's sandboxes deleted; idempotent.

    Selects by the run instance's identity (sandbatch.core.instance), never by run name alone:
    another working directory may use the same name on the same engine. The run's paths
    and provider options are relative to `workdir` (default: the current directory)."""
    with contextlib.chdir(workdir or "."):
        labels = selector(cfg)
        if labels is None:
            return []  # never started in this working directory: nothing of it can exist

        async def go() -> list[str]:
            async with get_provider(cfg.sandbox) as provider:
                return await reap(provider, labels)

        return asyncio.run(go())


async def reap(provider: Provider, labels: dict[str, str], *, concurrency: int = 16) -> list[str]:
    """Delete every sandbox carrying all of `labels`; return the ids this call deleted.

    Idempotent: a sandbox that is already gone (404) is not an error and is not listed, so
    a second call returns []. Deletes that fail are attempted for every sandbox first and
    then reported together as one SandboxError.
    """
    if not labels:
        raise UserError("refusing to reap without labels: that would delete every sandbox on the provider; "
                        "pass the run's labels")
    infos = await provider.list(labels)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(sandbox_id: str) -> bool:
        async with gate:
            return await provider.delete(sandbox_id)

    outcomes = await asyncio.gather(*(one(info.id) for info in infos), return_exceptions=True)
    deleted, failed = [], []
    for info, outcome in zip(infos, outcomes):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome  # cancellation and friends
            failed.append(f"{info.id} ({outcome})")
        elif outcome:
            deleted.append(info.id)
    if failed:
        raise SandboxError(f"reap {labels}: deleted {len(deleted)}, could not delete {len(failed)}: "
                           + "; ".join(failed[:5]), FailureClass.SANDBOX_REAP)
    return deleted
