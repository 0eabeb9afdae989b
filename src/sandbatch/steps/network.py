"""What a rollout's sandboxes may reach, phase by phase, and the record of it.

- The agent's sandbox is created on the engine's network, so that the harness's install can
  reach its registry; before the agent starts it is restricted to the rollout's model proxy
  (`model_only`), or to nothing when no model client runs in it (`none`: a harness that talks
  to no model, mini-swe-agent in host mode).
- A grading sandbox is created with no network at all, but for Terminal-Bench's verifier:
  its `tests/test.sh` is the benchmark's own code and commonly installs its test tools (uv,
  pytest) from the internet, so it keeps the engine's network as Harbor gives it (task.toml's
  `allow_internet` defaults to true there) unless the task says `allow_internet = false`.
- A task that declares it needs the internet (`allow_internet: true`, Terminal-Bench's
  task.toml, a SWE-bench row's field) keeps the engine's network in both phases (`open`).

Which policy, why, and whether the provider enforced it is written to harness.json and
grade.json (`network`). A provider that cannot isolate (`Provider.isolates_network` False:
local) records `enforced: false` and a warning goes to the step's log.
"""

from __future__ import annotations

import sys

from ..sandbox import Provider, Sandbox
from ..contracts.sandbox import NetworkPolicy, NetworkRecord
from ..tasks import Task

DECLARED = "the task declares allow_internet: true"
VERIFIER = ("Terminal-Bench's verifier installs its test tools; task.toml's allow_internet is "
            "not false (Harbor's default)")


def declares_internet(task: Task) -> bool:
    return task.allow_internet is True


def grading_allows_internet(task: Task) -> bool:
    """Whether a grading sandbox gets the engine's network (else none at all)."""
    return declares_internet(task) or _verifier_online(task)


def _verifier_online(task: Task) -> bool:
    # an honest solve must not score 0 because the verifier could not fetch pytest
    return task.family == "terminal_bench" and task.allow_internet is not False


def _record(provider: Provider, policy: NetworkPolicy, reason: str, address: str | None = None) -> NetworkRecord:
    if policy == "open" or provider.isolates_network:
        return NetworkRecord(policy=policy, reason=reason, enforced=True, model_address=address)
    note = (f"the {provider.name} provider cannot restrict a sandbox's network: the sandbox reached "
            "whatever this host reaches")
    print(f"[sandbatch] warning: {note} (asked for: {policy}, {reason})", file=sys.stderr, flush=True)
    return NetworkRecord(policy=policy, reason=reason, enforced=False, note=note)


def unrestricted(provider: Provider, reason: str) -> NetworkRecord:
    """The agent's sandbox left on the engine's network, for `reason`."""
    return _record(provider, "open", reason)


def grading_record(provider: Provider, task: Task) -> NetworkRecord:
    if declares_internet(task):
        return _record(provider, "open", DECLARED)
    if _verifier_online(task):
        return _record(provider, "open", VERIFIER)
    return _record(provider, "none", "grading needs no network")


async def restrict_agent(sandbox: Sandbox, task: Task, proxy: tuple[str, int] | None,
                         why_none: str) -> NetworkRecord:
    """Restrict the agent's sandbox before the agent runs: to the model proxy reached at
    `proxy` (host, port), or to nothing (`why_none` says why there is no proxy to reach).
    The record's `model_address` is the host the sandbox reaches the proxy at from now on."""
    provider = sandbox.provider
    if declares_internet(task):
        return _record(provider, "open", DECLARED)
    if proxy is None:
        if provider.isolates_network:
            await sandbox.restrict_network(None)
        return _record(provider, "none", why_none)
    host, port = proxy
    if provider.isolates_network:
        host = await sandbox.restrict_network(proxy) or host
    return _record(provider, "model_only", "the default: the rollout's model proxy and nothing else", f"{host}:{port}")
