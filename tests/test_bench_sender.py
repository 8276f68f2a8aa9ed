"""``brain bench``'s timed request reads the stream with the project's one event-stream reader
(``brain.sse``): over real HTTP, an event the stream did not close is never counted, every line
ending of the spec is read, and a stream cut before ``[DONE]`` is a failed request."""

from __future__ import annotations

import asyncio
import json

import httpx
from pilot_harness import read_request

from brain.bench.sender import RequestResult, send_chat


def _event(delta: dict, finish: str | None = None, **extra: object) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return f"data: {json.dumps(chunk)}".encode()


USAGE = {"prompt_tokens": 7, "completion_tokens": 3}


async def _serve_and_send(body: bytes) -> RequestResult:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient() as client:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            return await send_chat(client, url, {"model": "m", "max_tokens": 3, "stream": True})
    finally:
        server.close()
        await server.wait_closed()


def test_each_line_ending_and_multi_line_data_are_read_as_the_spec_says():
    for end in (b"\n", b"\r\n", b"\r"):
        body = end.join(
            [
                _event({"content": "a"}),
                b"",
                b": a comment",
                _event({"content": "b"}),
                b"",
                # one event whose data spans two lines: the two are joined by LF
                b'data: {"choices": [{"index": 0, "delta": {"content": "c"},',
                b'data:  "finish_reason": "stop"}], "usage": ' + json.dumps(USAGE).encode() + b"}",
                b"",
                b"data: [DONE]",
                b"",
                b"",
            ]
        )
        result = asyncio.run(_serve_and_send(body))
        assert result.ok, (end, result.error)
        assert result.chunk_bytes == [1, 1, 1] and result.finish_reason == "stop"
        assert (result.prompt_tokens, result.output_tokens) == (7, 3)


def test_a_stream_cut_mid_event_counts_nothing_of_the_unclosed_event_and_fails():
    body = b"\n\n".join([_event({"content": "a"}), _event({"content": "bb"})]) + b"\n\n"
    body += _event({"content": "never closed"})  # no blank line: the connection ends here
    result = asyncio.run(_serve_and_send(body))
    assert not result.ok and result.error == "stream ended without [DONE]"
    assert result.chunk_bytes == [1, 2]


def test_an_error_event_inside_the_stream_is_the_request_error():
    body = _event({"content": "a"}) + b"\n\n"
    body += b'data: {"error": {"message": "EngineCore died", "code": 500}}\n\n'
    result = asyncio.run(_serve_and_send(body))
    assert not result.ok and result.error == "error in stream: EngineCore died"
