"""One line of rollouts.jsonl: a rollout's step records summed up (rollout/rows.py builds it,
the aggregate writes it; metrics, the report, the plots, the viewer, compare and the exports
read it as attributes).

The fields' order is the line's key order. Every field but the rollout's identity has a
default, so that rows an older sandbatch wrote (without the later fields) still read.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from pydantic import BaseModel, Field

from ..core.util import iter_jsonl, write_jsonl
from .records import Status


class Durations(BaseModel):
    """Seconds per part of the rollout (None: the part did not run or recorded no time)."""

    sandbox: float | None = None
    install: float | None = None  # part of harness
    agent: float | None = None  # part of harness
    harness: float | None = None
    patch: float | None = None
    grade: float | None = None
    tests: float | None = None  # part of grade
    model: float | None = None  # the share of the harness step spent waiting on the model (convert step)


class RolloutRow(BaseModel):
    run: str
    task_id: str
    instance_id: str
    repo: str = ""
    repeat: int
    # the final status and what decided it (contracts.records.final_status)
    status: Status = "ok"
    failure_class: str | None = None
    failed_phase: str | None = None
    error: str | None = None
    reward: float | None = 0.0
    resolved: bool = False
    patch_empty: bool = False
    patch_bytes: int = 0
    patch_applied: bool | None = None
    tests_ran: bool = False
    harness: str = ""
    harness_status: Status = "ok"
    exit_code: int | None = None
    usage: dict[str, Any] = Field(default_factory=dict)  # response.json's Responses usage
    durations: Durations = Field(default_factory=Durations)
    tests_status: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    tampering: list[dict[str, str]] = Field(default_factory=list)  # grade.json's, what of the patch was not graded
    suspicious: list[dict[str, Any]] = Field(default_factory=list)  # grade.json's, code reaching into the runner
    token_join: dict[str, Any] = Field(default_factory=dict)  # response.json's token join counts
    traces_dropped: int = 0
    time_by_kind: dict[str, float] = Field(default_factory=dict)  # {} without a trace file
    started_at: str | None = None
    finished_at: str | None = None
    dir: str = ""  # the rollout's directory, results/<run>/<task>/<repeat>

    @property
    def key(self) -> str:
        """`instance_id#repeat`, as the report and the viewer name a rollout."""
        return f"{self.instance_id}#{self.repeat}"

    @property
    def total_tokens(self) -> int:
        return self.usage.get("total_tokens", 0)

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"


def read_rows(path: str | os.PathLike) -> list[RolloutRow]:
    """The rows of a rollouts.jsonl."""
    return [RolloutRow.model_validate(row) for row in iter_jsonl(path)]


def write_rows(path: str | os.PathLike, rows: Iterable[RolloutRow]) -> None:
    write_jsonl(path, (row.model_dump(mode="json") for row in rows))
