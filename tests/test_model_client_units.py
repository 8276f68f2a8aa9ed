"""The model client's pure parts: stream reassembly, error mapping, retry classification, script."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import openai
import pytest
from scripted_model import ScriptedModelClient, ScriptExhausted

from pilot.errors import (
    BadRequest,
    ConfigurationError,
    ContextOverflow,
    ModelNotFound,
    ServerUnavailable,
    StreamInterrupted,
)
from pilot.model.client import OpenAIModelClient
from pilot.model.errors import (
    VLLM_ERRORS,
    ErrorAnswer,
    _api_key,
    _bad_request,
    _context_overflow,
    _model_not_found,
    _no_auto_tool_choice,
    _no_such_route,
    _not_an_api,
    _other_server_overflow,
    _output_over_window,
    _proxy_key,
    _unavailable,
    is_transient,
    map_vllm_error,
    wants_served_models,
)
from pilot.model.servers import server_root
from pilot.model.settings import ClientSettings
from pilot.model.streaming import StreamAccumulator
from pilot.model.types import (
    ChatRequest,
    ModelClient,
    ModelResponse,
    ServedModel,
    ToolCallOut,
    WaitEvent,
)


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"choices": choices, **extra}


# -- stream reassembly ------------------------------------------------------------------------


def test_tool_calls_accumulate_by_index_with_id_and_name_only_first():
    acc = StreamAccumulator()
    stream = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "read_file"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "run"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"command": "ls"}'}}]}),
        chunk({}, "tool_calls"),
        chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}),
    ]
    for c in stream:
        acc.add(c)
    assert acc.tool_calls() == [
        ToolCallOut(id="c0", name="read_file", arguments='{"path": "a"}'),
        ToolCallOut(id="c1", name="run", arguments='{"command": "ls"}'),
    ]
    assert acc.finish_reason == "tool_calls"
    assert acc.usage is not None and acc.usage.completion_tokens == 7
    assert acc.text is None  # only an empty opening content


def test_repeated_id_and_name_on_every_chunk_are_not_duplicated():
    # vLLM #42696-style servers that repeat id/name on every delta.
    acc = StreamAccumulator()
    for part in ['{"a"', ": 1}"]:
        acc.add(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "x", "function": {"name": "f", "arguments": part}}
                    ]
                }
            )
        )
    assert acc.tool_calls() == [ToolCallOut(id="x", name="f", arguments='{"a": 1}')]


def test_deltas_without_index_continue_the_latest_call_and_new_ids_start_one():
    acc = StreamAccumulator()
    acc.add(chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}]}))
    acc.add(chunk({"tool_calls": [{"function": {"arguments": "}"}}]}))
    acc.add(chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]}))
    assert [(c.id, c.name, c.arguments) for c in acc.tool_calls()] == [
        ("a", "f", "{}"),
        ("b", "g", "{}"),
    ]


def test_missing_ids_are_generated():
    acc = StreamAccumulator()
    acc.add(chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}))
    (call,) = acc.tool_calls()
    assert call.id.startswith("call_") and len(call.id) > 10


def test_reasoning_and_older_reasoning_content_are_both_read():
    acc = StreamAccumulator()
    acc.add(chunk({"reasoning": "new "}))
    acc.add(chunk({"reasoning_content": "old"}))
    acc.add(chunk({"content": "answer"}, "stop"))
    assert acc.reasoning_text == "new old"
    assert acc.text == "answer"


def test_sdk_chunk_objects_with_extra_fields():
    from openai.types.chat import ChatCompletionChunk

    sdk_chunk = ChatCompletionChunk.model_validate(
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [
                {"index": 0, "delta": {"reasoning": "hmm", "content": "hi"}, "finish_reason": None}
            ],
        }
    )
    acc = StreamAccumulator()
    assert acc.add(sdk_chunk) is True
    assert acc.reasoning_text == "hmm" and acc.text == "hi" and acc.first_delta


def test_role_only_chunk_does_not_count_as_first_token():
    acc = StreamAccumulator()
    assert acc.add(chunk({"role": "assistant", "content": ""})) is False
    assert not acc.first_delta


# -- error mapping ----------------------------------------------------------------------------

VLLM_030_OVERFLOW = (
    "This model's maximum context length is 32768 tokens. However, you requested 32512 output "
    "tokens and your prompt contains at least 257 input tokens, for a total of at least 32769 "
    "tokens. Please reduce the length of the input prompt or the number of requested output "
    "tokens. (parameter=input_tokens, value=257)"
)
VLLM_030_CHARS = (
    "This model's maximum context length is 32768 tokens. However, you requested 1024 output "
    "tokens and your prompt contains 131000 characters (more than 127000 characters, which is "
    "the upper bound for 31744 input tokens). Please reduce the length of the input prompt or "
    "the number of requested output tokens. (parameter=input_text, value=131000)"
)
VLLM_OLD_OVERFLOW = (
    "This model's maximum context length is 4096 tokens. However, your request has 5000 input "
    "tokens. Please reduce the length of the input messages."
)
VLLM_OLDER_OVERFLOW = (
    "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens "
    "(1900 in the messages, 200 in the completion). Please reduce the length of the messages "
    "or completion."
)


@pytest.mark.parametrize(
    ("message", "limit", "prompt", "output"),
    [
        (VLLM_030_OVERFLOW, 32768, 257, 32512),
        (VLLM_030_CHARS, 32768, 31744, 1024),
        (VLLM_OLD_OVERFLOW, 4096, 5000, None),
        (VLLM_OLDER_OVERFLOW, 2048, 1900, 200),
    ],
)
def test_context_overflow_texts_of_several_vllm_versions(message, limit, prompt, output):
    err = map_vllm_error(400, message)
    assert isinstance(err, ContextOverflow)
    assert (err.max_model_len, err.prompt_tokens, err.max_tokens) == (limit, prompt, output)


@pytest.mark.parametrize(
    ("message", "limit", "output"),
    [
        (  # vLLM 0.33
            "max_tokens=100000 cannot be greater than max_model_len=4096. Please request fewer "
            "output tokens. (parameter=max_tokens, value=100000)",
            4096,
            100000,
        ),
        (  # later releases name the total budget too, and max_completion_tokens when sent
            "max_completion_tokens=32000 cannot be greater than max_model_len=max_total_tokens="
            "16384. Please request fewer output tokens. (parameter=max_completion_tokens, "
            "value=32000)",
            16384,
            32000,
        ),
    ],
)
def test_max_tokens_over_the_window_is_an_overflow_naming_the_window(message, limit, output):
    err = map_vllm_error(400, message)
    assert isinstance(err, ContextOverflow)
    assert (err.max_model_len, err.max_tokens) == (limit, output)


@pytest.mark.parametrize(
    ("message", "window", "prompt", "output"),
    [
        (  # llama-server (tools/server/server-context.cpp), the prompt over its slot
            "request (2210 tokens) exceeds the available context size (2048 tokens), try "
            "increasing it",
            2048,
            2210,
            None,
        ),
        (  # llama-server, a prompt that cannot be split into batches
            "input (5000 tokens) is larger than the max context size (4096 tokens). skipping",
            4096,
            5000,
            None,
        ),
        (  # SGLang, prompt and output over the window
            "Requested token count exceeds the model's maximum context length of 32768 tokens. "
            "You requested a total of 34000 tokens: 30000 tokens from the input messages and "
            "4000 tokens for the completion.",
            32768,
            30000,
            4000,
        ),
        (  # SGLang, the prompt alone
            "The input (41000 tokens) is longer than the model's context length (32768 tokens).",
            32768,
            41000,
            None,
        ),
    ],
)
def test_other_servers_overflow_texts_are_overflows_naming_the_window(
    message, window, prompt, output
):
    err = map_vllm_error(400, message)
    assert isinstance(err, ContextOverflow)
    assert (err.max_model_len, err.prompt_tokens, err.max_tokens) == (window, prompt, output)


def test_every_row_of_the_table_is_reachable():
    """Each row matches something no earlier row takes (an unreachable row is a silent bug)."""
    page = "<html><title>404 Not Found</title></html>"
    samples = {
        _api_key: ErrorAnswer(401, "Unauthorized"),
        _proxy_key: ErrorAnswer(400, "No connected db."),
        _not_an_api: ErrorAnswer(404, "an HTML page", body=page, content_type="text/html"),
        _model_not_found: ErrorAnswer(404, "The model `x` does not exist."),
        _no_such_route: ErrorAnswer(404, "Not Found"),
        _other_server_overflow: ErrorAnswer(
            400, "request (9 tokens) exceeds the available context size"
        ),
        _context_overflow: ErrorAnswer(400, "This model's maximum context length is 8 tokens."),
        _output_over_window: ErrorAnswer(
            400, "max_tokens=9 cannot be greater than max_model_len=8."
        ),
        _no_auto_tool_choice: ErrorAnswer(
            400, '"auto" tool choice requires --enable-auto-tool-choice'
        ),
        _unavailable: ErrorAnswer(503, "busy"),
        _bad_request: ErrorAnswer(400, "temperature must be non-negative"),
    }
    assert [rule.build for rule in VLLM_ERRORS] == list(samples)
    for build, answer in samples.items():
        first = next(r for r in VLLM_ERRORS if r.match(answer) is not None)
        assert first.build is build, answer


def test_a_404_naming_a_missing_model_asks_for_the_served_list():
    assert wants_served_models(404, "The model `gemma-3` does not exist.")
    assert wants_served_models(404, "model 'gemma-3' not found")  # Ollama's wording
    assert not wants_served_models(404, "Not Found")
    assert not wants_served_models(400, "The model `gemma-3` does not exist.")


def test_404_model_does_not_exist_lists_served():
    err = map_vllm_error(404, "The model `gemma-3` does not exist.", served=["gemma-4"])
    assert isinstance(err, ModelNotFound)
    assert err.model == "gemma-3" and err.served == ["gemma-4"]


def test_404_route_is_a_wrong_endpoint():
    err = map_vllm_error(404, "Not Found", endpoint="http://h:8000")
    assert isinstance(err, ConfigurationError) and not isinstance(err, ModelNotFound)
    assert "/v1" in str(err)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        # LiteLLM's proxy (litellm/proxy/auth/user_api_key_auth.py): a key that is not its
        # master key, with no database of virtual keys; an expired virtual key.
        (400, "No connected db."),
        (400, "Authentication Error - Expired Key. Key Expiry time 2026-01-01 and current time x"),
        # Its other auth errors are 401 (auth_exception_handler.py adds the prefix).
        (401, "Authentication Error, No api key passed in."),
        (401, "Authentication Error, Invalid proxy server token passed. Received API Key = sk-"),
    ],
)
def test_a_proxys_refusal_of_the_key_names_the_api_key_setting(status, message):
    err = map_vllm_error(status, message, endpoint="http://h:4000/v1")
    assert isinstance(err, ConfigurationError) and "model.api_key_env" in str(err)
    assert message in str(err)


def test_an_error_page_is_summarised_never_pasted():
    page = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n" + "x" * 5000
    err = map_vllm_error(404, "", endpoint="http://h:8000", body=page, content_type="text/html")
    text = str(err)
    assert "\n" not in text and "x" * 50 not in text
    assert "text/html page titled '502 Bad Gateway'" in text and "(try http://h:8000/v1)" in text
    # A JSON 404 from a server at a /v1 URL is a wrong path, not a missing /v1.
    route = str(
        map_vllm_error(
            404, "Not Found", endpoint="http://h:8000/x/v1", body='{"detail":"Not Found"}'
        )
    )
    assert "ending in /v1" not in route and "path" in route
    # A transient page (a proxy's 502) is waited out first, and told in a few words.
    from pilot.model.errors import error_message

    assert error_message(page, "") == "an HTML page titled '502 Bad Gateway'"


def test_401_names_the_api_key_setting():
    err = map_vllm_error(401, "Unauthorized")
    assert isinstance(err, ConfigurationError)
    assert "model.api_key_env" in str(err) and "VLLM_API_KEY" in str(err)


def test_auto_tool_choice_without_flags_names_the_brain_flags():
    message = (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    err = map_vllm_error(400, message)
    assert isinstance(err, ConfigurationError)
    assert "--enable-auto-tool-choice" in str(err) and "--tool-call-parser" in str(err)


@pytest.mark.parametrize("status", [400, 422, 413])
def test_other_client_errors_are_bad_request_with_vllms_message(status):
    err = map_vllm_error(status, "temperature must be non-negative", body="{}")
    assert isinstance(err, BadRequest)
    assert err.status == status and "temperature must be non-negative" in str(err)


def _status_error(status: int, body: object = None) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://h/v1/chat/completions")
    response = httpx.Response(status, request=request, json=body or {})
    return openai.APIStatusError("x", response=response, body=body)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (_status_error(503), True),
        (_status_error(500), True),
        (_status_error(502), True),
        (_status_error(504), True),
        (_status_error(429), True),
        (_status_error(400), False),
        (_status_error(401), False),
        (_status_error(404), False),
        (_status_error(422), False),
        (StreamInterrupted("cut"), True),
        (httpx.ConnectError("refused"), True),
        (ValueError("bug"), False),
        (ContextOverflow("x"), False),
    ],
)
def test_only_server_side_trouble_is_transient(exc, transient):
    assert is_transient(exc) is transient


def test_error_event_inside_the_stream_is_classified_by_its_code():
    request = httpx.Request("POST", "http://h/v1/chat/completions")
    dead = openai.APIError("engine died", request, body={"message": "x", "code": 500})
    bad = openai.APIError("bad", request, body={"message": "x", "code": 400})
    assert is_transient(dead) and not is_transient(bad)


def test_server_root_strips_v1():
    assert server_root("http://h:8000/v1") == "http://h:8000"
    assert server_root("http://h:8000/v1/") == "http://h:8000"
    assert server_root("http://h:8000") == "http://h:8000"


def test_server_unavailable_when_budget_is_zero_still_tries_once():
    async def main() -> None:
        client = OpenAIModelClient(
            "http://127.0.0.1:9/v1",
            ClientSettings(request_timeout=1, idle_timeout=1, server_wait=0),
        )
        try:
            with pytest.raises(ServerUnavailable, match="1 attempt over"):
                await client.complete(ChatRequest(model="m", messages=[]))
        finally:
            await client.aclose()

    asyncio.run(main())


# -- the scripted client ----------------------------------------------------------------------


def test_scripted_client_answers_in_order_and_records_requests():
    def echo(request: ChatRequest) -> ModelResponse:
        return ModelResponse(content=f"you said {request.messages[-1]['content']}")

    client = ScriptedModelClient(
        [
            ModelResponse(
                tool_calls=[ToolCallOut(id="1", name="run", arguments="{}")],
                finish_reason="tool_calls",
            ),
            echo,
        ]
    )
    assert isinstance(client, ModelClient)

    async def main() -> None:
        first = await client.complete(ChatRequest(model="m", messages=[]))
        second = await client.complete(
            ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
        )
        assert first.tool_calls[0].name == "run"
        assert second.content == "you said hi"
        with pytest.raises(ScriptExhausted, match="turn 3"):
            await client.complete(ChatRequest(model="m", messages=[]))
        assert await client.list_models() == [ServedModel(id="scripted", max_model_len=32768)]
        assert await client.count_tokens("m", [{"role": "user", "content": "x" * 400}], None)
        await client.aclose()

    asyncio.run(main())
    assert len(client.requests) == 3 and client.remaining == 0 and client.closed


def test_openai_client_satisfies_the_protocol():
    client = OpenAIModelClient(
        "http://127.0.0.1:9/v1", ClientSettings(request_timeout=1, idle_timeout=1, server_wait=0)
    )
    assert isinstance(client, ModelClient)
    asyncio.run(client.aclose())


def test_sdk_chunk_objects_are_read_like_dicts_extras_included():
    from openai.types.chat import ChatCompletionChunk

    def sdk(delta: dict, finish: str | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate(
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    acc = StreamAccumulator()
    acc.add(sdk({"reasoning": "think "}))  # vLLM's field: an extra to the SDK's model
    acc.add(sdk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}))
    acc.add(sdk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "tool_calls"))
    assert acc.reasoning_text == "think "
    assert acc.tool_calls() == [ToolCallOut(id="c", name="f", arguments="{}")]
    assert acc.finish_reason == "tool_calls"


def test_importing_the_model_wing_loads_no_http_stack():
    """The loop and a resume import ``pilot.model`` and pay for the SDK only at the first
    request: neither the package nor the loop may pull in openai or httpx."""
    code = (
        "import sys, pilot.model, pilot.model.types, pilot.model.servers, pilot.agent.loop; "
        "print(sorted(m for m in ('openai', 'httpx', 'httpx2', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# -- one name per thing -----------------------------------------------------------------------


def test_events_written_before_the_renames_still_load():
    """A database keeps the stored type strings: ``server_unavailable`` rows are ``ServerAway``
    events, and an answer's usage is the model wing's ``Usage``."""
    from pilot import events as ev
    from pilot.model.types import Usage

    away = ev.event_from_json(
        '{"at":"2026-11-30T00:00:00Z","type":"server_unavailable","error":"refused","attempt":2}'
    )
    assert isinstance(away, ev.ServerAway) and away.attempt == 2
    message = ev.event_from_json(
        '{"at":"2026-11-30T00:00:00Z","type":"assistant_message","step":1,'
        '"usage":{"prompt_tokens":7,"completion_tokens":3}}'
    )
    assert isinstance(message, ev.AssistantMessage)
    assert message.usage == Usage(prompt_tokens=7, completion_tokens=3)
    assert ev.event_to_json(away).count('"type":"server_unavailable"') == 1


def test_a_wait_becomes_its_event():
    from pilot import events as ev

    away = ev.from_wait(WaitEvent(kind="unavailable", error="refused", attempt=3))
    back = ev.from_wait(WaitEvent(kind="back", waited_s=4.5, attempts=3))
    assert (away.error, away.attempt) == ("refused", 3)
    assert isinstance(back, ev.ServerBack) and (back.waited_s, back.attempts) == (4.5, 3)


def test_no_two_things_share_a_class_name():
    """An event, an error and a model type never have the same name (``ev.ServerUnavailable``
    next to ``errors.ServerUnavailable`` read as one thing and were two)."""
    import inspect

    from pilot import errors, events
    from pilot.model import types

    owners: dict[str, object] = {}
    for module in (events, errors, types):
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__.startswith("pilot"):
                assert owners.setdefault(name, value) is value, f"{name} names two classes"


def test_runs_share_a_client_exactly_when_their_client_settings_agree(tmp_path):
    """The runner's client cache keys on (endpoint, ClientSettings): a setting that differs
    makes another client, and that client was made with the setting."""
    from pilot.run.runner import Runner
    from pilot.store.event_store import EventStore
    from pilot.workflow.plan import ModelPlan, RunPlan

    runner = Runner(EventStore(f"sqlite:///{tmp_path / 'runs.db'}"))

    def plan(**settings: float) -> RunPlan:
        model = ModelPlan(endpoint="http://127.0.0.1:9/v1", client=ClientSettings(**settings))
        return RunPlan(workflow_name="w", system="s", phases=[], tools=[], model=model,
                       workspace=str(tmp_path), branch="b")  # fmt: skip

    async def main() -> None:
        try:
            first, again = runner._client(plan(server_wait=5)), runner._client(plan(server_wait=5))
            other = runner._client(plan(server_wait=6))
            assert first is again and other is not first
            assert isinstance(other, OpenAIModelClient) and other.settings.server_wait == 6
        finally:
            await runner.aclose()

    asyncio.run(main())
