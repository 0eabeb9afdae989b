"""Property: any pool event stream converts without losing an event or a call's output."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbatch.harness import get_harness

text = st.text(max_size=12)
json_value = st.recursive(st.none() | st.booleans() | st.integers() | text,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                          max_leaves=6)
events = st.one_of(
    st.fixed_dictionaries({"type": st.just("reasoning"), "reasoning": text}),
    st.fixed_dictionaries({"type": st.just("thought"), "thought": text}),
    st.fixed_dictionaries({"type": st.just("assistantMessage"), "message": text | st.just("  \n")}),
    st.fixed_dictionaries({"type": st.just("toolCall")},
                          optional={"name": st.sampled_from(["shell", "read", "exit", ""]), "args": json_value}),
    st.fixed_dictionaries({"type": st.just("toolCallResult")},
                          optional={"result": json_value, "err": json_value, "entries": st.lists(text, max_size=3)}),
    st.fixed_dictionaries({"error": text}),
    st.fixed_dictionaries({"type": st.just("error"), "message": text}),
    st.fixed_dictionaries({"type": st.just("oauth_url"), "url": text}),
    st.fixed_dictionaries({"type": st.sampled_from(["mystery", "usage"]), "x": json_value}),
    text,  # a stdout line that was not JSON
)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=30))
def test_every_event_survives_and_every_call_has_one_output(stream):
    harness = get_harness("pool")
    conv = harness.convert(stream, harness.options_of({}))
    meta = conv.metadata
    calls = [i for i in conv.items if i["type"] == "function_call"]
    outputs = [i for i in conv.items if i["type"] == "function_call_output"]
    call_ids = [c["call_id"] for c in calls]
    # every call: exactly one output, after it; every output: exactly one call, or counted as orphan
    for call in calls:
        mine = [k for k, i in enumerate(conv.items) if i["type"] == "function_call_output"
                and i["call_id"] == call["call_id"]]
        assert len(mine) == 1 and mine[0] > conv.items.index(call)
    orphans = [o for o in outputs if o["call_id"] not in call_ids]
    assert len(orphans) == meta.get("orphan_results", 0)
    assert len(call_ids) == len(set(call_ids))
    # results pair FIFO: the calls left unanswered are the latest ones, the others are answered
    # in call order, and every result event is one output
    answered = call_ids[:len(call_ids) - meta.get("unanswered_calls", 0)]
    assert [o["call_id"] for o in outputs if o["call_id"] in answered] == answered
    assert len(outputs) - meta.get("unanswered_calls", 0) == sum(
        1 for e in stream if isinstance(e, dict) and e.get("type") == "toolCallResult")
    # arguments are JSON text; calls are named
    for call in calls:
        json.loads(call["arguments"])
        assert call["name"]
    # nothing vanishes: each event is an item, an error, an unknown record, or a counted skip
    assert len(stream) == (len(conv.items) - meta.get("unanswered_calls", 0) + sum(meta.get("skipped", {}).values())
                           + len(meta.get("errors", [])) + conv.unknown)
    assert meta.get("failed_tool_results", 0) == sum(
        1 for e in stream if isinstance(e, dict) and e.get("type") == "toolCallResult" and "err" in e)

