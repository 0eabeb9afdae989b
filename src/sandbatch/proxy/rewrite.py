"""Request body rewrites applied by the proxy before a call goes upstream.

Pure functions on the decoded JSON body, so they are tested without any network.
"""

from __future__ import annotations

from typing import Any, Mapping

# the output-token limit has a different name per API
_LIMIT_KEYS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def drop_cache_control(body: dict[str, Any]) -> int:
    """Remove Anthropic-style `cache_control` where clients attach it; return how many.

    Only at `messages[].content[].cache_control` and `tools[].cache_control` (for the
    Responses API `input` plays the role of `messages`). A `cache_control` key anywhere
    else - notably a property inside a tool's parameter JSON schema - is data and stays.
    Strict OpenAI-compatible servers reject the key with HTTP 422.
    """
    removed = 0
    for key in ("messages", "input"):
        items = body.get(key)
        if not isinstance(items, list):
            continue
        for message in items:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.pop("cache_control", None) is not None:
                        removed += 1
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if isinstance(tool, dict) and tool.pop("cache_control", None) is not None:
                removed += 1
    return removed


def _merge(body: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Override wins; mappings merge key by key; a None value deletes the key."""
    for key, value in overrides.items():
        if value is None:
            body.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(body.get(key), dict):
            _merge(body[key], value)
        elif isinstance(value, Mapping):
            body[key] = {}
            _merge(body[key], value)
        else:
            body[key] = value


def apply_sampling(body: dict[str, Any], endpoint: str, sampling: Mapping[str, Any]) -> None:
    """Apply configured sampling parameters; they win over what the agent sent.

    The output-token limit may be configured under any of max_tokens /
    max_completion_tokens / max_output_tokens and lands under the key the endpoint
    understands: `max_output_tokens` for Responses; for Chat the key the request already
    uses (`max_tokens` when it uses neither), or `max_completion_tokens` if configured so.
    Mapping values (e.g. chat_template_kwargs: {enable_thinking: false}) merge key by key.
    """
    if not sampling:
        return
    limit_key = next((k for k in _LIMIT_KEYS if k in sampling), None)
    rest = {k: v for k, v in sampling.items() if k not in _LIMIT_KEYS}
    if limit_key is not None:
        limit = sampling[limit_key]
        if endpoint == "responses":
            target = "max_output_tokens"
        elif endpoint == "chat" and (
            limit_key == "max_completion_tokens"
            or ("max_completion_tokens" in body and "max_tokens" not in body)
        ):
            target = "max_completion_tokens"
        else:
            target = "max_tokens"
        for key in _LIMIT_KEYS:
            if key != target:
                body.pop(key, None)
        if limit is None:
            body.pop(target, None)
        else:
            body[target] = limit
    _merge(body, rest)


def rewrite_request(
    body: dict[str, Any],
    endpoint: str,
    *,
    drop_cache: bool = True,
    sampling: Mapping[str, Any] | None = None,
    extra_body: Mapping[str, Any] | None = None,
    model: str | None = None,
    stream_usage: bool = True,
) -> dict[str, Any]:
    """All rewrites in order; returns a summary of what changed (for the call record)."""
    changes: dict[str, Any] = {}
    if drop_cache:
        n = drop_cache_control(body)
        if n:
            changes["cache_control_dropped"] = n
    if endpoint in ("chat", "responses", "completions", "messages"):
        apply_sampling(body, endpoint, sampling or {})
        if extra_body:
            _merge(body, extra_body)
        if model:
            body["model"] = model
        # Chat streams carry usage only when asked for; without it the call is unmetered
        if stream_usage and endpoint in ("chat", "completions") and body.get("stream") is True:
            options = body.get("stream_options")
            if options is None or isinstance(options, dict):
                options = dict(options or {})
                if options.get("include_usage") is not True:
                    options["include_usage"] = True
                    body["stream_options"] = options
                    changes["stream_usage_requested"] = True
    return changes
