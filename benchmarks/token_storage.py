"""Token data written per rollout for a long synthetic rollout (model.tokens: on).

    python benchmarks/token_storage.py [--turns 200] [--context 32768] [--system 2000]
                                       [--generation 100] [--drift]

A conversation of `turns` model calls whose prompt grows from `system` tokens to
`context`: each turn generates `generation` tokens and the tool's answer adds what is left
(vLLM-like float32 logprobs). The calls go through the proxy's recording path (what
`ModelProxy` does per answered call: TokenCollector on a vLLM-shaped Chat answer,
PromptLog for the prompt delta, the request's messages digested for `history`) into a
real model_calls.jsonl; then the convert step's join puts the training fields on the items
of a real response.json. The request holds the conversation as Chat messages, 4
characters a token. Prints the bytes of token data in each, the time the recording takes
per call (the messages' digests apart) and the rebuilt prompts' check. --drift: every
history re-renders the previous turn without its first 30 tokens (a template dropping
reasoning), so no prompt extends the previous turn (and every turn after the first is
left untrusted).
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sandbatch.rollout import responses, token_join  # noqa: E402
from sandbatch.proxy.tokens import PromptLog, TokenCollector, decode_prompts, history  # noqa: E402
from sandbatch.rollout.usage import iter_calls  # noqa: E402


def f32(x: float) -> float:
    """x as vLLM reports a logprob: a float32 value printed as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--system", type=int, default=2000)
    ap.add_argument("--generation", type=int, default=100)
    ap.add_argument("--drift", action="store_true")
    args = ap.parse_args()
    rng = random.Random(7)
    tool = max(0, (args.context - args.system) // args.turns - args.generation)
    with tempfile.TemporaryDirectory(prefix="token-storage-") as tmp:
        return measure(args, rng, tool, Path(tmp))


def measure(args: argparse.Namespace, rng: random.Random, tool: int, tmp: Path) -> int:
    calls_path, log, histories = tmp / "model_calls.jsonl", PromptLog(), PromptLog()
    prompt = [rng.randrange(1, 150000) for _ in range(args.system)]
    messages = [{"role": "system", "content": "s" * 4 * args.system}, {"role": "user", "content": "Fix the bug."}]
    items, record_s, history_s, truth = [], 0.0, 0.0, {}
    with open(calls_path, "w", encoding="utf-8") as fh:
        for n in range(1, args.turns + 1):
            generated = [rng.randrange(1, 150000) for _ in range(args.generation)]
            call_id = f"call_{n}"
            answer = {"prompt_token_ids": prompt, "choices": [{"index": 0, "token_ids": generated, "message": {
                "role": "assistant", "content": f"step {n}", "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": f'{{"n": {n}}}'}}]},
                "logprobs": {"content": [{"token": "x", "logprob": f32(-abs(rng.gauss(0, 1.5)))}
                                         for _ in generated]}}]}
            t0 = time.perf_counter()
            collector = TokenCollector()
            collector.add(answer)
            record = {"call": n, "status": 200, "endpoint": "chat", "output": collector.output(),
                      "tokens": log.record(n, collector.prompt_token_ids, collector.generation(), collector.logprobs,
                                           n > 1)}
            t1 = time.perf_counter()
            record["history"] = histories.delta(n, history({"messages": messages}))[0]
            history_s += time.perf_counter() - t1
            fh.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
            record_s += time.perf_counter() - t0
            truth[n] = list(prompt)
            items += [responses.message(f"step {n}"), responses.function_call(call_id, "bash", f'{{"n": {n}}}'),
                      responses.function_call_output(call_id, "x")]
            messages += [answer["choices"][0]["message"], {"role": "tool", "tool_call_id": call_id, "content": "t" * 4 * tool}]
            rendered = generated[30:] if args.drift else generated
            prompt = prompt + rendered + [rng.randrange(1, 150000) for _ in range(tool)]
    rows = list(iter_calls(calls_path))
    assert decode_prompts(rows) == truth, "the deltas do not rebuild the prompts"
    joined, _ = token_join.attach(items, rows)
    resp_path = tmp / "response.json"
    resp_path.write_text(json.dumps(responses.response(items, responses.usage(), "m", "completed", {}),
                                    ensure_ascii=False))
    token_bytes = sum(len(json.dumps({k: i[k] for k in token_join.TRAINING_FIELDS}, separators=(",", ":")))
                      for i in items if "prompt_token_ids" in i)
    print(f"{args.turns} turns, prompt {args.system} -> {len(truth[args.turns])} tokens, "
          f"{args.generation} generated + {tool} tool tokens a turn{', drift every turn' if args.drift else ''}")
    print(f"model_calls.jsonl: {calls_path.stat().st_size / 1e6:.2f} MB "
          f"({sum(len(json.dumps(r['tokens'], separators=(',', ':'))) for r in rows) / 1e6:.2f} MB of it token data); "
          f"recording {1000 * record_s / args.turns:.2f} ms a call "
          f"({1000 * history_s / args.turns:.2f} ms of it the messages' digests, "
          f"{sum(len(json.dumps(r['history'], separators=(',', ':'))) for r in rows) / 1e6:.3f} MB)")
    t0 = time.perf_counter()
    json.loads(resp_path.read_bytes())
    print(f"response.json: {resp_path.stat().st_size / 1e6:.2f} MB ({token_bytes / 1e6:.2f} MB training fields: "
          f"each turn's whole prompt, as NeMo Gym's items carry it), parsed in {time.perf_counter() - t0:.2f} s; "
          f"join {joined.matched_calls}/{joined.calls} calls, "
          f"drifted {joined.drifted_turns}/{joined.continuing_turns} turns, "
          f"{joined.segments} segment(s), {joined.untrusted_turns} untrusted turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
