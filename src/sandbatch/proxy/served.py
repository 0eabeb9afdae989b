"""What the model endpoint serves, as its OpenAI-compatible `/models` lists it.

`resolve_model_name` fills in `model.name` when the config leaves it unset: the one model the
endpoint lists is the name. The workflow asks once, when a run is planned (in Snakemake's
main process, `-n` included; never in the jobs, which read the resolved name from the run's
settings), so every rollout of a run uses the same name and the manifest records it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any

from ..core.config import Config, ModelConfig
from ..core.errors import UserError
from .settings import proxy_settings
from .upstream import Failure, Upstream

NO_MODEL = "none"  # model.name of a run whose harness talks to no model


class EndpointUnavailable(Exception):
    """The endpoint did not answer with a model list; the message says how it failed, `key`
    names the setting to look at and `fix` what to do."""

    def __init__(self, message: str, key: str = "model.base_url",
                 fix: str = "start the model server, or set model.base_url to its address"):
        super().__init__(message)
        self.key = key
        self.fix = fix


# the lists already asked for in this process, by (URL, key): a run asks its endpoint once
_served: dict[tuple[str, str | None], list[dict[str, Any]]] = {}


def served_models(model: ModelConfig, timeout: float = 10) -> list[dict[str, Any]]:
    """The entries of `<base_url>/models` (each has an `id`), asked as the proxy asks: its
    client (upstream.py, HTTP(S)_PROXY honoured) with its headers and the upstream key."""
    url, key = models_url(model), model.upstream_key()
    if (url, key) not in _served:
        # a thread of its own: the caller may be inside a running event loop (Snakemake's)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            status, body = pool.submit(asyncio.run, _get(model, url, key, timeout)).result()
        _served[url, key] = _entries(url, status, body, model)
    return _served[url, key]


async def _get(model: ModelConfig, url: str, key: str | None, timeout: float) -> tuple[int, bytes]:
    settings = proxy_settings(model.proxy).model_copy(update={
        "retries": 0, "connect_timeout": timeout, "read_timeout": timeout})
    upstream = Upstream((model.base_url or "").rstrip("/"), key, settings)
    upstream.open()
    try:
        resp, _, _ = await upstream.send("GET", url, "", b"", upstream.headers(None, b""))
        try:
            return resp.status, await resp.read()
        finally:
            resp.release()
    except Failure as exc:
        raise EndpointUnavailable(f"{url} did not answer with a model list ({exc.error})") from None
    except upstream.errors as exc:
        raise EndpointUnavailable(f"{url} broke off its answer ({exc})") from None
    finally:
        await upstream.close()


def _entries(url: str, status: int, body: bytes, model: ModelConfig) -> list[dict[str, Any]]:
    if status in (401, 403):
        var = model.api_key_env or "OPENAI_API_KEY"
        raise EndpointUnavailable(f"{url} answered {status} (the key is missing or refused)", "model.api_key_env",
                                  f"export the endpoint's API key in {var}" + (
                                      "" if model.api_key_env else " or name its variable in model.api_key_env"))
    if status != 200:
        fix = ("the base URL of an OpenAI-compatible API normally ends in /v1" if status == 404
               else "check the model server's log")
        raise EndpointUnavailable(f"{url} answered HTTP {status}, not a model list", fix=fix)
    try:
        listed = json.loads(body).get("data")
    except (ValueError, AttributeError):
        listed = None
    if not isinstance(listed, list):
        raise EndpointUnavailable(f"{url} did not answer with a model list (no `data` list)",
                                  fix="point model.base_url at an OpenAI-compatible API (ending in /v1)")
    return [m for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]


def check_served(model: ModelConfig) -> None:
    """UserError (with the key at fault) unless the endpoint answers its model list, as the
    proxy will ask it, and serves model.name."""
    try:
        ids = [m["id"] for m in served_models(model)]
    except EndpointUnavailable as exc:
        raise UserError(f"{exc}; {exc.fix}", exc.key) from None
    if model.name not in ids:
        listed = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "") if ids else "none"
        raise UserError(f"{model.name!r} is not among the models {models_url(model)} serves ({listed}); "
                        f"set model.name to one of them", "model.name")


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
