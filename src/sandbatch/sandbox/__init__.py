"""Where a rollout runs: the provider-neutral API (base.py) and one module per provider, registered
in PROVIDERS. May import core, tasks and trace; never rollout, a harness, a grader or a step."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Iterable

from .base import ExecResult, Provider, Sandbox, SandboxError, SandboxGone, SandboxInfo, SandboxSpec

if TYPE_CHECKING:
    from ..core.config import SandboxConfig

# name -> "module:class"; imported lazily so a local run never imports a cloud SDK
PROVIDERS: dict[str, str] = {
    "local": "sandbatch.sandbox.local:LocalProvider",
    "docker": "sandbatch.sandbox.docker:DockerProvider",
    "opensandbox": "sandbatch.sandbox.opensandbox:OpenSandboxProvider",
}


def provider_class(name: str) -> type[Provider]:
    module, _, cls = PROVIDERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_provider(cfg: "SandboxConfig") -> Provider:
    return provider_class(cfg.provider)(cfg.options())


def rewrite_image(image: str, rewrites: Iterable[Any]) -> str:
    """Apply the first prefix rule that matches (rules have `.prefix` and `.replace`)."""
    for rule in rewrites:
        prefix = rule["prefix"] if isinstance(rule, dict) else rule.prefix
        replace = rule["replace"] if isinstance(rule, dict) else rule.replace
        if image.startswith(prefix):
            return replace + image[len(prefix):]
    return image


__all__ = [
    "ExecResult", "Provider", "Sandbox", "SandboxError", "SandboxGone", "SandboxInfo",
    "SandboxSpec", "PROVIDERS", "get_provider", "provider_class", "rewrite_image",
]
