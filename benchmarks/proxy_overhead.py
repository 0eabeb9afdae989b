"""Latency and throughput the model proxy adds, against a minimal fast upstream on 127.0.0.1.

    python benchmarks/proxy_overhead.py [--requests 2000] [--concurrency 8] [--seconds 3]
                                        [--upstream-delay-ms 0] [--stream]

Three processes, as in a real rollout: the upstream (a fixed Chat Completions answer),
the proxy (a ModelProxy in a background thread of an otherwise idle process, as in the
harness job) and the load generator (this process, a raw-socket HTTP/1.1 client so its
own cost stays small). Latency: sequential requests on one keep-alive connection,
direct and through the proxy in alternating blocks. Throughput: `concurrency`
connections for `seconds`, direct then proxied. Prints the figures and the ratios
against the targets (p50 added <= 1 ms, throughput >= 90 % of direct). Then, unless
--no-sweep, the throughput ratio again for upstream service times of 10 ms and 100 ms
(a model answers in hundreds of ms): the zero-cost upstream measures the proxy's own
CPU per call, the others what an agent sees. Everything is bounded in count and time
and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BODY = json.dumps({
    "model": "bench", "max_tokens": 64,
    "messages": [{"role": "system", "content": "You are a coding agent." * 20},
                 {"role": "user", "content": [{"type": "text", "text": "Fix the bug in foo.py. " * 40,
                                               "cache_control": {"type": "ephemeral"}}]}],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}],
}).encode()

ANSWER = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Looking at the file first.",
        "tool_calls": [{"id": "call_0", "type": "function",
                        "function": {"name": "bash", "arguments": "{\"command\": \"cat foo.py\"}"}}]}}],
    "usage": {"prompt_tokens": 412, "completion_tokens": 23, "total_tokens": 435},
}).encode()


# --- the two server roles (run as subprocesses of this script) ---------------------------

def serve_upstream(delay_ms: float, stream: bool) -> None:
    from aiohttp import web

    from sandbatch.proxy.server import catch_all, listen

    chunks = [b'data: {"choices":[{"index":0,"delta":{"content":"tok%d "}}]}\n\n' % i for i in range(20)]
    chunks.append(b'data: {"choices":[],"usage":{"prompt_tokens":412,"completion_tokens":20,"total_tokens":432}}\n\n')
    chunks.append(b"data: [DONE]\n\n")

    async def handle(request):
        await request.read()
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        if stream:
            out = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await out.prepare(request)
            for c in chunks:
                await out.write(c)
            await out.write_eof()
            return out
        return web.Response(body=ANSWER, content_type="application/json")

    async def main():
        runner, port = await listen(catch_all(handle), "127.0.0.1", 0)
        print(port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
        await runner.cleanup()

    asyncio.run(main())


def serve_proxy(upstream_port: int, calls_path: str) -> None:
    from sandbatch.proxy import ModelProxy

    sampling = {"temperature": 0.6, "max_tokens": 1024}  # a typical run sets some overrides
    with ModelProxy({}, f"http://127.0.0.1:{upstream_port}/v1", "bench-key", calls_path, sampling=sampling,
                    agent_key="agent") as p:
        print(p.port, flush=True)
        sys.stdin.read()  # the job's main thread is busy elsewhere; here it just waits


# --- a small raw HTTP/1.1 client ----------------------------------------------------------

def request_bytes(port: int, stream: bool) -> bytes:
    body = BODY if not stream else BODY.replace(b'"max_tokens": 64', b'"max_tokens": 64, "stream": true')
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nAuthorization: Bearer agent\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        i = lower.index(b"content-length:")
        length = int(lower[i + 15:lower.index(b"\r\n", i)])
        await reader.readexactly(length)
    return status


async def latency(port: int, n: int, stream: bool) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = request_bytes(port, stream)
    out = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            writer.write(req)
            status = await read_response(reader)
            out.append(time.perf_counter() - t0)
            assert status == 200, status
    finally:
        writer.close()
    return out


async def throughput(port: int, concurrency: int, seconds: float, stream: bool) -> float:
    req = request_bytes(port, stream)
    stop = time.perf_counter() + seconds
    done = 0

    async def worker():
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop:
                writer.write(req)
                assert await read_response(reader) == 200
                done += 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - t0)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def start(args: list[str]) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    proc = subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    return proc, int(proc.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests per side for latency")
    parser.add_argument("--concurrency", type=int, default=8, help="connections for the throughput run")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each throughput run")
    parser.add_argument("--upstream-delay-ms", type=float, default=0.0, help="upstream service time per call")
    parser.add_argument("--stream", action="store_true", help="streamed (SSE) answers of 22 events")
    parser.add_argument("--no-sweep", action="store_true", help="skip the throughput at 10 and 100 ms")
    parser.add_argument("--role", choices=["upstream", "proxy"], help=argparse.SUPPRESS)
    parser.add_argument("--upstream-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--calls", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "upstream":
        return serve_upstream(args.upstream_delay_ms, args.stream)
    if args.role == "proxy":
        return serve_proxy(args.upstream_port, args.calls)

    tmp = tempfile.mkdtemp(prefix="proxy-bench-")
    calls = Path(tmp) / "model_calls.jsonl"
    extra = ["--stream"] if args.stream else []
    up, up_port = start(["--role", "upstream", "--upstream-delay-ms", str(args.upstream_delay_ms), *extra])
    px, px_port = start(["--role", "proxy", "--upstream-port", str(up_port), "--calls", str(calls)])
    try:
        async def run():
            await latency(up_port, 200, args.stream)  # warm up both paths
            await latency(px_port, 200, args.stream)
            direct, proxied = [], []
            block = max(1, args.requests // 10)
            for _ in range(10):
                direct += await latency(up_port, block, args.stream)
                proxied += await latency(px_port, block, args.stream)
            tp_direct = await throughput(up_port, args.concurrency, args.seconds, args.stream)
            tp_proxied = await throughput(px_port, args.concurrency, args.seconds, args.stream)
            return direct, proxied, tp_direct, tp_proxied

        direct, proxied, tp_direct, tp_proxied = asyncio.run(run())
    finally:
        for proc in (px, up):
            proc.stdin.close()
            proc.wait(30)
    recorded = sum(1 for _ in open(calls))
    ms = lambda s: s * 1000  # noqa: E731
    added50 = ms(pct(proxied, 0.5) - pct(direct, 0.5))
    added99 = ms(pct(proxied, 0.99) - pct(direct, 0.99))
    ratio = tp_proxied / tp_direct
    mode = "stream" if args.stream else "json"
    print(f"upstream: {mode}, service time {args.upstream_delay_ms:g} ms; {len(direct)} sequential requests per side; "
          f"throughput with {args.concurrency} connections for {args.seconds:g} s; {os.cpu_count()} CPUs")
    print(f"latency direct   p50 {ms(pct(direct, .5)):.3f} ms  p99 {ms(pct(direct, .99)):.3f} ms  "
          f"mean {ms(statistics.mean(direct)):.3f} ms")
    print(f"latency proxied  p50 {ms(pct(proxied, .5)):.3f} ms  p99 {ms(pct(proxied, .99)):.3f} ms  "
          f"mean {ms(statistics.mean(proxied)):.3f} ms")
    print(f"added latency    p50 {added50:.3f} ms  p99 {added99:.3f} ms   (target p50 <= 1 ms: "
          f"{'met' if added50 <= 1 else 'NOT met'})")
    print(f"throughput       direct {tp_direct:.0f}/s  proxied {tp_proxied:.0f}/s  ratio {ratio:.1%}   "
          f"(target >= 90 %: {'met' if ratio >= 0.9 else 'NOT met'})")
    print(f"calls recorded by the proxy: {recorded}")
    if args.no_sweep:
        return
    for delay in (10.0, 100.0):
        up, up_port = start(["--role", "upstream", "--upstream-delay-ms", str(delay), *extra])
        px, px_port = start(["--role", "proxy", "--upstream-port", str(up_port), "--calls", str(calls)])
        try:
            async def sweep():
                await latency(px_port, 5, args.stream)
                return (await throughput(up_port, args.concurrency, args.seconds, args.stream),
                        await throughput(px_port, args.concurrency, args.seconds, args.stream))

            tp_direct, tp_proxied = asyncio.run(sweep())
        finally:
            for proc in (px, up):
                proc.stdin.close()
                proc.wait(30)
        ratio = tp_proxied / tp_direct
        print(f"throughput at {delay:g} ms upstream service time: direct {tp_direct:.0f}/s  proxied "
              f"{tp_proxied:.0f}/s  ratio {ratio:.1%}   (target >= 90 %: {'met' if ratio >= 0.9 else 'NOT met'})")


if __name__ == "__main__":
    main()
