"""What the model proxy is set to and what a request asks for: `model.proxy` with its
defaults, and which endpoint a request path names. The host it binds and the address the
sandboxes reach it at depend on the sandbox provider: sandbox.proxy_address.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core.config import ProxyConfig
from ..core.errors import UserError

_ENDPOINTS = {"/chat/completions": "chat", "/responses": "responses", "/completions": "completions",
              "/messages": "messages", "/messages/count_tokens": "count_tokens"}


def proxy_settings(values: ProxyConfig | Mapping[str, Any] | None = None) -> ProxyConfig:
    """A ProxyConfig from a partial mapping; missing keys take the model's defaults."""
    if isinstance(values, ProxyConfig):
        return values
    allowed = ProxyConfig.model_fields
    unknown = set(values or {}) - set(allowed)
    if unknown:
        raise UserError(f"model.proxy: unknown key '{sorted(unknown)[0]}'; allowed keys: {', '.join(sorted(allowed))}")
    return ProxyConfig.model_validate(values or {})


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
