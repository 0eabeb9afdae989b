"""Responses items -> a trajectory in Harbor's ATIF (Agent Trajectory Interchange Format), v1.4.

Harbor's viewer and the tools that read ATIF load `trajectory.json`, written beside
response.json by the convert step. The mapping: the system prompt (response.json
`instructions`, when the harness recorded it) is a "system" step, the prompt (`input`) a
"user" step, the harness's feedback (`sandbatch.feedback`) a "user" step after the agent
step it answers; each model turn (its reasoning, message and tool calls) is one "agent" step, and the
outputs of its tool calls are that step's observation. A new agent step starts when text
follows tool calls or a second message follows a message. Per-step metrics come from the
model call the step's items were joined to (token_join): its usage, and with token data
`prompt_token_ids`, `completion_token_ids` and `logprobs`. Without a join they come from
model_calls.jsonl when there is exactly one answered model call per agent step (the
turns then line up); the totals are always in final_metrics.
Spec: harbor docs/rfcs/0001-trajectory-format.md (ATIF-v1.4).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..core.util import json_object
from .responses import input_text, item_text

if TYPE_CHECKING:
    from .token_join import Turn

SCHEMA_VERSION = "ATIF-v1.4"


def _arguments(raw: Any) -> dict[str, Any]:
    """ATIF wants an object; a call whose arguments are not one keeps them under `input`."""
    return json_object(raw, "input")


def agent_steps(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}

    def new() -> dict[str, Any]:
        steps.append({"source": "agent", "message": "", "_reasoning": [], "tool_calls": [], "_results": [],
                      "_items": []})
        return steps[-1]

    cur: dict[str, Any] | None = None
    for it in items:
        kind = it.get("type")
        if kind in ("reasoning", "message"):
            if cur is None or cur["tool_calls"] or cur["_results"] or (kind == "message" and cur["message"]) \
                    or (kind == "reasoning" and cur["message"]):
                cur = new()
            cur["_items"].append(it.get("id"))
            if kind == "message":
                cur["message"] = item_text(it)
            else:
                cur["_reasoning"].append(item_text(it))
        elif kind == "function_call":
            if cur is None or cur["_results"]:
                cur = new()
            cur["_items"].append(it.get("id"))
            call_id = it.get("call_id") or f"call_{len(by_call)}"
            cur["tool_calls"].append({"tool_call_id": call_id, "function_name": it.get("name") or "",
                                      "arguments": _arguments(it.get("arguments"))})
            by_call[call_id] = cur
        elif kind == "function_call_output":
            output = it.get("output")
            result = {"content": output if isinstance(output, str) else json.dumps(output)}
            owner = by_call.get(it.get("call_id"))
            if owner is None:  # an output of no recorded call: it stays in order, unattributed
                owner = cur = cur or new()
            else:
                result = {"source_call_id": it["call_id"], **result}
            owner["_results"].append(result)
    out = []
    for s in steps:
        step = {"source": "agent", "message": s["message"], "_items": s["_items"]}
        if s["_reasoning"]:
            step["reasoning_content"] = "\n".join(s["_reasoning"])
        if s["tool_calls"]:
            step["tool_calls"] = s["tool_calls"]
        if s["_results"]:
            step["observation"] = {"results": s["_results"]}
        out.append(step)
    return out


def _metrics(call: Mapping[str, Any], turn: "Turn | None" = None) -> dict[str, Any]:
    u = call.get("usage") or {}
    out = {"prompt_tokens": u.get("prompt_tokens", 0), "completion_tokens": u.get("completion_tokens", 0),
           "cached_tokens": u.get("cached_tokens", 0), "extra": {"reasoning_tokens": u.get("reasoning_tokens", 0)}}
    fields = turn.training() if turn is not None else None
    if fields:
        out.update(prompt_token_ids=fields["prompt_token_ids"], completion_token_ids=fields["generation_token_ids"],
                   logprobs=fields["generation_log_probs"])
    return out


def trajectory(response: Mapping[str, Any], prompt: str | None, agent: Mapping[str, Any], session_id: str,
               calls: list[Mapping[str, Any]] | None = None, extra: Mapping[str, Any] | None = None,
               turns: Iterable["Turn"] = ()) -> dict[str, Any]:
    """The ATIF document of one rollout; `agent` is {name, version, model_name}; `turns` the
    model calls joined to the response's items (token_join.Turn)."""
    model = agent.get("model_name")
    steps: list[dict[str, Any]] = []
    if response.get("instructions"):
        steps.append({"source": "system", "message": response["instructions"]})
    if response.get("input"):  # the prompt as the agent got it (its template rendered)
        prompt = input_text(response["input"])
    if prompt is not None:
        steps.append({"source": "user", "message": prompt})
    agents = agent_steps(response.get("output") or [])
    feedback = list((response.get("sandbatch") or {}).get("feedback") or [])
    turn_of = {item.get("id"): turn for turn in turns for item in turn.items}
    answered = [c for c in calls or [] if isinstance(c.get("status"), int) and c["status"] < 400
                and isinstance(c.get("usage"), Mapping)]
    if turn_of:
        for step in agents:
            joined = {id(turn_of[i]): turn_of[i] for i in step["_items"] if i in turn_of}
            if len(joined) == 1:
                turn = next(iter(joined.values()))
                step["metrics"] = _metrics(turn.row, turn)
    elif agents and len(answered) == len(agents):
        for step, call in zip(agents, answered):
            step["metrics"] = _metrics(call)
    # the harness's own messages to the model (response.json sandbatch.feedback) as user
    # steps, each after the agent step holding the item it followed
    steps += [{"source": "user", "message": f["text"]} for f in feedback if f.get("after") is None]
    placed = {f.get("after") for f in feedback if f.get("after") is None}
    for step in agents:
        items = set(step.pop("_items"))
        if model:
            step["model_name"] = model
        steps.append(step)
        steps += [{"source": "user", "message": f["text"]} for f in feedback if f.get("after") in items]
        placed |= items
    steps += [{"source": "user", "message": f["text"]} for f in feedback if f.get("after") not in placed]
    for i, step in enumerate(steps, 1):
        step["step_id"] = i
    usage = response.get("usage") or {}
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "agent": {k: v for k, v in (("name", agent.get("name") or "unknown"), ("version", agent.get("version") or "unknown"),
                                    ("model_name", model)) if v is not None},
        "steps": [{"step_id": s.pop("step_id"), **s} for s in steps],
        "final_metrics": {
            "total_prompt_tokens": usage.get("input_tokens", 0),
            "total_completion_tokens": usage.get("output_tokens", 0),
            "total_cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
            "total_steps": len(steps),
            "extra": {"reasoning_tokens": (usage.get("output_tokens_details") or {}).get("reasoning_tokens", 0),
                      "model_calls": usage.get("model_calls", 0)},
        },
    }
    if extra:
        doc["extra"] = dict(extra)
    return doc
