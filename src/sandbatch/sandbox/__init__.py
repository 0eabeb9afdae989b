"""Where a rollout runs: the provider-neutral API (base.py) and one module per provider, registered
in PROVIDERS. May import core, contracts, tasks and trace; never rollout, a harness, a grader or a step."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Iterable

from .base import ExecResult, Provider, Sandbox, SandboxError, SandboxGone, SandboxInfo, SandboxSpec

if TYPE_CHECKING:
    from ..core.config import ProxyConfig, SandboxConfig

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


def proxy_address(sandbox: "SandboxConfig", proxy: "ProxyConfig") -> tuple[str, str]:
    """(bind host, advertised host) of the model proxy for the selected provider's sandboxes:
    model.proxy's bind_host and advertise_host first, then the provider's (Provider.proxy_hosts);
    a provider without a fixed advertised host advertises this host's address on its route
    toward its service. The one place the proxy's address is derived."""
    from ..core.errors import UserError
    from .route import route_source

    cls = provider_class(sandbox.provider)
    bind_default, advertise_default = cls.proxy_hosts
    service = cls.service(sandbox.options())
    advertise = proxy.advertise_host or advertise_default or (route_source(service) if service else None)
    if advertise is None:
        toward = f" toward {service}" if service else ""
        raise UserError(
            f"model.proxy.advertise_host: no default for sandbox provider '{sandbox.provider}' and no route{toward} "
            "to derive one from; set it to an address of this host that the sandboxes can reach, "
            "or set model.proxy.enabled: false"
        )
    return proxy.bind_host or bind_default, advertise


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
    "SandboxSpec", "PROVIDERS", "get_provider", "provider_class", "proxy_address", "rewrite_image",
]
