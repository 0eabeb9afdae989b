"""What the model endpoint serves, as its OpenAI-compatible `/models` lists it.

`resolve_model_name` fills in `model.name` when the config leaves it unset: the one model the
endpoint lists is the name. The workflow asks once, when a run is planned (in Snakemake's
main process, `-n` included; never in the jobs, which read the resolved name from the run's
settings), so every rollout of a run uses the same name and the manifest records it.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from ..core.config import Config, ModelConfig
from ..core.errors import UserError

NO_MODEL = "none"  # model.name of a run whose harness talks to no model


class EndpointUnavailable(Exception):
    """The endpoint did not answer with a model list; the message says how it failed."""


def served_models(model: ModelConfig, timeout: float = 10) -> list[dict[str, Any]]:
    """The entries of `<base_url>/models` (each has an `id`), asked with the upstream key."""
    url = models_url(model)
    key = os.environ.get(model.api_key_env) if model.api_key_env else None
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            listed = json.loads(resp.read()).get("data")
    except (OSError, ValueError, AttributeError) as exc:
        raise EndpointUnavailable(f"{url} did not answer with a model list ({exc})") from None
    if not isinstance(listed, list):
        raise EndpointUnavailable(f"{url} did not answer with a model list (no `data` list)")
    return [m for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_context_window(model: ModelConfig, timeout: float = 10) -> tuple[int | None, str]:
    """(context length, "") as the endpoint's /models reports it (`max_model_len`, as vLLM and
    SGLang do) for model.name, or (None, why not)."""
    if not model.base_url:
        return None, "model.base_url is not set"
    try:
        entries = served_models(model, timeout)
    except EndpointUnavailable as exc:
        return None, str(exc)
    entry = next((m for m in entries if m["id"] == model.name), entries[0] if len(entries) == 1 else None)
    length = entry.get("max_model_len") if entry else None
    if isinstance(length, int) and not isinstance(length, bool) and length > 0:
        return length, ""
    return None, f"{models_url(model)} reports no max_model_len for model {model.name!r}"


def models_url(model: ModelConfig) -> str:
    return (model.base_url or "").rstrip("/") + "/models"


def _how_to_name(model: ModelConfig) -> str:
    if model.name_env:
        return f"export {model.name_env}=<model id> (named by model.name_env) or set model.name"
    return "set model.name"


def resolve_model_name(cfg: Config, needs_model: bool, started_with: str | None = None) -> tuple[Config, str]:
    """(`cfg` with model.name set, a note or ""): as configured; the one model the endpoint lists
    when unset; NO_MODEL for a harness that talks to no model. When the endpoint does not
    answer, a run already started keeps `started_with`, the name its settings hold (so a report
    or an unlock of a finished run needs no endpoint). UserError (one line) when the endpoint
    is down for a new run, or lists no model or several."""
    if cfg.model.name:
        return cfg, ""
    note = ""
    if not needs_model:
        name = NO_MODEL
    else:
        try:
            ids = [m["id"] for m in served_models(cfg.model)]
        except EndpointUnavailable as exc:
            if not started_with:
                raise UserError(f"model.name: not set, and the model endpoint cannot say which model it serves: "
                                f"{exc}; start the endpoint, or {_how_to_name(cfg.model)}") from None
            ids, note = [started_with], f"{exc}; run {cfg.run} keeps model {started_with!r}, which it was started with"
        if len(ids) != 1:
            listed = f"lists {len(ids)} models ({', '.join(ids)})" if ids else "lists no model"
            raise UserError(f"model.name: not set, and {models_url(cfg.model)} {listed}; "
                            f"{_how_to_name(cfg.model)} to the one to use")
        name = ids[0]
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": name})}), note
