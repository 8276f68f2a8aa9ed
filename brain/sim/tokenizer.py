"""A deterministic tokenizer stand-in, so prompt budgets and usage behave like a real server's.

The rule, which everything in the sim (the 400 context check, ``usage``, ``/tokenize``,
``/detokenize``, the output token stream) obeys:

* Chat requests are first rendered to text with a fixed ChatML-like template::

      <|im_start|>system\\n# Tools\\n{one JSON schema per line, keys sorted}\\n<|im_end|>\\n
      <|im_start|>{role}\\n{content}{<tool_call>{"name":..,"arguments":..}</tool_call>...}<|im_end|>\\n
      ...
      <|im_start|>assistant\\n                      (the generation prompt)

  A tool message renders as role ``tool`` with its content; list content keeps its text parts
  and renders any other part as ``<{type}>``, except images (below).
* Images: every ``image_url`` part renders as a fixed 1024-byte placeholder
  (``<start_of_image>...<end_of_image>``), so each image costs exactly
  ``IMAGE_TOKENS = 256`` tokens whatever its size, the fixed per-image cost of Gemma 3's and
  Gemma 4's default vision budget. Budgets, usage and ``/tokenize`` all include it.
* Text is encoded as UTF-8 and cut into 4-byte chunks; each chunk is one token, so a text of
  B bytes has ceil(B / 4) tokens. A chunk's id is a hash of it in ``[FIRST_ID, VOCAB_SIZE)``,
  the range of a real vocabulary (Gemma's size), the same in every process; ``/detokenize``
  turns ids back into the chunks this server has encoded (a :class:`Vocabulary`), and any
  other id into U+FFFD, as a real tokenizer would for an id it has no piece for.
* Generated text is cut into pieces of whole characters holding at least 4 bytes each (the last
  may hold fewer); each piece is one output token and one unit of streaming.

Counting the same messages therefore gives the same number in any process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BYTES_PER_TOKEN = 4
IMAGE_TOKENS = 256
_IMAGE_OPEN, _IMAGE_CLOSE = "<start_of_image>", "<end_of_image>"
IMAGE_TEXT = _IMAGE_OPEN + "." * (IMAGE_TOKENS * BYTES_PER_TOKEN - 30) + _IMAGE_CLOSE
"""What one image renders as: exactly IMAGE_TOKENS * 4 bytes, so exactly IMAGE_TOKENS more
tokens wherever it falls (ceil((B + 4n) / 4) = ceil(B / 4) + n)."""


VOCAB_SIZE = 262144
FIRST_ID = 256
"""Ids below this stand for special tokens and are never given to a chunk."""


def _chunks(text: str) -> list[bytes]:
    data = text.encode("utf-8")
    return [data[i : i + BYTES_PER_TOKEN] for i in range(0, len(data), BYTES_PER_TOKEN)]


def chunk_id(chunk: bytes) -> int:
    """The id of one 4-byte chunk: stable across processes, inside the vocabulary."""
    digest = int.from_bytes(hashlib.blake2b(chunk, digest_size=8).digest(), "big")
    return FIRST_ID + digest % (VOCAB_SIZE - FIRST_ID)


class Vocabulary:
    """The chunks a server has encoded, so ``/detokenize`` can invert ``/tokenize``.

    Bounded: past ``max_entries`` the oldest are forgotten (their ids then decode to U+FFFD).
    """

    def __init__(self, max_entries: int = 1 << 20):
        self._pieces: dict[int, bytes] = {}
        self._max = max_entries

    def encode(self, text: str) -> list[int]:
        """Token ids for ``text`` (see the module docstring), remembered for decoding."""
        ids = []
        for chunk in _chunks(text):
            token = chunk_id(chunk)
            if token not in self._pieces:
                if len(self._pieces) >= self._max:
                    self._pieces.pop(next(iter(self._pieces)))
                self._pieces[token] = chunk
            ids.append(token)
        return ids

    def decode(self, tokens: Iterable[int]) -> str:
        """Text for ids this vocabulary gave out; any other id decodes to U+FFFD."""
        out = bytearray()
        for token in tokens:
            out += self._pieces.get(token, b"\xef\xbf\xbd")
        return out.decode("utf-8", errors="replace")


def count_text(text: str) -> int:
    """Number of tokens in ``text``: ceil(UTF-8 bytes / 4)."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def split_pieces(text: str) -> list[str]:
    """Cut generated text into output tokens: whole characters, at least 4 bytes per piece."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for char in text:
        current.append(char)
        size += len(char.encode("utf-8"))
        if size >= BYTES_PER_TOKEN:
            pieces.append("".join(current))
            current, size = [], 0
    if current:
        pieces.append("".join(current))
    return pieces


def content_text(content: Any) -> str:
    """The text of a message's content, whether a string, a list of parts or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                if part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(f"<{part.get('type', 'part')}>")
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(content)


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """The chat template: the exact text whose tokens are counted for a chat request."""
    out: list[str] = []
    if tools:
        schemas = "\n".join(json.dumps(tool, sort_keys=True, ensure_ascii=False) for tool in tools)
        out.append(f"<|im_start|>system\n# Tools\n{schemas}\n<|im_end|>\n")
    for message in messages:
        role = str(message.get("role", "user"))
        content = message.get("content")
        if isinstance(content, list):
            content = [
                {"type": "text", "text": IMAGE_TEXT}
                if isinstance(part, Mapping) and part.get("type") == "image_url"
                else part
                for part in content
            ]
        body = content_text(content)
        for call in message.get("tool_calls") or []:
            function = (call.get("function") if isinstance(call, Mapping) else None) or {}
            payload = {"name": function.get("name"), "arguments": function.get("arguments")}
            body += f"<tool_call>{json.dumps(payload, ensure_ascii=False)}</tool_call>"
        out.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def count_chat(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> int:
    """Prompt tokens of a chat request, as the 400 check, usage and /tokenize report them."""
    return count_text(render_chat(messages, tools, add_generation_prompt))
