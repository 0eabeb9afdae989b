"""The aiohttp-backed httpx transport of the opensandbox provider, against raw local servers.

Each server is a few lines of asyncio that answer exactly as a case needs (or not at
all), so the httpx exception a failure becomes, reuse of connections and streaming are
checked at the transport itself; the provider's tests cover it through the SDK.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest

from sandbatch.sandbox.opensandbox_http import AiohttpTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    """The request line and the body (Content-Length or chunked) of one request."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    lines = head.split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        return lines[0], await reader.readexactly(int(headers["content-length"]))
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)
    return lines[0], body


def response(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def serve(handler: Handler, test: Callable[[str, list[int]], Awaitable[None]]) -> list[int]:
    """Run `test(base_url, connections)` against `handler`; returns one entry per connection."""
    connections: list[int] = []

    async def on_connect(reader, writer):
        connections.append(1)
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await test(f"http://127.0.0.1:{port}", connections)
        finally:
            server.close()

    asyncio.run(main())
    return connections


def client(**limits) -> httpx.AsyncClient:
    transport = AiohttpTransport(max_connections=limits.pop("max_connections", 4), keepalive_expiry=5)
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5, **limits))


def get_fails_with(error: type[Exception], handler: Handler, **limits) -> None:
    async def test(url, connections):
        async with client(**limits) as c:
            with pytest.raises(error):
                await c.get(url)

    serve(handler, test)


async def echo_forever(reader, writer):
    while True:
        line, body = await read_request(reader)
        writer.write(response(line.encode() + b" " + body))
        await writer.drain()


def test_keeps_connections_alive_and_sends_bodies():
    async def test(url, connections):
        async with client() as c:
            assert (await c.get(url + "/a?x=%2F")).text == "GET /a?x=%2F HTTP/1.1 "
            assert (await c.post(url + "/b", json={"k": 1})).text == 'POST /b HTTP/1.1 {"k":1}'
            up = await c.post(url + "/up", files={"file": ("f.bin", b"\x00\xff" * 3000)})  # multipart
            assert up.content.startswith(b"POST /up HTTP/1.1 --") and up.content.count(b"\x00\xff") == 3000
        assert len(connections) == 1

    serve(echo_forever, test)


def test_streamed_upload_of_unknown_length_is_chunked():
    async def parts():
        for chunk in (b"one,", b"two"):
            yield chunk

    async def test(url, connections):
        async with client() as c:
            assert (await c.post(url + "/s", content=parts())).text == "POST /s HTTP/1.1 one,two"

    serve(echo_forever, test)


def test_body_reaches_httpx_undecoded_and_streams():
    async def handler(reader, writer):
        await read_request(reader)
        packed = gzip.compress(b"decoded by httpx")
        writer.write(response(packed, "Content-Encoding: gzip"))
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await reader.read(1)  # holds the rest back until the client has closed its side

    async def test(url, connections):
        async with client() as c:
            assert (await c.get(url)).text == "decoded by httpx"
            async with c.stream("GET", url, timeout=httpx.Timeout(5, read=None)) as r:
                assert await anext(r.aiter_bytes()) == b"first"  # before the response has ended

    serve(handler, test)


def test_unread_body_closes_its_connection():
    served = []

    async def handler(reader, writer):
        served.append(1)
        if len(served) > 1:
            return await echo_forever(reader, writer)
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000)
        await writer.drain()
        await reader.read(1)  # the rest never comes; returns when the client closes

    async def test(url, connections):
        async with client() as c:
            async with c.stream("GET", url + "/big") as r:
                await anext(r.aiter_bytes())
            assert (await c.get(url + "/next")).text == "GET /next HTTP/1.1 "
        assert len(connections) == 2  # the next response was not read from the rest of the first

    serve(handler, test)


def test_refused_connection_is_a_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused

    async def main():
        async with client() as c:
            with pytest.raises(httpx.ConnectError):
                await c.get(f"http://127.0.0.1:{port}/")

    asyncio.run(main())


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"],
                         ids=["no-response", "body-cut-short"])
def test_server_closing_early_is_a_remote_protocol_error(reply):
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(reply)  # then closes

    get_fails_with(httpx.RemoteProtocolError, handler)


def test_silent_server_is_a_read_timeout():
    async def handler(reader, writer):
        await read_request(reader)
        await reader.read(1)  # never answers

    get_fails_with(httpx.ReadTimeout, handler, read=0.3)


def test_waiting_for_a_busy_pool_is_a_connect_timeout():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n")
        await writer.drain()
        await reader.read(1)

    async def test(url, connections):
        async with client(max_connections=1, pool=0.2, connect=0.2) as c:  # waits up to pool + connect
            async with c.stream("GET", url):
                with pytest.raises(httpx.ConnectTimeout):  # pre-send: the SDK may retry any method
                    await c.get(url)

    serve(handler, test)
