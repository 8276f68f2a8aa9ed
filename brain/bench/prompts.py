"""The prompts ``brain bench`` sends: synthetic ones of a given token length, depth prompts
(fresh context before the measured prompt) and a JSONL dataset's.

Token lengths come from the server's own tokenizer when it has vLLM's ``/tokenize``: two
calls fit characters per token and the chat template's overhead (``calibrate``); without it a
guess of four characters per token, and the report shows what the server really counted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from brain.bench.models import BenchError, BenchPrompt

BYTES_PER_TOKEN_GUESS = 4
"""Characters per token when the server has no ``/tokenize`` (ceil(bytes/4)-ish)."""


_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we can their has been if more when will "
    "would who so no time people into year only some could them see other than then now look "
    "come its over think also back after use two how our work first well way even new want "
    "because any these give day most us river stone paper engine garden signal orbit lantern "
    "harbor ledger meadow copper thunder violet winter marble falcon cipher quartz rhythm "
    "saddle timber velvet whistle anchor beacon canyon dynamo ember fathom glacier hollow "
    "island jasper kernel lattice mosaic nectar oracle prism quiver raven summit tundra "
    "umbra vertex willow yonder zephyr"
)
WORDS = _WORD_TEXT.split()


def random_text(chars: int, rng: random.Random) -> str:
    """Pseudo-English ASCII of exactly ``chars`` characters (never compresses or repeats)."""
    if chars <= 0:
        return ""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


@dataclass(frozen=True)
class Calibration:
    """Prompt tokens of a one-message chat = overhead + characters / chars_per_token."""

    source: Literal["tokenize", "heuristic"]
    chars_per_token: float = BYTES_PER_TOKEN_GUESS
    overhead: float = 0.0

    def chars_for(self, tokens: int, with_overhead: bool = True) -> int:
        body = tokens - (self.overhead if with_overhead else 0.0)
        return max(1, round(body * self.chars_per_token))


async def _count_tokens(
    client: httpx.AsyncClient, root: str, model: str, messages: list[dict[str, Any]]
) -> int | None:
    try:
        resp = await client.post(f"{root}/tokenize", json={"model": model, "messages": messages})
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        count = resp.json().get("count")
    except ValueError:
        return None
    return int(count) if isinstance(count, int) else None


async def calibrate(client: httpx.AsyncClient, root: str, model: str, seed: int) -> Calibration:
    """Fit prompt tokens against characters with two ``/tokenize`` calls; guess if there is none.

    A server without ``/tokenize`` (not vLLM) gets ceil(bytes/4)-ish prompts and the report shows
    the prompt tokens the server really counted (usage).
    """
    rng = random.Random(f"{seed}:calibrate")
    short, long = 400, 4000
    counts = []
    for n in (short, long):
        text = random_text(n, rng)
        count = await _count_tokens(client, root, model, [{"role": "user", "content": text}])
        if count is None:
            return Calibration("heuristic")
        counts.append(count)
    if counts[1] <= counts[0]:
        return Calibration("heuristic")
    cpt = (long - short) / (counts[1] - counts[0])
    return Calibration("tokenize", chars_per_token=cpt, overhead=max(0.0, counts[0] - short / cpt))


def synthetic_prompts(
    n: int, input_len: int, output_len: int, calibration: Calibration, seed: str
) -> list[BenchPrompt]:
    """``n`` distinct single-message prompts of about ``input_len`` prompt tokens each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tag = f"[{seed} #{i}] "
        chars = calibration.chars_for(input_len)
        text = (tag + random_text(chars, rng))[:chars] if chars > len(tag) else tag[:chars]
        out.append(BenchPrompt([{"role": "user", "content": text}], output_len))
    return out


def depth_prompt(
    depth: int, input_len: int, output_len: int, calibration: Calibration, seed: str
) -> BenchPrompt:
    """``depth`` tokens of fresh context as an earlier exchange, then the measured prompt."""
    rng = random.Random(seed)
    prompt = f"[{seed}] " + random_text(calibration.chars_for(input_len), rng)
    messages: list[dict[str, Any]] = []
    if depth > 0:
        context = random_text(calibration.chars_for(depth, with_overhead=False), rng)
        messages += [
            {"role": "user", "content": context},
            {"role": "assistant", "content": "Noted."},
        ]
    messages.append({"role": "user", "content": prompt[: calibration.chars_for(input_len)]})
    return BenchPrompt(messages, output_len)


def load_dataset(path: Path, output_len: int) -> list[BenchPrompt]:
    """JSONL: one object a line, ``{"prompt": str}`` or ``{"messages": [...]}``, optionally with
    ``"max_tokens"`` (else ``output_len``). Blank lines and lines starting with # are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BenchError(f"cannot read dataset {path}: {exc}") from exc
    prompts: list[BenchPrompt] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise BenchError(f"{path}:{number}: not JSON: {exc}") from exc
        if not isinstance(item, dict):
            raise BenchError(f"{path}:{number}: expected an object with 'prompt' or 'messages'")
        if isinstance(item.get("messages"), list) and item["messages"]:
            messages = item["messages"]
        elif isinstance(item.get("prompt"), str):
            messages = [{"role": "user", "content": item["prompt"]}]
        else:
            raise BenchError(f"{path}:{number}: needs a 'prompt' string or a 'messages' list")
        max_tokens = item.get("max_tokens", item.get("output_len", output_len))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BenchError(f"{path}:{number}: max_tokens must be a positive integer")
        prompts.append(BenchPrompt(messages, max_tokens))
    if not prompts:
        raise BenchError(f"{path}: no prompts in the file")
    return prompts


def take_cycled(prompts: Sequence[BenchPrompt], n: int, offset: int = 0) -> list[BenchPrompt]:
    return [prompts[(offset + i) % len(prompts)] for i in range(n)]
