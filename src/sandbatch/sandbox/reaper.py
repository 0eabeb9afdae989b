"""Delete, by label, whatever sandboxes a run left behind (for every provider)."""

from __future__ import annotations

import asyncio

from ..errors import UserError
from .base import Provider, SandboxError


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
                           + "; ".join(failed[:5]), "sandbox_reap")
    return deleted
