"""Token ids and logprobs, when a backend returns them (model.proxy.record_tokens)."""

from __future__ import annotations

from typing import Any, Mapping


class TokenCollector:
    """Collects token ids and logprobs from responses or stream chunks, when a backend sends them.

    Shapes understood: top-level `prompt_token_ids` (vLLM `return_token_ids`), per choice
    `token_ids` and `logprobs.content[] {token, logprob}` (chat), per choice
    `logprobs.tokens / token_logprobs` (legacy completions), and Responses
    `output[].content[].logprobs[]` / `response.output_text.delta` events with `logprobs`.
    """

    def __init__(self) -> None:
        self.prompt_token_ids: list[int] | None = None
        self.choices: dict[int, dict[str, list]] = {}
        self._responses_deltas = False

    def _choice(self, index: int) -> dict[str, list]:
        return self.choices.setdefault(index, {"token_ids": [], "tokens": [], "logprobs": []})

    def _logprob_list(self, index: int, items: Any) -> None:
        if not isinstance(items, list):
            return
        c = self._choice(index)
        for item in items:
            if isinstance(item, Mapping):
                c["tokens"].append(item.get("token"))
                c["logprobs"].append(item.get("logprob"))

    def add(self, body: Any) -> None:
        if not isinstance(body, Mapping):
            return
        if isinstance(body.get("prompt_token_ids"), list) and self.prompt_token_ids is None:
            self.prompt_token_ids = body["prompt_token_ids"]
        for choice in body.get("choices") or ():
            if not isinstance(choice, Mapping):
                continue
            index = choice.get("index", 0) if isinstance(choice.get("index"), int) else 0
            if isinstance(choice.get("prompt_token_ids"), list) and self.prompt_token_ids is None:
                self.prompt_token_ids = choice["prompt_token_ids"]
            if isinstance(choice.get("token_ids"), list):
                self._choice(index)["token_ids"].extend(choice["token_ids"])
            lp = choice.get("logprobs")
            if isinstance(lp, Mapping):
                if isinstance(lp.get("content"), list):
                    self._logprob_list(index, lp["content"])
                elif isinstance(lp.get("tokens"), list):  # legacy completions
                    c = self._choice(index)
                    c["tokens"].extend(lp["tokens"])
                    c["logprobs"].extend(lp.get("token_logprobs") or [])
        # Responses: text delta events carry logprobs; the completed event repeats them
        kind = body.get("type")
        if kind == "response.output_text.delta":
            self._responses_deltas = True
            self._logprob_list(0, body.get("logprobs"))
        elif body.get("object") == "response" or kind in ("response.completed", "response.incomplete"):
            response = body.get("response", body)
            if isinstance(response, Mapping) and not self._responses_deltas:
                for item in response.get("output") or ():
                    for part in (item.get("content") or ()) if isinstance(item, Mapping) else ():
                        if isinstance(part, Mapping):
                            self._logprob_list(0, part.get("logprobs"))

    def result(self) -> dict[str, Any] | None:
        choices = [
            {"index": i, **{k: v for k, v in c.items() if v}}
            for i, c in sorted(self.choices.items())
            if any(c.values())
        ]
        if self.prompt_token_ids is None and not choices:
            return None
        out: dict[str, Any] = {}
        if self.prompt_token_ids is not None:
            out["prompt_token_ids"] = self.prompt_token_ids
        if choices:
            out["choices"] = choices
        return out
