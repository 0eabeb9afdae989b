"""Typed artifacts passed between steps: one model per file, written once, read everywhere.

Every step writes its record for every rollout, also when the rollout failed, so that the
aggregate always runs: `status` is one of ok / agent_error / timeout / infra_error and
`failure_class` says what failed (a core.failures.FailureClass: sandbox_create, agent_exit, grader_crash, ...).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Mapping, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, Field

# the record files' names, named to every step from here
from ..core.util import write_json
from .files import (EVENTS, GRADE, HARNESS, INDEX, MODEL_CALLS, PATCH, PATCH_INFO,  # noqa: F401
                          RESPONSE, SANDBOX, TRAJECTORY)
from .sandbox import NetworkRecord, SandboxSpec

# tampered: grade only, the patch changed what grades it and grading.tampering is "fail" (or its code
# reaches into the test runner and grading.suspicious is "fail")
Status = Literal["ok", "agent_error", "timeout", "infra_error", "tampered"]


class IndexLine(BaseModel):
    """A record's status fields, as its line in the rollout's INDEX (contracts/files.py) holds
    them: what `sandbatch status` and `sandbatch rerun-errors` read instead of the record."""

    status: Status = "ok"
    failure_class: str | None = None
    duration_s: float | None = None
    resolved: bool | None = None  # grade only

    @property
    def error(self) -> None:
        """Not indexed (the record holds it)."""
        return None


# the fields of an INDEX line
SUMMARY = tuple(IndexLine.model_fields)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Record(BaseModel):
    status: Status = "ok"
    failure_class: str | None = None
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    phases: dict[str, float] = Field(default_factory=dict)  # seconds per phase of the step (create, prepare, extract, tests)
    attempt: int = 1

    def save(self, path: str | Path) -> None:
        path = Path(path)
        self.index(path)  # the index line first: a record on disk always has its line
        write_json(path, self.model_dump(mode="json"))

    def index(self, path: str | Path) -> None:
        """Append this record's line to the index of the rollout that `path` is in."""
        append_index(path, self.model_dump(mode="json", include=set(SUMMARY)))

    @property
    def failed_infra(self) -> bool:
        return self.status == "infra_error"


R = TypeVar("R", bound=Record)


def load(cls: type[R], path: str | Path) -> R:
    return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))


def append_index(path: str | Path, data: dict[str, Any]) -> None:
    """Append the line of the record `data` saved at `path` to its rollout's index."""
    path = Path(path)
    line = {"record": path.name, **{k: data[k] for k in SUMMARY if k in data}}
    path.parent.mkdir(parents=True, exist_ok=True)  # a record may be the first file of its rollout
    with open(path.parent / INDEX, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def read_index(rollout_dir: str | Path) -> dict[str, IndexLine]:
    """Record file name -> its index line, from the rollout's INDEX (empty if none)."""
    try:
        with open(os.path.join(rollout_dir, INDEX), encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return {}
    out: dict[str, IndexLine] = {}
    for line in lines:
        try:
            entry = json.loads(line)
            out[entry.pop("record")] = IndexLine.model_validate(entry)
        except ValueError:  # cut short by a killed step
            continue
    return out


def summary(rollout_dir: str | Path, name: str, index: dict[str, IndexLine]) -> IndexLine:
    """The index line of record `name`: from `index` (read_index), else from the record itself.

    Raises OSError or ValueError for a record that is missing or not JSON (being replaced).
    """
    if name in index:
        return index[name]
    with open(os.path.join(rollout_dir, name), encoding="utf-8") as fh:
        return IndexLine.model_validate(json.load(fh))


# the steps whose records can end a rollout in an infrastructure error, in chain order
PHASES = ("sandbox", "harness", "patch", "grade")


class Outcome(Protocol):
    """What final_status reads of a phase: a record, or its index line."""

    @property
    def status(self) -> str: ...
    @property
    def failure_class(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...


class Final(NamedTuple):
    status: str
    failure_class: str | None
    failed_phase: str | None  # the phase whose infra error (or tampered grade) decided the status
    error: str | None


def final_status(records: Mapping[str, Outcome]) -> Final:
    """A finished rollout's status, failure class, failed phase and error, from its records
    or their index lines (phase -> either; a missing record counts as ok): the harness's
    status unless a phase failed for the infrastructure (the first such wins), and a tampered
    grade over all. The one derivation the rollouts.jsonl row and `sandbatch status` share."""
    missing = IndexLine()
    harness, grade = records.get("harness", missing), records.get("grade", missing)
    final = Final(harness.status, harness.failure_class or grade.failure_class, None, harness.error or grade.error)
    for phase in PHASES:
        rec = records.get(phase, missing)
        if rec.status == "infra_error":
            final = Final("infra_error", rec.failure_class, phase, rec.error)
            break
    if grade.status == "tampered":  # grading.tampering: fail
        final = final._replace(status="tampered", failure_class=grade.failure_class, failed_phase="grade")
    return final


class RepoHistory(BaseModel):
    """What the agent sandbox's preparation removed from one repository (sandbox.history)."""

    path: str  # "." = the workdir's repository, else a submodule or nested checkout below it
    refs_before: int
    refs_kept: int  # HEAD's branch and the tags HEAD reaches
    objects_before: int
    objects_after: int
    bytes_before: int
    bytes_after: int
    removed_refs: list[str] = Field(default_factory=list)  # the first 20


class HistoryRecord(BaseModel):
    """sandbox.history of an agent sandbox whose repository came with its image."""

    setting: Literal["strip", "keep"]
    refs_removed: int = 0
    objects_removed: int = 0
    bytes_removed: int = 0
    repositories: list[RepoHistory] = Field(default_factory=list)

    @classmethod
    def of(cls, setting: str, repos: list[dict[str, Any]] | None) -> "HistoryRecord":
        """The record of one preparation: `repos` are the strip script's reports (None: kept)."""
        found = [RepoHistory(**r) for r in repos or []]
        return cls(setting=setting, repositories=found,  # type: ignore[arg-type]
                   refs_removed=sum(r.refs_before - r.refs_kept for r in found),
                   objects_removed=sum(r.objects_before - r.objects_after for r in found),
                   bytes_removed=sum(r.bytes_before - r.bytes_after for r in found))


class SandboxRecord(Record):
    """The handle: enough to reconnect to, or recreate, the agent sandbox."""

    provider: str
    sandbox_id: str | None = None
    spec: SandboxSpec
    workdir: str | None = None
    tmpdir: str | None = None
    base_ref: str | None = None  # commit the patch is diffed against
    task_id: str
    instance_id: str
    repeat: int
    expires_at: str | None = None
    recreated: int = 0
    # the repository's future removed before the agent starts (sandbox.history); None: the
    # repository did not come with the image (bundled, workdir snapshot)
    history: HistoryRecord | None = None


class HarnessRecord(Record):
    harness: str
    version: str | None = None
    exit_code: int | None = None
    timed_out: bool = False
    stderr_tail: str = ""
    install_s: float | None = None
    agent_s: float | None = None
    events: int = 0
    unknown_events: int = 0
    metadata: dict[str, Any] = Field(default_factory=dict)
    network: NetworkRecord | None = None  # what the agent's sandbox reached while the agent ran
    # the agent's sandbox when this step replaced the one in sandbox.json (used by an
    # interrupted attempt, or dead): a step never rewrites an upstream step's output
    sandbox: SandboxRecord | None = None


class PatchRecord(Record):
    bytes: int = 0
    files: list[str] = Field(default_factory=list)
    empty: bool = True
    sandbox_deleted: bool = False
    kept_sandbox: SandboxRecord | None = None  # the agent's sandbox, left alive to grade in it


def agent_handle(sandbox: SandboxRecord, harness: HarnessRecord) -> SandboxRecord:
    """The sandbox the agent ran in: the harness step's replacement, else the sandbox step's."""
    return harness.sandbox or sandbox


class GradeRecord(Record):
    reward: float = 0.0
    resolved: bool = False
    patch_empty: bool = False
    patch_applied: bool | None = None
    apply_method: str | None = None
    tests_ran: bool = False
    test_exit_code: int | None = None
    tests_status: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    test_results: dict[str, str] = Field(default_factory=dict)  # test name -> PASSED/FAILED/...
    report: dict[str, Any] = Field(default_factory=dict)  # the benchmark's own per-instance report
    # what of the patch was not graded: [{path, kind, action}] (grading.tamper)
    tampering: list[dict[str, str]] = Field(default_factory=list)
    # added code that reaches into the test runner: [{path, line, text, reason}] (grading.suspicion)
    suspicious: list[dict[str, Any]] = Field(default_factory=list)
    network: NetworkRecord | None = None  # what the grading sandbox reached
    log_path: str | None = None


class Manifest(BaseModel):
    """results/<run>/manifest.json (contracts/files.py's MANIFEST): the aggregate's last file."""

    run: str
    config: dict[str, Any]  # the run's config as the workflow handed it to the aggregate
    started_at: str | None = None  # the first rollout's sandbox step
    finished_at: str
    sandboxes_reaped: int | None = None  # None: the provider could not be asked (`sandbatch stop` reaps too)
    python: str
    platform: str
    versions: dict[str, str] = Field(default_factory=dict)  # of the packages a run depends on
