"""What can be checked of the model endpoint's settings without asking it: that its URL is an
http(s) URL, and that the request fields `model.sampling` and `model.proxy.extra_body` set
are not misspellings of the fields the OpenAI APIs and the common OpenAI-compatible servers
(vLLM, SGLang) take. A field that is not known and close to none is sent as it is (servers
have switches of their own), as is every field of extra_body; `sandbatch validate` names them.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Mapping

from .errors import UserError
from .util import did_you_mean

# Chat Completions and Responses request fields, then vLLM's and SGLang's sampling extras
REQUEST_FIELDS = frozenset("""
    temperature top_p n stop max_tokens max_completion_tokens max_output_tokens presence_penalty
    frequency_penalty logit_bias logprobs top_logprobs seed response_format tools tool_choice
    parallel_tool_calls user reasoning_effort reasoning service_tier store metadata modalities
    prediction audio verbosity stream_options text truncation include instructions
    max_tool_calls prompt_cache_key safety_identifier background
    top_k min_p repetition_penalty length_penalty min_tokens stop_token_ids
    include_stop_str_in_output ignore_eos skip_special_tokens spaces_between_special_tokens
    chat_template chat_template_kwargs add_generation_prompt continue_final_message
    guided_json guided_regex guided_choice guided_grammar structured_outputs return_token_ids
    prompt_logprobs truncate_prompt_tokens priority use_beam_search best_of bad_words
    allowed_token_ids echo add_special_tokens mm_processor_kwargs cache_salt
    regex ebnf json_schema no_stop_trim separate_reasoning stream_reasoning lora_path
    return_hidden_states custom_params thinking
""".split())

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/+")


def check_url(value: str, where: str) -> None:
    """UserError unless `value` is an http(s) URL with a host; the fix spells it out."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme in ("http", "https") and parts.netloc and "://" in value:
        return
    rest = _SCHEME.sub("", value).lstrip("/")  # "htp:/host:8000" -> "host:8000"
    scheme = "https" if value.lower().startswith("https") else "http"
    raise UserError(f"{where}: {value!r} is not an http(s) URL; write it as {scheme}://{rest}")


def check_fields(fields: Mapping[str, Any], where: str, strict: bool = True) -> list[str]:
    """The fields that are not known, as `where`.field; strict: UserError for one that looks
    like a misspelt known field (model.sampling; extra_body is sent as it is, by design)."""
    unknown = []
    for key in fields:
        if key in REQUEST_FIELDS:
            continue
        hint = did_you_mean(key, REQUEST_FIELDS)
        if hint and strict:
            raise UserError(f"{where}.{key}: not a request field of the OpenAI APIs{hint}; fix the name, or set "
                            f"it under model.proxy.extra_body, which is sent as it is")
        unknown.append(f"{where}.{key}" + hint)
    return unknown


def unknown_fields(model: Any) -> list[str]:
    """The fields of model.sampling and model.proxy.extra_body that are not known (validate names them)."""
    return [*check_fields(model.sampling, "model.sampling"),
            *check_fields(model.proxy.extra_body, "model.proxy.extra_body", strict=False)]
