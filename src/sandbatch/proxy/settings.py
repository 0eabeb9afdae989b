"""Where the model proxy listens and what a request asks for: `model.proxy` with the schema's
defaults, the host it binds and the address the sandboxes reach it at per sandbox provider,
and which endpoint a request path names.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Mapping

from ..core.config import ProxyConfig, load_schema
from ..core.errors import UserError

# sandbox provider -> (bind host, advertised host) when model.proxy leaves them null
PROVIDER_HOSTS: dict[str, tuple[str, str | None]] = {
    "local": ("127.0.0.1", "127.0.0.1"),
    "docker": ("0.0.0.0", "host.docker.internal"),
}

_ENDPOINTS = {"/chat/completions": "chat", "/responses": "responses", "/completions": "completions",
              "/messages": "messages", "/messages/count_tokens": "count_tokens"}


def proxy_settings(values: ProxyConfig | Mapping[str, Any] | None = None) -> ProxyConfig:
    """A ProxyConfig from a partial mapping; missing keys take the schema's defaults."""
    if isinstance(values, ProxyConfig):
        return values
    schema = load_schema()["properties"]["model"]["properties"]["proxy"]["properties"]
    merged = {key: sub["default"] for key, sub in schema.items()}
    unknown = set(values or {}) - set(merged)
    if unknown:
        raise UserError(f"model.proxy: unknown key '{sorted(unknown)[0]}'; allowed keys: {', '.join(sorted(merged))}")
    merged.update(values or {})
    return ProxyConfig.model_validate(merged)


def proxy_hosts(provider: str, settings: ProxyConfig | Mapping[str, Any] | None = None,
                service: str | None = None) -> tuple[str, str]:
    """(bind host, advertised host) for a sandbox provider, config values first.

    A provider without a fixed default (opensandbox) advertises this host's address on its
    route toward `service` ("host:port" of the sandbox service).
    """
    s = proxy_settings(settings)
    bind_default, advertise_default = PROVIDER_HOSTS.get(provider, ("0.0.0.0", None))
    advertise = s.advertise_host or advertise_default or (route_source(service) if service else None)
    if advertise is None:
        toward = f" toward {service}" if service else ""
        raise UserError(
            f"model.proxy.advertise_host: no default for sandbox provider '{provider}' and no route{toward} "
            "to derive one from; set it to an address of this host that the sandboxes can reach, "
            "or set model.proxy.enabled: false"
        )
    return s.bind_host or bind_default, advertise


# stands for "anywhere off this host": only the routing table is consulted, nothing is sent
_OFF_HOST = "192.0.2.1"


def route_source(service: str) -> str | None:
    """This host's source address on its route toward `service` (host:port), or None.

    A service on this host (a loopback route) runs its sandboxes on this host's container
    engine, which never reaches the host's loopback: the address of the route off the host
    is used instead.
    """
    host, _, port = service.rpartition(":") if ":" in service else (service, "", "80")
    host = host.strip("[]") or service

    def source(target: str, port: int) -> str | None:
        try:
            infos = socket.getaddrinfo(target, port, type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError):
            return None
        for family, _, _, _, addr in infos:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                try:
                    sock.connect(addr)  # UDP: picks the route, sends nothing
                    return sock.getsockname()[0]
                except OSError:
                    continue
        return None

    found = source(host, int(port) if port.isdigit() else 80)
    if found is not None and ipaddress.ip_address(found.split("%")[0]).is_loopback:
        found = source(_OFF_HOST, 9)
    return found


def split_path(path: str) -> tuple[str, str]:
    """(endpoint kind, path below the API root): /v1/chat/completions -> ("chat", "/chat/completions").

    Any number of leading /v1 segments is dropped, so clients that add /v1 to a base URL
    already ending in /v1 (or none at all) still reach the right upstream path.
    """
    while path == "/v1" or path.startswith("/v1/"):
        path = path[3:]
    path = "/" + path.lstrip("/")
    rest = path.rstrip("/") or "/"
    if rest in _ENDPOINTS:
        return _ENDPOINTS[rest], rest
    if rest == "/models" or rest.startswith("/models/"):
        return "models", rest
    return "other", rest
