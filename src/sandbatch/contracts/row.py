"""One line of rollouts.jsonl: a rollout's step records summed up (rollout/rows.py builds it,
the aggregate writes it; metrics, the report, the plots, the viewer, compare and the exports
read it as attributes).

The fields' order is the line's key order. Every field but the rollout's identity has a
default, so that rows an older sandbatch wrote (without the later fields) still read.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from pydantic import BaseModel, Field, field_serializer, field_validator

from ..core.util import iter_jsonl, write_jsonl
from .records import Status
from .response import AsGiven, TokenJoin, Usage


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


class TimeByKind(AsGiven):
    """Seconds of a rollout by the kind of work at each instant (trace.time_by_kind), from its trace."""

    model: float = 0.0
    tests: float = 0.0
    sandbox: float = 0.0
    orchestration: float = 0.0


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
    usage: Usage = Field(default_factory=Usage)  # response.json's Responses usage
    durations: Durations = Field(default_factory=Durations)
    tests_status: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    tampering: list[dict[str, str]] = Field(default_factory=list)  # grade.json's, what of the patch was not graded
    suspicious: list[dict[str, Any]] = Field(default_factory=list)  # grade.json's, code reaching into the runner
    token_join: TokenJoin | None = None  # response.json's token join counts; None (`{}`): no token data
    traces_dropped: int = 0
    time_by_kind: TimeByKind | None = None  # None (`{}`): no trace file
    started_at: str | None = None
    finished_at: str | None = None
    dir: str = ""  # the rollout's directory, results/<run>/<task>/<repeat>

    # an absent part is `{}` in the line, as the rows were always written
    @field_validator("token_join", "time_by_kind", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return value or None

    @field_serializer("token_join", "time_by_kind", mode="wrap")
    def _none_is_empty(self, value: Any, handler: Any) -> Any:
        return {} if value is None else handler(value)

    @property
    def key(self) -> str:
        """`instance_id#repeat`, as the report and the viewer name a rollout."""
        return f"{self.instance_id}#{self.repeat}"

    @property
    def total_tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"


def read_rows(path: str | os.PathLike) -> list[RolloutRow]:
    """The rows of a rollouts.jsonl."""
    return [RolloutRow.model_validate(row) for row in iter_jsonl(path)]


def write_rows(path: str | os.PathLike, rows: Iterable[RolloutRow]) -> None:
    write_jsonl(path, (row.model_dump(mode="json") for row in rows))
