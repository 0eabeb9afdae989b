"""The per-rollout model proxy (see core.py for the API), served with aiohttp.web (server.py)."""

from .core import PROVIDER_HOSTS, ModelProxy, proxy_hosts, proxy_settings, split_path
from .rewrite import apply_sampling, drop_cache_control, rewrite_request

__all__ = [
    "PROVIDER_HOSTS", "ModelProxy", "apply_sampling", "drop_cache_control",
    "proxy_hosts", "proxy_settings", "rewrite_request", "split_path",
]
