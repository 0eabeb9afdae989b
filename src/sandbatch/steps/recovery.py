"""A step's crash recovery, as the step sees it: the few calls it makes so that its rerun after
a `kill -9` neither loses nor redoes finished work (docs/resume.md).

The calls a step makes, each at one point of its body:

- `take_over(upstream)`, `settle(upstream)`: the upstream step's outputs are final now that
  this step runs: its noted sandboxes are this step's, its capture is forgotten;
- `claim(handle)`, `claim_new(sandbox)`: use a sandbox no earlier attempt used;
- `clear()`: delete the sandboxes an interrupted attempt created and never handed on;
- `resume(key)`: restore the outputs an interrupted attempt finished from the same inputs
  (`key`), instead of doing the work again;
- `write(files, record_name, record, key)`: write the outputs; with `key`, by way of a
  capture that a rerun can restore, which also hands the step's sandboxes on.

What is kept on disk, and why, is steps.kept's; the kill points of these calls are
core.killpoint's, fired inside them, out of the step's body.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from ..core import killpoint
from ..core.util import write_atomic
from ..sandbox import Provider, Sandbox, SandboxGone
from . import kept

if TYPE_CHECKING:
    from ..contracts.records import Record, SandboxRecord

# in the agent's sandbox: an attempt of the harness step has used it (its edits are in it)
STARTED_MARK = ".sandbatch-harness-started"


class Rollout(Protocol):
    """What recovery needs of a step's context (steps.common.StepContext)."""

    @property
    def dir(self) -> Path: ...
    @property
    def provider(self) -> Provider: ...
    def path(self, name: str) -> Path: ...


class Recovery:
    """The crash-recovery bookkeeping of one step (`step`) of one rollout (`ctx`)."""

    def __init__(self, ctx: Rollout, step: str):
        self.ctx, self.step = ctx, step

    async def clear(self) -> None:
        """Delete the sandboxes an interrupted attempt of this step created and never handed on."""
        await kept.delete_noted(self.ctx.dir, self.step, self.ctx.provider)

    def key(self, *inputs: str, **more: Any) -> dict[str, Any]:
        """The identity of what the outputs are made from: each input file's sha256, and `more`."""
        return {**{name: kept.digest(self.ctx.path(name)) for name in inputs}, **more}

    async def resume(self, key: dict[str, Any],
                     usable: Callable[[Path], Awaitable[bool]] | None = None) -> bool:
        """Restore the outputs an interrupted attempt captured from inputs `key`, unless
        `usable(capture directory)` says what they need is gone (they are forgotten then);
        whether they were restored."""
        d = self.ctx.dir
        found = kept.find(d, self.step, key)
        if found is None:
            return False
        if usable is not None and not await usable(found):
            kept.drop(d, self.step)
            return False
        kept.restore(d, self.step, found)
        kept.forget_sandboxes(d, self.step)  # the restored outputs record them
        return True

    def write(self, files: dict[str, str | bytes | None], record_name: str, record: "Record",
              key: dict[str, Any] | None = None) -> None:
        """The step's outputs: `files` (name -> content; None: written at its path as the step
        ran, an empty file if it never was) and then the record. With `key` (the inputs'
        identity) by way of a capture (steps.kept), which records the sandboxes the step
        created: from then on they are handed on."""
        d = self.ctx.dir
        if key is not None:
            kept.publish(d, self.step, key, files, record_name, record)
            kept.forget_sandboxes(d, self.step)
            return
        for name, content in files.items():
            if content is not None:
                write_atomic(d / name, content)
            elif not (d / name).exists():
                write_atomic(d / name, "")
        record.save(d / record_name)

    def take_over(self, upstream: str) -> None:
        """The sandboxes the `upstream` step noted are this step's from here on: its outputs,
        which record them, are final now that this step runs."""
        kept.forget_sandboxes(self.ctx.dir, upstream)

    def settle(self, upstream: str) -> None:
        """Forget the `upstream` step's capture: Snakemake recorded it finished (this step
        reads its outputs), so a forced rerun of it does the work again."""
        kept.drop(self.ctx.dir, upstream)

    async def claim(self, handle: "SandboxRecord") -> Sandbox | None:
        """The sandbox `handle` records, marked as used from here on, if it is alive and no
        earlier attempt used it; else None (a used one is deleted: its edits must not leak
        into this attempt)."""
        try:
            sandbox = await self.ctx.provider.connect(handle.sandbox_id, handle.spec)
            mark = shlex.quote(f"{sandbox.tmpdir}/{STARTED_MARK}")
            # checked and marked in one command (one round trip less per rollout)
            claimed = await sandbox.exec(f"test ! -e {mark} && : > {mark}", timeout=60)
            if claimed.ok:
                killpoint.reached("claimed")
                return sandbox
            await sandbox.delete()
        except SandboxGone:
            pass
        return None

    async def claim_new(self, sandbox: Sandbox) -> None:
        """Mark a sandbox this attempt created as used (claim's mark)."""
        await sandbox.upload(f"{sandbox.tmpdir}/{STARTED_MARK}", b"")
        killpoint.reached("replaced")
