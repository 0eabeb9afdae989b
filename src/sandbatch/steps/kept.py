"""What a step keeps of its own work outside its declared outputs, so that its rerun after a
`kill -9` finds it again.

Snakemake (after a failed job) and recovery (sandbatch.ops.owners.recover, after a run killed
mid-job) delete a job's declared outputs, and only those: a step killed after writing its
outputs but before Snakemake recorded the job finished loses them, while the sandbox it
consumed may already be gone. So, under `<rollout>/.kept/<step>/`, a step keeps:

- a capture of its finished outputs, made before they become outputs (`publish`): the
  files, then `manifest.json` with the identity of the inputs they were made from (`key`)
  and each file's sha256, then the outputs as hard links to them (copies where links
  fail). From the manifest on, a rerun with the same key restores them (`find`, `restore`)
  instead of redoing the work; another key, a missing or changed file, and it does not count;
- `sandboxes.json`: the sandboxes it created and has not handed on yet, written right after
  each create, so that a rerun deletes them at once instead of leaving them to the run's end.

A step's body reaches this through the few calls of its `recovery` (steps.recovery).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.util import read_json, write_atomic, write_json
from ..core import killpoint

if TYPE_CHECKING:
    from ..contracts.records import Record

DIR = ".kept"
MANIFEST = "manifest.json"
SANDBOXES = "sandboxes.json"


def _dir(rollout: Path, step: str) -> Path:
    return rollout / DIR / step


def digest(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _link(src: Path, dst: Path) -> None:
    """dst becomes src's content, atomically (a link, or a copy across filesystems)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    killpoint.reached(f"linked-{dst.name}")


def publish(rollout: Path, step: str, key: dict[str, Any], files: dict[str, str | bytes | None],
            record_name: str, record: "Record") -> None:
    """Write the step's outputs by way of a capture: `files` (name -> content; None: already
    written at its output path, as the model proxy writes model_calls.jsonl) and the record,
    staged under .kept/<step>/; then the manifest, the commit point; then each becomes its
    output (a link), the record last, after its line in the rollout's index."""
    d = _dir(rollout, step)
    d.mkdir(parents=True, exist_ok=True)
    (d / MANIFEST).unlink(missing_ok=True)  # a capture of other inputs stops counting first
    for name, content in files.items():
        if content is None:
            _link(rollout / name, d / name)
        else:
            write_atomic(d / name, content)
    write_json(d / record_name, record.model_dump(mode="json"))
    names = [*files, record_name]
    write_json(d / MANIFEST, {"key": key, "files": {name: digest(d / name) for name in names}})
    for name in names[:-1]:
        _link(d / name, rollout / name)
    record.index(rollout / record_name)
    _link(d / record_name, rollout / record_name)


def find(rollout: Path, step: str, key: dict[str, Any]) -> Path | None:
    """The directory of a complete capture made from inputs `key`, else None."""
    d = _dir(rollout, step)
    try:
        manifest = read_json(d / MANIFEST)
        if manifest.get("key") != key:
            return None
        for name, sha in manifest["files"].items():
            if digest(d / name) != sha:
                return None
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return d


def restore(rollout: Path, step: str, found: Path) -> list[str]:
    """Put a capture (from `find`) back as the step's outputs; the names restored."""
    from ..contracts.records import append_index, read_index

    names = list(read_json(found / MANIFEST)["files"])
    for name in names:
        if name == names[-1] and name not in read_index(rollout):  # killed before the record's index line
            append_index(rollout / name, read_json(found / name))
        _link(found / name, rollout / name)
    print(f"sandbatch: {step}: kept outputs of an interrupted attempt restored: {', '.join(names)}",
          file=sys.stderr)
    return names


def drop(rollout: Path, step: str) -> None:
    """Forget the capture: the step that reads these outputs has started, so they are final."""
    d = _dir(rollout, step)
    if d.is_dir():
        (d / MANIFEST).unlink(missing_ok=True)
        for path in d.iterdir():
            if path.name != SANDBOXES:
                path.unlink(missing_ok=True)


def note_sandbox(rollout: Path, step: str, sandbox_id: str) -> None:
    """Record a sandbox the step just created (before anything else happens to it)."""
    ids = noted(rollout, step)
    if sandbox_id not in ids:
        write_json(_dir(rollout, step) / SANDBOXES, [*ids, sandbox_id])


def noted(rollout: Path, step: str) -> list[str]:
    try:
        return list(read_json(_dir(rollout, step) / SANDBOXES))
    except (OSError, ValueError, TypeError):
        return []


def forget_sandboxes(rollout: Path, step: str) -> None:
    """The noted sandboxes are handed on (recorded in an output that another step reads)."""
    (_dir(rollout, step) / SANDBOXES).unlink(missing_ok=True)


async def delete_noted(rollout: Path, step: str, provider) -> list[str]:
    """Delete the sandboxes an interrupted attempt of `step` created and never handed on."""
    ids = noted(rollout, step)
    for sandbox_id in ids:
        if await provider.delete(sandbox_id):
            print(f"sandbatch: {step}: deleted sandbox {sandbox_id} left by an interrupted attempt",
                  file=sys.stderr)
    forget_sandboxes(rollout, step)
    return ids
