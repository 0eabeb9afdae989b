"""Create admission: one token bucket for every step process of a run, in a shared file.

Each rollout's sandbox step is its own process (forked locally, a job on Slurm), so a
limit inside one process limits nothing: at the start of a run hundreds of them would
hit the sandbox service's create endpoint at once. The bucket's state lives in a small
JSON file in the run directory (a shared filesystem on Slurm), read and written under a
POSIX record lock (fcntl.lockf, which NFS supports) and timed by the wall clock, so
every process on every node draws from the same `sandbox.create_rate`.

A 429 or 503 from the service slows everyone down: the rate is halved (down to 1/16 of
the configured one) and no create is admitted before the Retry-After (or one interval)
has passed; each admitted create that succeeds wins back a quarter, up to the configured
rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import time
from pathlib import Path

BURST = 1.0  # creates that may start back to back after a quiet spell
MIN_FACTOR = 1 / 16  # how far 429/503 answers may slow the rate
RECOVER = 1.25  # a succeeded create multiplies the slowed rate by this


class CreateAdmission:
    """`rate` creates per second, shared by every process using the same `path`."""

    def __init__(self, path: str | os.PathLike, rate: float, *, clock=time.time):
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.path, self.rate, self._clock = Path(path), float(rate), clock

    @contextlib.contextmanager
    def _state(self):
        """The bucket's state, locked against every other process while the block runs."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="utf-8") as fh:
            fcntl.lockf(fh, fcntl.LOCK_EX)
            try:
                fh.seek(0)
                try:
                    state = json.loads(fh.read() or "{}")
                except ValueError:
                    state = {}  # a torn file (crash mid-write): start afresh
                now = self._clock()
                state = {"tokens": float(state.get("tokens", BURST)), "stamp": float(state.get("stamp", now)),
                         "factor": float(state.get("factor", 1.0)), "hold_until": float(state.get("hold_until", 0))}
                yield state, now
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps(state))
                fh.flush()
            finally:
                fcntl.lockf(fh, fcntl.LOCK_UN)

    def _try(self) -> float:
        """Take a token: 0.0 if admitted, else the seconds to wait before trying again."""
        with self._state() as (s, now):
            rate = self.rate * s["factor"]
            s["tokens"] = min(BURST, s["tokens"] + max(0.0, now - s["stamp"]) * rate)
            s["stamp"] = now
            if now < s["hold_until"]:
                return s["hold_until"] - now
            if s["tokens"] >= 1.0:
                s["tokens"] -= 1.0
                return 0.0
            return (1.0 - s["tokens"]) / rate

    async def acquire(self) -> float:
        """Wait until this process may start a create; returns the seconds waited."""
        t0 = time.monotonic()
        while (wait := self._try()) > 0:
            # a little jitter, so processes that woke together do not all retry the lock at once
            await asyncio.sleep(wait + random.uniform(0, min(wait, 1.0) * 0.1))
        return time.monotonic() - t0

    def throttled(self, retry_after: float | None = None) -> None:
        """The service answered 429/503: halve the rate, and hold every create for a while."""
        with self._state() as (s, now):
            s["factor"] = max(MIN_FACTOR, s["factor"] / 2)
            hold = retry_after if retry_after is not None else 1.0 / (self.rate * s["factor"])
            s["hold_until"] = max(s["hold_until"], now + min(max(hold, 0.0), 60.0))
            s["tokens"] = min(s["tokens"], 0.0)

    def succeeded(self) -> None:
        """An admitted create went through: win back some of the rate a throttle took."""
        with self._state() as (s, _):
            s["factor"] = min(1.0, s["factor"] * RECOVER)


def admission_for(run_dir: str | os.PathLike, rate: float) -> CreateAdmission:
    """The run's shared create admission (its file lives in the run directory)."""
    return CreateAdmission(Path(run_dir) / "_admission" / "create.json", rate)
