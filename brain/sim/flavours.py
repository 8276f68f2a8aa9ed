"""Other OpenAI-compatible servers' wire differences, reproduced on top of the simulated vLLM.

The pilot must work against llama.cpp's ``llama-server``, llama-cpp-python's server and
Ollama as well as vLLM; what differs on the wire is small and is reproduced here as an ASGI
middleware, so the suite tests it over loopback (each behaviour is checked against the
server's own source, named below; see README's compatibility table):

- ``llama-cpp-python`` (abetlen/llama-cpp-python ``llama_cpp/server/app.py``, 0.3.x): no
  ``/health``, ``/metrics``, ``/tokenize`` (404 ``{"detail": "Not Found"}``); tokens counted
  at ``POST /extras/tokenize/count`` (``{"input": str}`` -> ``{"count": n}``); ``/v1/models``
  cards without ``max_model_len``; streamed answers carry no usage (``stream_options`` is
  ignored); an assistant message with ``content: null`` fails validation with HTTP 500; a
  prompt over the window (``llama.py`` ``_create_completion``: "Requested tokens (N) exceed
  context window of W", raised once the stream has begun) cuts a streamed answer after its
  first chunk and is a 400 ``context_length_exceeded`` (``server/errors.py``) unstreamed.
- ``llama.cpp`` (ggml-org/llama.cpp ``tools/server``): its own routes and texts in
  ``flavour_answers.py``; ``/health`` answers ``{"status": "ok"}``; the batch capacity
  (``max_num_seqs``) is its slots (``--parallel``) and ``max_model_len`` one slot's window.
- ``ollama`` (ollama/ollama ``server/routes.go``, ``openai/openai.go``): ``GET /`` says
  "Ollama is running", no ``/health``; the loaded runner's window in ``GET /api/ps``
  (``context_length``); ``/v1/models`` cards of id/object/created/owned_by only.
- ``lmstudio`` (LM Studio's REST API documentation): no ``/health``, ``/metrics`` nor
  ``/tokenize``; the loaded window in ``GET /api/v0/models`` (``loaded_context_length``).
- ``sglang``: vLLM's wire but for its cards' ``owned_by`` and its overflow text.

Imports nothing of the pilot's; a flavour is a server's config (``SimConfig.flavour``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from brain.sim import flavour_answers as answers
from brain.sim.tokenizer import count_text

_NOT_FOUND = {
    "llama-cpp-python": {"/health", "/metrics", "/tokenize", "/detokenize", "/version"},
    "llama.cpp": {"/version"},
    "ollama": {"/health", "/metrics", "/tokenize", "/detokenize", "/version"},
    "lmstudio": {"/health", "/metrics", "/tokenize", "/detokenize", "/version"},
}


class FlavourMiddleware:
    """Makes the simulated vLLM answer as another server would, where they differ."""

    def __init__(
        self, app: ASGIApp, flavour: str, model: str, max_model_len: int, slots: int = 1
    ) -> None:
        self.app = app
        self.flavour = flavour
        self.model = model
        self.max_model_len = max_model_len
        self.slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.flavour == "vllm":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path in _NOT_FOUND.get(self.flavour, set()):
            await _json(send, 404, {"detail": "Not Found"})
            return
        own = self._own_route(path, method, scope)
        if own is not None:
            body = await _read_body(receive) if method == "POST" else b""
            status, payload = own(body)
            await _json(send, status, payload) if not isinstance(payload, str) else await _text(
                send, status, payload
            )
            return
        if path == "/v1/models" and method == "GET":
            window = self.max_model_len
            rewrite = _Rewrite(send, lambda body: self._cards(body, window))
            await self.app(scope, receive, rewrite)
            return
        if self.flavour == "llama.cpp" and path == "/metrics" and method == "GET":
            text = _Rewrite(send, lambda b: answers.llama_cpp_metrics(b.decode()).encode())
            # vLLM's page is rewritten as text: asked for plain, never gzip (llama-server
            # compresses nothing).
            plain = [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]
            await self.app({**scope, "headers": plain}, receive, text)
            return
        if self.flavour == "llama.cpp" and path == "/tokenize" and method == "POST":
            await self._llama_cpp_tokenize(scope, receive, send)
            return
        if self.flavour == "llama.cpp" and path == "/v1/chat/completions/input_tokens":
            await self._llama_cpp_count(scope, receive, send)
            return
        if path == "/v1/chat/completions" and method == "POST":
            body = await _read_body(receive)
            refusal, body = self._chat_body(body)
            if refusal is not None:
                await _json(send, 500, refusal)
                return
            if self.flavour == "llama-cpp-python":
                send = _PromptOverWindow(send, body, self.max_model_len)
            elif self.flavour in ("llama.cpp", "sglang"):
                await self._overflow_as_own(scope, body, receive, send)
                return
            await self.app(_with_length(scope, body), _replay(body, receive), send)
            return
        await self.app(scope, receive, send)

    def _cards(self, body: bytes, window: int) -> bytes:
        try:
            data = json.loads(body)
            data["data"] = [
                answers.models_card(card, self.flavour, window) for card in data.get("data", [])
            ]
            return json.dumps(data).encode()
        except (ValueError, AttributeError, TypeError):
            return body

    async def _llama_cpp_tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        """llama-server tokenizes a ``content`` text (no model, no messages): a chat body
        gets ``{"tokens": []}``."""
        body = await _read_body(receive)
        try:
            content = json.loads(body or b"{}").get("content")
        except (ValueError, AttributeError):
            content = None
        if not isinstance(content, str):
            await _json(send, 200, {"tokens": []})
            return
        request = json.dumps({"model": self.model, "prompt": content}).encode()
        rewrite = _Rewrite(
            send, lambda b: json.dumps({"tokens": json.loads(b).get("tokens", [])}).encode()
        )
        await self.app(*_post(scope, "/tokenize", request, receive), rewrite)

    async def _llama_cpp_count(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The chat body's prompt counted by the sim's ``/tokenize``, as ``input_tokens``."""
        body = await _read_body(receive)
        try:
            request = json.loads(body or b"{}")
            request = {
                "model": self.model,
                "messages": request["messages"],
                **({"tools": request["tools"]} if request.get("tools") else {}),
            }
        except (ValueError, KeyError, TypeError):
            await _json(send, 400, {"error": {"code": 400, "message": "messages is required"}})
            return

        def count(answer: bytes) -> bytes:
            n = json.loads(answer).get("count", 0)
            return json.dumps({"input_tokens": n, "object": "response.input_tokens"}).encode()

        encoded = json.dumps(request).encode()
        await self.app(*_post(scope, "/tokenize", encoded, receive), _Rewrite(send, count))

    async def _overflow_as_own(
        self, scope: Scope, body: bytes, receive: Receive, send: Send
    ) -> None:
        """vLLM's overflow 400 in this server's words."""
        held = _Held(send)
        await self.app(_with_length(scope, body), _replay(body, receive), held)
        if held.status != 400:
            return
        own = (
            answers.llama_cpp_overflow(held.body)
            if self.flavour == "llama.cpp"
            else answers.sglang_overflow(held.body)
        )
        if own is None:
            await held.release()
            return
        await _json(send, 400, own)

    def _own_route(self, path: str, method: str, scope: Scope):  # type: ignore[no-untyped-def]
        if self.flavour == "llama-cpp-python" and path == "/extras/tokenize/count":
            return self._count
        if self.flavour == "llama.cpp" and method == "GET":
            if path == "/props":
                props = answers.llama_cpp_props(self.model, self.max_model_len, self.slots)
                return lambda _body: (200, props)
            if path == "/slots":
                running = _engine_running(scope)
                slots = answers.llama_cpp_slots(self.max_model_len, self.slots, running)
                return lambda _body: (200, slots)
        if self.flavour == "lmstudio" and path == "/api/v0/models" and method == "GET":
            return lambda _body: (200, answers.lm_studio_models(self.model, self.max_model_len))
        if self.flavour == "ollama" and path == "/" and method in ("GET", "HEAD"):
            return lambda _body: (200, "Ollama is running")
        if self.flavour == "ollama" and path == "/api/ps" and method == "GET":
            card = {"name": self.model, "model": self.model, "context_length": self.max_model_len}
            return lambda _body: (200, {"models": [card]})
        return None

    def _count(self, body: bytes) -> tuple[int, Any]:
        try:
            text = json.loads(body or b"{}").get("input")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            return 500, _llama_cpp_python_error("Field required: input")
        return 200, {"count": count_text(text)}

    def _chat_body(self, body: bytes) -> tuple[dict[str, Any] | None, bytes]:
        if self.flavour != "llama-cpp-python":
            return None, body
        try:
            request = json.loads(body)
        except ValueError:
            return None, body
        for index, message in enumerate(request.get("messages") or []):
            if (
                isinstance(message, dict)
                and message.get("role") == "assistant"
                and message.get("content", "") is None
            ):
                return _llama_cpp_python_error(
                    f"{{'type': 'string_type', 'loc': ('body', 'messages', {index}, "
                    "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input "
                    "should be a valid string', 'input': None}"
                ), body
        request.pop("stream_options", None)  # llama-cpp-python streams no usage
        for key in ("max_tokens", "max_completion_tokens"):
            # Clamped to the room the prompt leaves, never refused (``_create_completion``).
            if isinstance(request.get(key), int) and request[key] > self.max_model_len:
                request.pop(key)
        return None, json.dumps(request).encode()


def _llama_cpp_python_error(detail: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"1 validation error:\n  {detail}",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }


class _Rewrite:
    """Buffers an answer and sends it back through ``transform`` (status and headers kept,
    its length set anew)."""

    def __init__(self, send: Send, transform: Callable[[bytes], bytes]) -> None:
        self.send = send
        self.transform = transform
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = b"".join(self.chunks)
        assert self.start is not None
        if self.start["status"] == 200:
            try:
                body = self.transform(body)
            except (ValueError, AttributeError, TypeError):
                pass
        headers = [(k, v) for k, v in self.start.get("headers", []) if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


class _Held:
    """Holds a 400 answer back for a second look; anything else passes through at once."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status: int | None = None
        self.messages: list[Message] = []

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        if self.status == 400:
            self.messages.append(message)
        else:
            await self.send(message)

    async def release(self) -> None:
        for message in self.messages:
            await self.send(message)
        self.messages = []


def _engine_running(scope: Scope) -> int:
    """Requests the simulated engine is running (the slots busy), 0 when it cannot say."""
    app = scope.get("app")
    sim = getattr(getattr(app, "state", None), "sim", None)
    return int(getattr(getattr(sim, "engine", None), "num_running", 0) or 0)


def _post(scope: Scope, path: str, body: bytes, receive: Receive) -> tuple[Scope, Receive]:
    """The scope and receive of a JSON POST to another of the sim's routes."""
    headers = [(b"content-type", b"application/json")]
    headers += [(k, v) for k, v in scope.get("headers", []) if k == b"authorization"]
    headers.append((b"content-length", str(len(body)).encode()))
    inner = {**scope, "path": path, "raw_path": path.encode(), "method": "POST"}
    inner["headers"] = headers
    return inner, _replay(body, receive)


_PROMPT_TOKENS = re.compile(r"prompt contains (?:at least )?(\d+) input tokens")


class _PromptOverWindow:
    """vLLM's 400 for a prompt over the window, as llama-cpp-python answers it: after the
    first chunk of a streamed answer the server raises (the connection ends mid-body, the
    reason only in its log); unstreamed, its ``context_length_exceeded`` 400."""

    def __init__(self, send: Send, body: bytes, window: int) -> None:
        self.send = send
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        self.stream = bool(request.get("stream"))
        self.max_tokens = request.get("max_tokens")
        self.window = window
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 400:
            self.start = message
            return
        if self.start is None:
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = b"".join(self.chunks)
        found = _PROMPT_TOKENS.search(body.decode(errors="replace"))
        if found is None:
            await self.send(self.start)
            await self.send({"type": "http.response.body", "body": body})
            return
        prompt = int(found.group(1))
        if not self.stream:
            await _json(send=self.send, status=400, payload=self._error(prompt))
            return
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        first = {
            "id": "chatcmpl-sim",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
        }
        chunk = f"data: {json.dumps(first)}\r\n\r\n".encode()
        await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        raise RuntimeError(f"Requested tokens ({prompt}) exceed context window of {self.window}")

    def _error(self, prompt: int) -> dict[str, Any]:
        completion = self.max_tokens if isinstance(self.max_tokens, int) else None
        return {
            "error": {
                "message": (
                    f"This model's maximum context length is {self.window} tokens. However, "
                    f"you requested {(completion or 0) + prompt} tokens ({prompt} in the "
                    f"messages, {completion} in the completion). Please reduce the length of "
                    "the messages or completion."
                ),
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, upstream: Receive) -> Receive:
    """The (rewritten) body once, then the client's own messages (its disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await upstream()

    return receive


def _with_length(scope: Scope, body: bytes) -> Scope:
    headers = [(k, v) for k, v in scope.get("headers", []) if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    return {**scope, "headers": headers}


async def _json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    await _respond(send, status, body, b"application/json")


async def _text(send: Send, status: int, payload: str) -> None:
    await _respond(send, status, payload.encode(), b"text/plain; charset=utf-8")


async def _respond(send: Send, status: int, body: bytes, kind: bytes) -> None:
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
