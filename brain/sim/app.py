"""The simulated vLLM OpenAI-compatible server as an ASGI app: routes, auth, errors, SSE.

``create_app(config)`` is all a caller needs; ``server.running_sim`` runs it on a real port.
Connection-level faults (dropping a connection, refusing new ones, exiting) need the server
underneath, reached through the small ``SimControl`` protocol the server provides; a bare app
falls back to what ASGI can do (raising, which closes the connection mid-stream).

The order of work for one chat request: number it, pick its faults, validate as vLLM 0.33 does
(the request model's checks, the model name, the tool flags, the window and the clamp of
``max_tokens``, the sampling parameters: ``validation.py``), ask the policy, apply process and
HTTP faults, queue for a batch slot and KV blocks (or 503), then prefill, decode and send,
streamed or not.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, PrivateAttr
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from brain.sim import errors, validation
from brain.sim.completions import SimCompletionRequest, complete_text
from brain.sim.config import FaultRule, SimConfig
from brain.sim.engine import RequestClock, SimEngine, Ticket
from brain.sim.faults import FaultPlan
from brain.sim.flavours import FlavourMiddleware
from brain.sim.kv import prompt_block_hashes
from brain.sim.logs import LogFn, silent_log, vllm_line
from brain.sim.media import check_images
from brain.sim.metrics_text import METRICS_PATH
from brain.sim.policies import load_policy
from brain.sim.policy import Policy, SimChatRequest
from brain.sim.shaping import (
    Emission,
    OutputToken,
    message_fields,
    shape_turn,
    streamed_finish_reason,
)
from brain.sim.tokenizer import Vocabulary, count_text, render_chat

GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


class SimControl(Protocol):
    """What the app may ask of the server it runs in (see ``server.py``)."""

    def drop_connection(self, client: tuple[str, int] | None) -> bool: ...

    def refuse_connections(self, seconds: float) -> None: ...

    def exit_process(self, code: int) -> None: ...


class _NoServerControl:
    """Used when the app runs without our server: connection faults degrade to errors."""

    def drop_connection(self, client: tuple[str, int] | None) -> bool:
        return False

    def refuse_connections(self, seconds: float) -> None:
        return None

    def exit_process(self, code: int) -> None:
        return None


class ConnectionDropped(Exception):
    """Raised to abort a response when the server cannot close the connection itself."""


class AuthMiddleware:
    """vLLM's API-key check: only paths under /v1 (and friends) need ``Bearer <key>``."""

    def __init__(self, app: ASGIApp, tokens: list[str]):
        self.app = app
        self.tokens = set(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith(GUARDED_PREFIXES) and not self._authorized(scope):
                response = JSONResponse({"error": "Unauthorized"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and token in self.tokens
        return False


class SimState:
    """Everything one app instance shares across requests."""

    def __init__(self, config: SimConfig, policy: Policy, control: SimControl, log: LogFn):
        self.config = config
        self.policy = policy
        self.control = control
        self.log = log
        self.engine = SimEngine(config)
        self.faults = FaultPlan(config.faults, config.seed)
        self.created = int(time.time())
        self._numbers = itertools.count(1)
        self.vocab = Vocabulary()
        digest = hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:8]
        self.fingerprint = f"vllm-{config.version_string}-{digest}"
        """``system_fingerprint`` as vLLM's default mode builds it: version and a config hash."""

    def next_request_number(self) -> int:
        return next(self._numbers)


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[int]


def create_app(
    config: SimConfig,
    *,
    policy: Policy | None = None,
    control: SimControl | None = None,
    log: LogFn | None = None,
) -> FastAPI:
    """The simulated vLLM server for ``config``; ``policy`` overrides ``config.policy``."""
    state = SimState(
        config,
        policy if policy is not None else load_policy(config.policy),
        control or _NoServerControl(),
        log or silent_log,
    )
    app = FastAPI(
        title="vLLM (simulated by Marathon)",
        version=config.version_string,
        docs_url=None,
        redoc_url=None,
    )
    app.state.sim = state
    app.add_exception_handler(errors.SimHTTPError, errors.handle_sim_error)
    app.add_exception_handler(RequestValidationError, validation.handle_validation_error)
    app.add_exception_handler(validation.VLLMValidationError, _handle_vllm_validation_error)
    if config.api_keys:
        app.add_middleware(AuthMiddleware, tokens=list(config.api_keys))
    if config.flavour != "vllm":  # another server's wire differences (brain/sim/flavours.py)
        app.add_middleware(
            FlavourMiddleware,
            flavour=config.flavour,
            model=config.served_names[0],
            max_model_len=config.max_model_len,
            slots=config.max_num_seqs,
        )

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if state.engine.dead else 200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": config.version_string}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [_model_card(state, name) for name in config.served_names],
        }

    metrics = Mount("/metrics", app=state.engine.metrics.asgi_app())
    metrics.path_regex = METRICS_PATH
    app.router.routes.append(metrics)

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        errors.check_served_model(state.config, body.model)
        if body.messages is not None:
            if not body.messages:  # the chat template refuses it (recorded from vLLM 0.26)
                raise errors.bad_request(validation.EMPTY_CONVERSATION)
            text = render_chat(body.messages, body.tools, body.add_generation_prompt)
        elif body.prompt is not None:
            text = body.prompt
        else:
            raise errors.bad_request("Either `prompt` or `messages` must be given.", "prompt")
        tokens = state.vocab.encode(text)
        return {
            "count": len(tokens),
            "max_model_len": config.max_model_len,
            "tokens": tokens,
            "token_strs": None,
        }

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        errors.check_served_model(state.config, body.model)
        return {"prompt": state.vocab.decode(body.tokens)}

    @app.post("/v1/chat/completions", dependencies=[Depends(_json_only)])
    async def chat_completions(body: SimChatRequest, request: Request) -> Response:
        return await _chat(state, body, request)

    @app.post("/v1/completions", dependencies=[Depends(_json_only)])
    async def completions(body: SimCompletionRequest) -> Response:
        return await complete_text(state, body)

    return app


async def _handle_vllm_validation_error(_request: Request, exc: Exception) -> Response:
    """vLLM's handler for its own errors (``create_error_response``): 400 with the text."""
    assert isinstance(exc, validation.VLLMValidationError)
    return exc.http().response()


async def _json_only(request: Request) -> None:
    """vLLM's ``validate_json_request``: anything but an application/json body is a 400."""
    media = request.headers.get("content-type", "").lower().split(";", maxsplit=1)[0]
    if media != "application/json":
        raise RequestValidationError(errors=[validation.UNSUPPORTED_MEDIA_TYPE])


def _model_card(state: SimState, name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "vllm",
        "root": state.config.model,
        "parent": None,
        "max_model_len": state.config.max_model_len,
        "permission": [
            {
                "id": f"modelperm-{hashlib.sha256(name.encode()).hexdigest()[:32]}",
                "object": "model_permission",
                "created": state.created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }


def _rule(rules: list[FaultRule], kind: str) -> FaultRule | None:
    return next((r for r in rules if r.kind == kind), None)


def _settle_max_tokens(state: SimState, body: SimChatRequest, prompt_tokens: int) -> int:
    """vLLM's checks from the renderer to the sampling params, then the sampling max_tokens."""
    config = state.config
    try:
        max_tokens = validation.output_limit(
            flavour=config.vllm_version,
            max_model_len=config.max_model_len,
            prompt_tokens=prompt_tokens,
            max_tokens=body.max_tokens,
            max_completion_tokens=body.max_completion_tokens,
        )
        validation.check_sampling(body, max_tokens)
    except validation.VLLMValidationError as exc:
        raise exc.http() from exc
    return max_tokens


async def _chat(state: SimState, body: SimChatRequest, request: Request) -> Response:
    config, engine = state.config, state.engine
    number = state.next_request_number()
    rules = state.faults.select(number)
    clock = RequestClock(arrival=time.monotonic())
    client = (request.client.host, request.client.port) if request.client else None

    errors.check_served_model(state.config, body.model)
    refused = validation.tool_flags_error(
        body.tool_choice,
        enable_auto_tool_choice=config.enable_auto_tool_choice,
        tool_call_parser=config.tool_call_parser,
    )
    if refused is not None:
        raise refused
    if not body.messages:
        raise errors.bad_request(validation.EMPTY_CONVERSATION)
    messages = body.message_dicts()
    check_images(
        messages, vision=config.vision, allowed_local_media_path=config.allowed_local_media_path
    )
    prompt = render_chat(messages, body.tools)
    prompt_tokens = count_text(prompt)
    max_tokens = _settle_max_tokens(state, body, prompt_tokens)

    try:
        turn = state.policy.respond(body)
    except Exception as exc:  # a policy bug must look like a server error, not hang the client
        raise errors.internal_error(f"Policy failed: {exc}") from exc
    if turn.fault:
        rules = [*rules, FaultRule(kind=turn.fault)]  # type: ignore[arg-type]
    kinds = {r.kind for r in rules}
    if config.log_requests:
        state.log(
            vllm_line(
                f"Received request chatcmpl-{number}: prompt tokens {prompt_tokens}, "
                f"max_tokens {max_tokens}, faults {sorted(kinds)}"
            )
        )

    if exit_rule := _rule(rules, "exit"):
        state.log(
            vllm_line(f"Simulated process exit (code {exit_rule.exit_code}) at request {number}")
        )
        state.control.exit_process(exit_rule.exit_code)
        return _dropped(state, client)
    if refuse := _rule(rules, "refuse"):
        state.control.refuse_connections(refuse.seconds)
        return _dropped(state, client)
    if "engine_dead" in kinds and not engine.dead:
        engine.dead = True
        state.log(vllm_line(errors.ENGINE_DEAD_MESSAGE, "core_client.py:564", "ERROR"))
    if engine.dead:
        raise errors.engine_dead()
    if stall := _rule(rules, "stall_headers"):
        await asyncio.sleep(stall.seconds)
    if "http_503" in kinds:
        raise errors.queue_full()
    if "http_500" in kinds:
        raise errors.internal_error()

    emission = shape_turn(
        turn,
        body,
        max_tokens=max_tokens,
        faults=kinds,
        id_seed=json.dumps(messages, sort_keys=True, ensure_ascii=False),
    )
    if body.stream:
        emission.stream_finish_reason = streamed_finish_reason(
            emission,
            body,
            flavour=config.vllm_version,
            tool_parser=config.enable_auto_tool_choice and config.tool_call_parser is not None,
        )
    n = body.n or 1
    hashes = prompt_block_hashes(prompt, config.block_size) if config.enable_prefix_caching else ()
    ticket = engine.admit(number, prompt_tokens, hashes, max_tokens=max_tokens, n=n)
    meta = _ResponseMeta(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=body.model or config.primary_name,
        prompt_tokens=prompt_tokens,
        n=n,
        fingerprint=state.fingerprint,
    )
    if body.stream:
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        stream = _stream(
            state,
            number,
            ticket,
            clock,
            emission,
            meta,
            rules,
            include_usage,
            client,
            stream_interval=body.stream_interval,
        )
        return StreamingResponse(stream, media_type="text/event-stream")
    fields = message_fields(emission, body, tool_parser=config.tool_call_parser)
    return await _complete(state, number, ticket, clock, emission, meta, rules, client, fields)


class _GenerationFailed(Exception):
    """The ``stream_error`` fault: generation fails after the response has started."""


class _ResponseMeta(BaseModel):
    id: str
    created: int
    model: str
    prompt_tokens: int
    n: int = 1
    fingerprint: str | None = None
    _chunk_heads: dict[int, str] = PrivateAttr(default_factory=dict)

    def chunk_head(self, index: int = 0) -> str:
        """A stream chunk's JSON up to its delta: the same in every chunk of one choice."""
        head = self._chunk_heads.get(index)
        if head is None:
            head = self._chunk_heads[index] = (
                f'data: {{"id": {json.dumps(self.id, ensure_ascii=False)}, '
                f'"object": "chat.completion.chunk", "created": {self.created}, '
                f'"model": {json.dumps(self.model, ensure_ascii=False)}, '
                f'"choices": [{{"index": {index}, "delta": '
            )
        return head


def _dropped(state: SimState, client: tuple[str, int] | None) -> Response:
    if not state.control.drop_connection(client):
        raise ConnectionDropped("simulated connection drop")
    return Response(status_code=500)  # never reaches the client: its connection is gone


async def _generate(
    state: SimState, number: int, ticket: Ticket, clock: RequestClock, emission: Emission, n: int
) -> AsyncIterator[list[OutputToken]]:
    """Wait to be scheduled, prefill, then decode step by step, yielding each step's tokens
    (a preemption on the way waits and recomputes, as vLLM's scheduler does)."""
    engine = state.engine
    await ticket.admitted()
    await engine.prefill(ticket.request, clock)
    decoder = engine.decoder(number, ticket.request)
    tokens = emission.tokens
    index = 0
    while index < len(tokens):
        count = 1 if index == 0 else await decoder.step(len(tokens) - index, clock)
        await ticket.grow(count * n, clock)
        if index == 0:
            decoder.first_token(clock)
        batch = tokens[index : index + count]
        index += count
        engine.token_emitted(len(batch) * n)
        yield batch


def _usage(meta: _ResponseMeta, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": meta.prompt_tokens,
        "total_tokens": meta.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


async def _complete(
    state: SimState,
    number: int,
    ticket: Ticket,
    clock: RequestClock,
    emission: Emission,
    meta: _ResponseMeta,
    rules: list[FaultRule],
    client: tuple[str, int] | None,
    fields: tuple[str | None, list[tuple[Any, str]], str],
) -> Response:
    engine = state.engine
    outcome = "abort"
    try:
        async for _batch in _generate(state, number, ticket, clock, emission, meta.n):
            pass
        if stall := _rule(rules, "stall"):
            await asyncio.sleep(stall.seconds)
        if _rule(rules, "stream_cut"):
            return _dropped(state, client)
        if _rule(rules, "stream_error"):
            raise errors.internal_error(errors.GENERATION_FAILED_MESSAGE)
        outcome = "length" if emission.finish_reason == "length" else "stop"
    finally:
        ticket.release()
        engine.finished(clock, outcome, len(emission.tokens) * meta.n, ticket.preemptions)
    calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": args}}
        for call, args in fields[1]
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": fields[0],
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if calls:  # vLLM's ChatMessage leaves an empty tool_calls out
        message["tool_calls"] = calls
    message["reasoning"] = emission.text_of("reasoning")
    choices = [
        {
            "index": i,
            "message": message,
            "logprobs": None,
            "finish_reason": fields[2],
            "stop_reason": None,
            "token_ids": None,
            "routed_experts": None,
            "weight_versions": None,
        }
        for i in range(meta.n)
    ]
    body = {
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": meta.fingerprint,
        "usage": _usage(meta, len(emission.tokens) * meta.n),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }
    return JSONResponse(body)


def _chunk(
    meta: _ResponseMeta,
    delta: dict[str, Any],
    finish: str | None = None,
    index: int = 0,
    stamp: bool = True,
) -> str:
    """One SSE chunk, the bytes vLLM's ``model_dump_json(exclude_unset=True)`` gives (its
    fields in its order); only the delta is serialized per chunk, which halves the sim's JSON
    work."""
    delta_json = json.dumps(delta, ensure_ascii=False)
    if finish is None:
        return (
            f'{meta.chunk_head(index)}{delta_json}, "logprobs": null, "finish_reason": null, '
            f'"token_ids": null}}], "kv_transfer_params": null}}\n\n'
        )
    reason = json.dumps(finish, ensure_ascii=False)
    # the fingerprint goes on the terminal chunk, unless a usage chunk follows (it has it)
    fingerprint = (
        f'"system_fingerprint": {json.dumps(meta.fingerprint)}, '
        if stamp and meta.fingerprint is not None
        else ""
    )
    return (
        f'{meta.chunk_head(index)}{delta_json}, "logprobs": null, "finish_reason": {reason}, '
        f'"stop_reason": null, "token_ids": null, "weight_versions": null}}], '
        f'{fingerprint}"kv_transfer_params": null}}\n\n'
    )


def _first_chunk(meta: _ResponseMeta, index: int) -> str:
    """The role chunk that opens each choice (with the prompt fields vLLM sends once)."""
    return (
        f'{meta.chunk_head(index)}{{"role": "assistant", "content": ""}}, "logprobs": null, '
        f'"finish_reason": null}}], "prompt_token_ids": null, "prompt_text": null}}\n\n'
    )


def _deltas(batch: list[OutputToken], emission: Emission) -> list[dict[str, Any]]:
    """Group one decode step's tokens into deltas: one per run of the same kind / call.

    A call opens as the hermes parser opens it (``Hermes2ProToolParser.
    extract_tool_calls_streaming``): an entry with ``id``, ``type``, ``index`` and the
    function's ``name`` alone (``DeltaFunctionCall(name=...).model_dump(exclude_none=True)``,
    so no ``arguments`` key), and the argument text of the same step as a second entry of the
    same delta, ``{"index", "function": {"arguments"}}``."""
    deltas: list[dict[str, Any]] = []
    calls = {c.index: c for c in emission.calls}
    for token in batch:
        last = deltas[-1] if deltas else None
        if token.kind in ("reasoning", "content"):
            if last is not None and token.kind in last and "tool_calls" not in last:
                last[token.kind] += token.text
            else:
                deltas.append({token.kind: token.text})
            continue
        assert token.call is not None
        if token.header:
            call = calls[token.call]
            entry = {
                "id": call.id,
                "type": "function",
                "index": call.index,
                "function": {"name": call.name},
            }
            deltas.append({"tool_calls": [entry]})
            continue
        entries = last["tool_calls"] if last is not None and "tool_calls" in last else None
        if entries is not None and entries[-1]["index"] == token.call:
            function = entries[-1]["function"]
            if "arguments" in function:
                function["arguments"] += token.text
            else:  # the opening entry: the arguments come as an entry of their own
                entries.append({"index": token.call, "function": {"arguments": token.text}})
        else:
            deltas.append(
                {"tool_calls": [{"index": token.call, "function": {"arguments": token.text}}]}
            )
    return deltas


async def _stream(
    state: SimState,
    number: int,
    ticket: Ticket,
    clock: RequestClock,
    emission: Emission,
    meta: _ResponseMeta,
    rules: list[FaultRule],
    include_usage: bool,
    client: tuple[str, int] | None,
    stream_interval: int | None = None,
) -> AsyncIterator[str]:
    engine = state.engine
    interval = max(state.config.stream_interval, stream_interval or 1)
    cut = _rule(rules, "stream_cut")
    stall = _rule(rules, "stall")
    failure = _rule(rules, "stream_error")
    stalled = False
    sent = 0
    outcome = "abort"
    indexes = range(meta.n)

    async def faults_after_chunk() -> bool:
        """Apply mid-stream faults once `sent` chunks are out; True means the stream is cut."""
        nonlocal stalled
        if stall is not None and not stalled and sent >= stall.after_chunks:
            stalled = True
            await asyncio.sleep(stall.seconds)
        if failure is not None and sent >= failure.after_chunks:
            raise _GenerationFailed(errors.GENERATION_FAILED_MESSAGE)
        if cut is not None and sent >= cut.after_chunks:
            await asyncio.sleep(0.05)  # let the chunks already written reach the socket
            if not state.control.drop_connection(client):
                raise ConnectionDropped("simulated stream cut")
            return True
        return False

    try:
        first = True
        # vLLM's stream interval: the first step's tokens go at once, then tokens are held
        # until `interval` of them are waiting (or the answer ends), one chunk per delta.
        held: list[OutputToken] = []
        async for batch in _generate(state, number, ticket, clock, emission, meta.n):
            if first:
                for i in indexes:
                    yield _first_chunk(meta, i)
                    sent += 1
                    if await faults_after_chunk():
                        return
            held.extend(batch)
            if not first and len(held) < interval:
                continue
            first = False
            out, held = held, []
            for i in indexes:
                for delta in _deltas(out, emission):
                    yield _chunk(meta, delta, index=i)
                    sent += 1
                    if await faults_after_chunk():
                        return
        for i in indexes:
            for delta in _deltas(held, emission):  # the last tokens, with the end
                yield _chunk(meta, delta, index=i)
                sent += 1
                if await faults_after_chunk():
                    return
        if first:  # nothing generated at all: still open the message
            for i in indexes:
                yield _first_chunk(meta, i)
                sent += 1
                if await faults_after_chunk():
                    return
        for i in indexes:
            finish = emission.stream_finish_reason or emission.finish_reason
            yield _chunk(meta, {}, finish, index=i, stamp=not include_usage)
            sent += 1
            if await faults_after_chunk():
                return
        if include_usage:
            completion = len(emission.tokens) * meta.n
            usage = {
                "prompt_tokens": meta.prompt_tokens,
                "total_tokens": meta.prompt_tokens + completion,
                "completion_tokens": completion,
            }
            payload: dict[str, Any] = {
                "id": meta.id,
                "object": "chat.completion.chunk",
                "created": meta.created,
                "model": meta.model,
                "choices": [],
                "usage": usage,
            }
            if meta.fingerprint is not None:
                payload["system_fingerprint"] = meta.fingerprint
            yield f"data: {json.dumps(payload)}\n\n"
        yield "data: [DONE]\n\n"
        outcome = "length" if emission.finish_reason == "length" else "stop"
    except _GenerationFailed as exc:
        # vLLM's chat stream generator: the error as one more event, then [DONE] as usual.
        state.log(
            vllm_line("Error in chat completion stream generator.", "serving_chat.py:1", "ERROR")
        )
        body = errors.error_body(str(exc), "InternalServerError", 500)
        yield f"data: {json.dumps(body)}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        ticket.release()
        engine.finished(clock, outcome, len(emission.tokens) * meta.n, ticket.preemptions)
