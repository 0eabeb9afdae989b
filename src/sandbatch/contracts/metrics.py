"""results/<run>/metrics.json: the run's numbers (reporting.metrics.compute), read as
attributes by the report, the run's last lines, compare and the end of the workflow.

The fields' order is the file's key order. Every field has a default, so that a
metrics.json an older sandbatch wrote (without the later fields) still reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .response import AsGiven, TokenJoin


class Rate(BaseModel):
    value: float | None = None  # None: no denominator
    numerator: int = 0
    denominator: int = 0


class Percentiles(BaseModel):
    p50: float | None = None  # None: no value
    p95: float | None = None


class Tokens(BaseModel):
    total: int = 0
    mean_per_rollout: float | int = 0  # 0 (an int) for no rollouts
    input: int = 0
    output: int = 0


class TokenData(TokenJoin):
    """The rollouts' token join counts summed (every count of a TokenJoin), and rates."""

    rollouts_with_tokens: int = 0
    rollouts_rewritten: int = 0  # rollouts whose history was rewritten (a compaction): more than one segment
    drift_rate: Rate = Field(default_factory=Rate)
    untrusted_rate: Rate = Field(default_factory=Rate)  # the share of joined turns a trainer masks


class TimeSpent(AsGiven):
    """Where the rollouts' time went, summed (seconds): from their traces (model, sandbox,
    tests, orchestration) or from their step records (model, agent, sandbox, tests). The kinds
    a source does not split off are None and not in the file."""

    source: Literal["traces", "records"] = "traces"
    rollouts: int = 0
    model: float = 0.0
    agent: float | None = None
    sandbox: float = 0.0
    tests: float = 0.0
    orchestration: float | None = None


class Cost(BaseModel):
    """What the run's tokens cost at model.prices."""

    input: float = 0.0
    output: float = 0.0
    total: float = 0.0
    per_rollout: float | None = None


class Metrics(BaseModel):
    tasks: int = 0
    rollouts: int = 0
    samples_per_task_min: int = 0
    reward_threshold: float = 1.0
    pass_at_k: dict[str, float] = Field(default_factory=dict)  # "k" -> percent
    resolved: int = 0
    resolved_rate: Rate = Field(default_factory=Rate)
    resolved_rate_excluding_infra_errors: Rate = Field(default_factory=Rate)
    mean_reward: float | None = None  # over the graded rollouts; None: none graded
    status_counts: dict[str, int] = Field(default_factory=dict)
    failure_classes: dict[str, int] = Field(default_factory=dict)
    infra_error_rate: Rate = Field(default_factory=Rate)
    infra_error_classes: dict[str, int] = Field(default_factory=dict)
    empty_patches: int = 0
    tampering_rate: Rate = Field(default_factory=Rate)
    suspicious_rate: Rate = Field(default_factory=Rate)
    suspicious_rollouts: list[str] = Field(default_factory=list)  # `instance_id#repeat`
    durations_s: dict[str, Percentiles] = Field(default_factory=dict)  # phase -> p50, p95
    tokens: Tokens = Field(default_factory=Tokens)
    token_data: TokenData = Field(default_factory=TokenData)
    traces_dropped: int = 0
    time_s: TimeSpent = Field(default_factory=TimeSpent)
    cost: Cost | None = None  # None: no model.prices

    @property
    def graded_nothing(self) -> bool:
        """Every rollout of the run ended in an infrastructure error: its numbers measure no agent."""
        return bool(self.rollouts) and self.status_counts.get("infra_error", 0) == self.rollouts
