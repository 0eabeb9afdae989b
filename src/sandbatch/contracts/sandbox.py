"""What a sandbox is made from (SandboxSpec, recorded in sandbox.json) and what it could reach
(NetworkRecord, recorded in harness.json and grade.json): the provider-neutral input of
`sandbox.base.Provider.create` and a part of the records the steps write."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Resources(BaseModel):
    cpu: str | None = None  # e.g. "2"
    memory: str | None = None  # e.g. "4Gi"
    disk: str | None = None  # e.g. "20Gi"


class SandboxSpec(BaseModel):
    """Everything needed to (re)create a sandbox; recorded in sandbox.json."""

    image: str | None = None
    workdir: str = "/testbed"
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    ttl_seconds: int = 7200
    labels: dict[str, str] = Field(default_factory=dict)
    entrypoint: list[str] | None = None
    # the network the sandbox is created with: the engine's default (True) or none at all; an
    # agent's sandbox is created open for the harness's install, then restricted (NetworkRecord)
    allow_internet: bool = True
    options: dict[str, Any] = Field(default_factory=dict)


# what a sandbox reaches in one phase of a rollout (NetworkRecord.policy)
NetworkPolicy = Literal["model_only", "none", "open"]


class NetworkRecord(BaseModel):
    """What a sandbox could reach during one phase (the agent's run, the grading), as recorded in
    harness.json and grade.json: the policy asked for, why, and whether the provider enforced it."""

    policy: NetworkPolicy  # model_only: the rollout's model proxy and nothing else; none: nothing
    reason: str  # why this policy: the default, or the task's own declaration
    enforced: bool  # False: the provider cannot isolate (local), the sandbox reached what the host does
    model_address: str | None = None  # host the sandbox reached the model proxy at (model_only)
    note: str = ""  # what the provider could not do, when it could not
