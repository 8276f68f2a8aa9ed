"""``/v1/completions``: the legacy text-completion route vLLM also serves.

The prompt is text (or a list of one text); the policy answers it as the single user message
of a chat, and only its text is sent. The limits, validation, scheduling and timing are the chat
route's (``validation.py``, ``engine.py``); ``max_tokens`` defaults to 16, as in vLLM's
``CompletionRequest``. Streaming is not simulated (a 400 says so); tests of streaming use the
chat route, which is the one the pilot speaks.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol

from fastapi.responses import JSONResponse, Response
from pydantic import ConfigDict

from brain.sim import errors, validation
from brain.sim.config import SimConfig
from brain.sim.engine import RequestClock, SimEngine
from brain.sim.kv import prompt_block_hashes
from brain.sim.policy import Policy, SimChatRequest, SimMessage
from brain.sim.tokenizer import count_text, split_pieces

DEFAULT_MAX_TOKENS = 16


class SimState(Protocol):
    """What this route reads of the app's shared state (``brain.sim.app.SimState``), named
    here so the route does not import the app that mounts it."""

    config: SimConfig
    engine: SimEngine
    policy: Policy
    fingerprint: str

    def next_request_number(self) -> int: ...


class SimCompletionRequest(SimChatRequest):
    """The fields of /v1/completions the sim honours (``messages`` is not one of them)."""

    model_config = ConfigDict(extra="allow")

    messages: list[SimMessage] = []
    prompt: str | list[str] = ""
    max_tokens: int | None = DEFAULT_MAX_TOKENS

    def prompt_text(self) -> str:
        if isinstance(self.prompt, list):
            if len(self.prompt) != 1:
                raise errors.bad_request("The simulated server takes one prompt per request.")
            return self.prompt[0]
        return self.prompt


async def complete_text(state: SimState, body: SimCompletionRequest) -> Response:
    """Answer one completion request as vLLM's ``CompletionResponse``."""
    config, engine = state.config, state.engine
    errors.check_served_model(config, body.model)
    if body.stream:
        raise errors.bad_request("The simulated server does not stream /v1/completions.", "stream")
    prompt = body.prompt_text()
    prompt_tokens = count_text(prompt)
    try:
        max_tokens = validation.output_limit(
            flavour=config.vllm_version,
            max_model_len=config.max_model_len,
            prompt_tokens=prompt_tokens,
            max_tokens=body.max_tokens,
            max_completion_tokens=None,
        )
        validation.check_sampling(body, max_tokens)
    except validation.VLLMValidationError as exc:
        raise exc.http() from exc
    chat = SimChatRequest(model=body.model, messages=[SimMessage(role="user", content=prompt)])
    turn = state.policy.respond(chat)
    pieces = split_pieces(turn.content or "")
    finish = "length" if len(pieces) > max_tokens else "stop"
    pieces = pieces[:max_tokens]
    number = state.next_request_number()
    clock = RequestClock(arrival=time.monotonic())
    hashes = prompt_block_hashes(prompt, config.block_size) if config.enable_prefix_caching else ()
    ticket = engine.admit(number, prompt_tokens, hashes, max_tokens=max_tokens, n=1)
    outcome = "abort"
    try:
        await ticket.admitted()
        await engine.prefill(ticket.request, clock)
        decoder = engine.decoder(number, ticket.request)
        index = 0
        while index < len(pieces):
            count = 1 if index == 0 else await decoder.step(len(pieces) - index, clock)
            await ticket.grow(count, clock)
            if index == 0:
                decoder.first_token(clock)
            index += count
            engine.token_emitted(count)
        outcome = finish
    finally:
        ticket.release()
        engine.finished(clock, outcome, len(pieces), ticket.preemptions)
    choice: dict[str, Any] = {
        "index": 0,
        "text": "".join(pieces),
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
        "weight_versions": None,
    }
    return JSONResponse(
        {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.model or config.primary_name,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": state.fingerprint,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + len(pieces),
                "completion_tokens": len(pieces),
                "prompt_tokens_details": None,
                "completion_tokens_details": None,
            },
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }
    )
