"""Our own code beside the well-kept library that does the same, measured (issue 37).

Each comparison feeds both the same real input and reports the CPU time of one operation, the
best of ``--repeats`` rounds (the shared machine's load shows as noise, not as a difference):

* ``metrics``: a real vLLM 0.26 ``/metrics`` page (``shared/reference/vllm-0.26-h200``; the
  copy in ``tests/fixtures`` when that is absent) read by ``brain.metrics`` and by
  ``prometheus_client.parser``, which must agree sample for sample; and the sim's page written
  by ``prometheus_client`` (``brain/sim/metrics_text.py``), plain and gzipped as vLLM's
  ``make_asgi_app`` sends it to a client that accepts gzip.
* ``sse``: a recorded vLLM chunk repeated ``--events`` times, streamed through a real
  ``httpx`` response (``MockTransport``, one chunk an event as vLLM writes them), read by
  ``brain.sse``, by ``httpx-sse`` and by a bare ``aiter_lines`` loop (what ``brain bench`` had),
  against the bare ``aiter_raw`` loop as the floor.
* ``backoff``: ``import tenacity`` in a fresh process that has the store imported (what the
  store's open would pay), and one call through tenacity's ``Retrying`` against a plain call
  when nothing fails.

    .venv/bin/python -m bench.libraries                  # all three
    .venv/bin/python -m bench.libraries metrics sse --repeats 9

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = [up / "shared" / "reference" / "vllm-0.26-h200" for up in ROOT.parents[:2]]
"""Where shared/ sits: beside a clone, or beside the folder of a worktree."""
PAGES = ("http", "http-no-auto-tool-choice", "http-real-weights")
FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.26" / "http" / "metrics_after.txt"


def best_ms(fn: Callable[[], Any], number: int, repeats: int) -> float:
    """The best of ``repeats`` rounds of ``number`` calls, in ms of CPU time a call."""
    rounds = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(number):
            fn()
        rounds.append((time.process_time() - start) / number * 1e3)
    return min(rounds)


def row(*cells: object) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |")


# ------------------------------------------------------------------------------------- metrics


def real_pages() -> list[tuple[str, str]]:
    for ref in REFERENCES:
        pages = [(p, ref / p / "metrics_after.txt") for p in PAGES]
        if found := [(name, path.read_text()) for name, path in pages if path.is_file()]:
            return found
    return [("tests/fixtures", FIXTURE.read_text())]


def library_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sim_page() -> Any:
    """A sim's metrics after 50 requests' worth of observations, spec decoding on."""
    from brain.sim.config import SimConfig, Speculative
    from brain.sim.engine import SimEngine

    engine = SimEngine(
        SimConfig(model="smol", max_model_len=4096, speculative=Speculative(num_tokens=2))
    )
    reg = engine.metrics
    for i in range(50):
        reg.inc("vllm:prompt_tokens", 100 + i)
        reg.observe("vllm:time_to_first_token_seconds", 0.01 * i)
        reg.observe("vllm:e2e_request_latency_seconds", 0.1 * i)
        reg.inc("vllm:request_success", 1, {"finished_reason": "stop"})
    return reg


def bench_metrics(repeats: int) -> None:
    from brain.metrics import parse_prometheus_text

    print("\n/metrics read (ms a page, CPU)\n")
    row("page", "bytes", "samples", "brain.metrics", "prometheus_client", "ratio", "same")
    row(*["---"] * 7)
    for name, text in real_pages():
        ours, theirs = parse_prometheus_text(text), library_samples(text)
        same = set(ours) == set(theirs) and all(
            ours[k] == theirs[k] or (math.isnan(ours[k]) and math.isnan(theirs[k])) for k in ours
        )
        a = best_ms(lambda t=text: parse_prometheus_text(t), 20, repeats)
        b = best_ms(lambda t=text: library_samples(t), 5, repeats)
        row(name, len(text), len(ours), f"{a:.2f}", f"{b:.2f}", f"{b / a:.1f}x", same)
    reg = sim_page()
    text = reg.render()
    print("\n/metrics written by the sim (ms a scrape, CPU)\n")
    row("bytes", "samples", "generate_latest", "+ gzip (an httpx client)")
    row(*["---"] * 4)
    body = text.encode()
    render = best_ms(reg.render, 20, repeats)
    zipped = best_ms(lambda: gzip.compress(body), 20, repeats)
    row(len(text), len(parse_prometheus_text(text)), f"{render:.2f}", f"{render + zipped:.2f}")


# ----------------------------------------------------------------------------------------- sse

CHUNK = (
    b'data: {"id":"chatcmpl-8e5add71b0b58a0f","object":"chat.completion.chunk",'
    b'"created":1796133018,"model":"smol","choices":[{"index":0,"delta":{"content":'
    b'" arrangement"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
)
"""One content chunk of ``http/chat_stream.txt`` (vLLM 0.26 on the H200), as it was sent."""


async def _read_raw(response: Any) -> int:
    n = 0
    async for _ in response.aiter_raw():
        n += 1
    return n - 1


async def _read_brain_sse(response: Any) -> int:
    from brain.sse import SSEDecoder

    decoder, n = SSEDecoder(), 0
    async for raw in response.aiter_raw():
        for data in decoder.feed(raw):
            if data == b"[DONE]":
                return n
            n += 1
    return n


async def _read_httpx_sse(response: Any) -> int:
    from httpx_sse import EventSource

    n = 0
    async for event in EventSource(response).aiter_sse():
        if event.data == "[DONE]":
            return n
        n += 1
    return n


async def _read_lines(response: Any) -> int:
    n = 0
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        if line[5:].strip() == "[DONE]":
            return n
        n += 1
    return n


def bench_sse(repeats: int, events: int) -> None:
    import httpx

    chunks = [CHUNK] * events + [b"data: [DONE]\n\n"]

    def handler(request: httpx.Request) -> httpx.Response:
        async def body() -> Any:
            for chunk in chunks:
                yield chunk

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    readers = {
        "aiter_raw, no decoding (the floor)": _read_raw,
        "brain.sse (aiter_raw + SSEDecoder)": _read_brain_sse,
        "httpx-sse (aiter_sse)": _read_httpx_sse,
        "aiter_lines + startswith (the old bench sender)": _read_lines,
    }

    async def once(reader: Any) -> float:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            start = time.process_time()
            async with client.stream("POST", "http://sim/v1/chat/completions", json={}) as r:
                n = await reader(r)
            spent = time.process_time() - start
        assert n == events, (reader, n)
        return spent / events * 1e6

    bom = b"\xef\xbb\xbf" + CHUNK + CHUNK + b"data: [DONE]\n\n"

    def bom_handler(request: httpx.Request) -> httpx.Response:
        async def body() -> Any:
            yield bom

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    async def after_bom(reader: Any) -> int:
        transport = httpx.MockTransport(bom_handler)
        async with (
            httpx.AsyncClient(transport=transport) as client,
            client.stream("POST", "http://sim/v1/chat/completions", json={}) as r,
        ):
            return await reader(r)

    print("\nevents read from a stream of 2 that starts with a BOM (the spec drops it)\n")
    row("brain.sse", "httpx-sse")
    row("---", "---")
    row(asyncio.run(after_bom(_read_brain_sse)), asyncio.run(after_bom(_read_httpx_sse)))

    print(f"\nevent-stream read (us an event, CPU; {events} events a stream)\n")
    row("reader", "us an event", "above the floor")
    row(*["---"] * 3)
    floor = None
    for name, reader in readers.items():
        best = min(asyncio.run(once(reader)) for _ in range(repeats))
        floor = best if floor is None else floor
        row(name, f"{best:.2f}", f"{best - floor:.2f}")


# ------------------------------------------------------------------------------------- backoff


def bench_backoff(repeats: int) -> None:
    code = (
        "import time, pilot.store.event_store\n"
        "t = time.perf_counter(); import tenacity\n"
        "print((time.perf_counter() - t) * 1e3)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    imports = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=env).stdout)
        for _ in range(repeats)
    ]  # fmt: skip
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

    def action() -> int:
        return 1

    def through_tenacity() -> int:
        retrying = Retrying(
            stop=stop_after_attempt(5),
            wait=wait_incrementing(start=0.05, increment=0.05),
            retry=retry_if_exception(lambda exc: True),
            reraise=True,
        )
        return retrying(action)

    plain = best_ms(action, 10_000, repeats) * 1e3
    wrapped = best_ms(through_tenacity, 2_000, repeats) * 1e3
    print("\nbackoff\n")
    row("what", "figure")
    row("---", "---")
    row("import tenacity after the store (ms, wall, each fresh process)",
        ", ".join(f"{x:.1f}" for x in sorted(imports)))  # fmt: skip
    row("a call that does not fail, plain (us)", f"{plain:.2f}")
    row("the same call through tenacity's Retrying (us)", f"{wrapped:.1f}")


SECTIONS = ("metrics", "sse", "backoff")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", nargs="*", help="metrics, sse, backoff (default: all three)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--events", type=int, default=5000)
    args = parser.parse_args(argv)
    what = args.what or list(SECTIONS)
    if unknown := set(what) - set(SECTIONS):
        parser.error(f"no comparison named {', '.join(sorted(unknown))}: pick from {SECTIONS}")
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, load average {load:.1f}, {os.cpu_count()} CPUs")
    if "metrics" in what:
        bench_metrics(args.repeats)
    if "sse" in what:
        bench_sse(args.repeats, args.events)
    if "backoff" in what:
        bench_backoff(args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
