"""Create many sandboxes at once: bounded concurrency, a create-rate limit, per-spec results.

OpenSandbox has no batch-create endpoint, and a burst of creates is what makes servers
answer 429 or race on host ports; so creates are spread by a token bucket and capped in
number, and one failed sandbox never fails the others.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Sequence

from .base import Provider, Sandbox, SandboxSpec


class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up; acquire() waits for one."""

    def __init__(self, rate: float, burst: int = 1, clock=time.monotonic):
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:  # FIFO: waiters are served in arrival order
            while True:
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self.rate)


@dataclass
class CreateResult:
    """The outcome for specs[index]: a sandbox, or the error that stopped it."""

    index: int
    spec: SandboxSpec
    sandbox: Sandbox | None = None
    error: Exception | None = None
    started_at: float = 0.0  # monotonic time the create call began (after the rate limit)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.sandbox is not None


async def create_many(
    provider: Provider,
    specs: Sequence[SandboxSpec],
    *,
    concurrency: int = 16,
    rate: float | None = None,
    burst: int = 1,
) -> list[CreateResult]:
    """Create one sandbox per spec; results in spec order, failures reported per spec.

    At most `concurrency` creates run at once and, with `rate`, at most `rate` start per
    second (bursts up to `burst`). If the caller is cancelled, sandboxes already created
    are deleted before the cancellation propagates.
    """
    gate = asyncio.Semaphore(max(1, concurrency))
    bucket = TokenBucket(rate, burst) if rate else None
    results = [CreateResult(index=i, spec=spec) for i, spec in enumerate(specs)]

    async def one(result: CreateResult) -> None:
        async with gate:
            if bucket is not None:
                await bucket.acquire()
            result.started_at = time.monotonic()
            try:
                result.sandbox = await provider.create(result.spec)
            except Exception as exc:  # reported per sandbox; the others go on
                result.error = exc
            finally:
                result.duration_s = time.monotonic() - result.started_at

    tasks = [asyncio.ensure_future(one(r)) for r in results]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        created = [r.sandbox for r in results if r.sandbox is not None]
        await asyncio.shield(asyncio.gather(*(provider.delete(sb.id) for sb in created), return_exceptions=True))
        raise
    return results
