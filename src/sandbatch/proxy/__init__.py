"""The model endpoint: the per-rollout model proxy (model_proxy.py; its settings, upstream side
and call records beside it), token records, what /models serves. May import core, contracts, tasks, trace."""

from .model_proxy import ModelProxy
from .rewrite import apply_sampling, drop_cache_control, rewrite_request
from .settings import proxy_settings, split_path

__all__ = [
    "ModelProxy", "apply_sampling", "drop_cache_control", "proxy_settings", "rewrite_request", "split_path",
]
