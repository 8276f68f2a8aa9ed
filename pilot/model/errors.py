"""vLLM's error answers, and the transport's failures, in the pilot's own terms.

Two questions, each answered in one place. Is a failure worth waiting out (:func:`is_transient`:
the server is down, restarting or busy) or is it the answer (every other 4xx: the same request
would fail the same way for hours)? And which typed error of ``pilot.errors`` does a
deterministic answer become? The second is one declarative table, :data:`VLLM_ERRORS`, in the
manner of httpx's ``map_exceptions``: each row names the statuses and the message text it
matches (the texts vLLM writes, with the file that writes them) and builds the error;
:func:`map_vllm_error` applies the first row that matches. A new vLLM wording is one row.

It must not do I/O: the client fetches what a row needs (the served models of a 404) and
decides when to ask.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pilot.errors import (
    BadRequest,
    ConfigurationError,
    ContextOverflow,
    ForcedCallsRefused,
    MarathonError,
    ModelNotFound,
    ServerToolsOff,
    ServerUnavailable,
    StreamInterrupted,
)

if TYPE_CHECKING:
    import openai

__all__ = [
    "SAME_500_LIMIT",
    "SAME_CUT_LIMIT",
    "TRANSIENT_STATUS",
    "VLLM_ERRORS",
    "ErrorAnswer",
    "ErrorRule",
    "TransientStatus",
    "answer_of",
    "describe_failure",
    "deterministic_500",
    "error_message",
    "is_refused",
    "is_transient",
    "map_vllm_error",
    "page_summary",
    "wants_served_models",
]

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth waiting out: the server is busy, restarting or its engine died."""


# The SDK's transport is httpx2 (aiohttp underneath); /tokenize may go through either client.
# The exception classes are imported on a failure, not with this module: a process that never
# meets one never loads the SDK for them (``import pilot.model.client`` loads none of it).
def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx
    import httpx2

    return (httpx.TransportError, httpx2.TransportError)


def _timeout_errors() -> tuple[type[BaseException], ...]:
    import httpx
    import httpx2

    return (httpx.TimeoutException, httpx2.TimeoutException)


def _connect_errors() -> tuple[type[BaseException], ...]:
    import httpx
    import httpx2

    return (httpx.ConnectError, httpx2.ConnectError, ConnectionRefusedError)


API_KEY_HINT = (
    "set model.api_key_env in the workflow to the name of an environment variable holding the "
    "key the server was started with (vLLM's --api-key or VLLM_API_KEY; a LiteLLM proxy's "
    "master key or one of its virtual keys), and export it"
)
AUTO_TOOL_FLAGS = "--enable-auto-tool-choice --tool-call-parser <parser>"
SAME_500_LIMIT = 3
"""The same HTTP 500 this many times in a row, with the server's /health at 200, is the answer
to this request, not an outage: it is not retried for the rest of ``server_wait``."""
SAME_CUT_LIMIT = 2
"""Cut streams in a row, with the server up, before the request is asked once unstreamed."""


# --------------------------------------------------------------------------------------------
# Transient or not
# --------------------------------------------------------------------------------------------


class TransientStatus(Exception):
    """A 5xx/429 from an endpoint called without the SDK (``/tokenize``)."""


def _stream_error_code(exc: openai.APIError) -> int | None:
    """The ``code`` of an error event inside an SSE stream (vLLM puts the HTTP status there)."""
    body = exc.body
    if isinstance(body, dict):
        code = body.get("code")
        if isinstance(body.get("error"), dict):
            code = body["error"].get("code", code)
        try:
            return int(code) if code is not None else None
        except (TypeError, ValueError):
            return None
    return None


def is_transient(exc: BaseException) -> bool:
    """True for failures that say "the server is not answering right now", not "you are wrong".

    Connection errors and timeouts, 408/429/5xx, streams cut or gone silent, and error events
    inside a stream that carry a 5xx (or no) code. Everything else, in particular every other
    4xx, is deterministic and must not be retried.
    """
    if isinstance(exc, StreamInterrupted | TransientStatus):
        return True
    import openai

    if isinstance(exc, (openai.APIConnectionError, *_transport_errors())):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in TRANSIENT_STATUS
    if type(exc) is openai.APIError:  # an error event inside the stream
        code = _stream_error_code(exc)
        return code is None or code in TRANSIENT_STATUS
    return False


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then what it was raised from, down to the root (each once)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _timed_out(exc: BaseException) -> bool:
    """Whether a transport failure was a timeout, by its root cause: the aiohttp transport
    maps every connection error (refused, reset, closed by the server) to a connect timeout."""
    *_, root = _causes(exc)
    return isinstance(root, TimeoutError) or "Timeout" in type(root).__name__


def is_refused(exc: BaseException | None) -> bool:
    """Whether a failure is "nobody listens there" (connection refused, host unreachable),
    wherever it sits in the chain of causes (the aiohttp transport reports a refused connection
    as a connect *timeout* whose cause is the refusal)."""
    connect_errors = _connect_errors()
    return any(isinstance(cause, connect_errors) for cause in _causes(exc))


def describe_failure(exc: BaseException) -> str:
    """One line about a transient failure, for events and the final ServerUnavailable."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {error_message(exc.body, exc.message)}"
    if isinstance(exc, (openai.APITimeoutError, *_timeout_errors())) and _timed_out(exc):
        return "request timed out"
    if isinstance(exc, (openai.APIConnectionError, *_transport_errors())):
        *_, cause = _causes(exc)
        detail = f" ({type(cause).__name__}: {' '.join(str(cause).split())})"
        return f"connection failed{detail}"
    if isinstance(exc, openai.APIError):
        return f"error inside the stream: {error_message(exc.body, exc.message)}"
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------------------------
# The table: deterministic answers to typed errors
# --------------------------------------------------------------------------------------------


_TITLE = re.compile(r"<title[^>]*>\s*([^<]*?)\s*</title>", re.IGNORECASE)


def _titled(text: str) -> str:
    """`` titled '404 Not Found'`` for a page with a title, else ""."""
    title = _TITLE.search(text[:4096])
    return f" titled {' '.join(title.group(1).split())!r}" if title and title.group(1) else ""


def page_summary(text: str) -> str | None:
    """``an HTML page titled '404 Not Found'`` for a body that is markup, not an API's answer
    (a web server's or a proxy's error page); None for anything else."""
    if not text.lstrip()[:1].startswith("<"):
        return None
    return f"an HTML page{_titled(text)}"


def error_message(body: Any, fallback: str) -> str:
    """vLLM's human message out of an error body (``{"error": {"message"}}`` and variants); a
    page of markup is summarised in a few words, never pasted."""
    if isinstance(body, str) and body:
        return page_summary(body) or body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("message"), str):
            return body["message"]
        if isinstance(body.get("detail"), str):
            return body["detail"]
    return page_summary(fallback) or fallback


def answer_of(exc: openai.APIError) -> tuple[int, str, str | None, str | None]:
    """The status, vLLM's message, the raw body and its content type of an SDK error (an
    error event inside a stream carries its status as ``code``; none is read as 400)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        body = exc.response.text if exc.response is not None else None
        kind = exc.response.headers.get("content-type") if exc.response is not None else None
    else:
        status = _stream_error_code(exc) or 400
        body = json.dumps(exc.body) if exc.body is not None else None
        kind = "application/json"
    return status, error_message(exc.body, exc.message), body, kind


@dataclass(frozen=True)
class ErrorAnswer:
    """One deterministic error answer, with what the builders of :data:`VLLM_ERRORS` may name."""

    status: int
    message: str
    model: str | None = None
    served: Sequence[str] | None = None
    endpoint: str | None = None
    body: str | None = None
    content_type: str | None = None

    @property
    def at(self) -> str:
        return f" at {self.endpoint}" if self.endpoint else ""

    @property
    def not_json(self) -> bool:
        """Whether the answer is something other than an API's JSON (a web page, plain text):
        what answered does not speak the OpenAI API at that URL."""
        if self.content_type and "json" in self.content_type.lower():
            return False
        if self.body is None:
            return False
        try:
            json.loads(self.body)
        except ValueError:
            return True
        return False


_ANY_MESSAGE = re.compile("")


@dataclass(frozen=True)
class ErrorRule:
    """A row of the table: the answers it matches (any status when ``statuses`` is None, any
    message by default, and only those ``when`` accepts when given) and the typed error they
    become (``build`` gets the pattern's match, to read numbers out of the text)."""

    build: Callable[[ErrorAnswer, re.Match[str]], MarathonError]
    statuses: frozenset[int] | None = None
    pattern: re.Pattern[str] = _ANY_MESSAGE
    when: Callable[[ErrorAnswer], bool] | None = None

    def match(self, answer: ErrorAnswer) -> re.Match[str] | None:
        """The pattern's match in the answer's message when the row applies, else None."""
        if self.statuses is not None and answer.status not in self.statuses:
            return None
        if self.when is not None and not self.when(answer):
            return None
        return self.pattern.search(answer.message)


def _int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _api_key(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    return ConfigurationError(
        f"the model server{answer.at} refused the request "
        f"(HTTP {answer.status}: {answer.message}): it wants an API key; {API_KEY_HINT}."
    )


def _proxy_key(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    return ConfigurationError(
        f"the model server{answer.at} refused the request's API key "
        f"(HTTP {answer.status}: {answer.message}); {API_KEY_HINT}. A LiteLLM proxy answers "
        "'No connected db.' to any key but its master key when it has no database of virtual "
        "keys."
    )


def _endpoint_hint(endpoint: str | None, *, other_server: bool) -> str:
    """What to fix in ``model.endpoint``: the missing /v1; or, for a URL that ends in it, the
    host and port (``other_server``: something that is no model server answered) or the
    path."""
    if endpoint and urlsplit(endpoint).path.rstrip("/").endswith("/v1"):
        if other_server:
            return (
                "check model.endpoint's host and port: whatever answers there is not the model "
                "server (vLLM listens on port 8000 by default)"
            )
        return (
            "check model.endpoint's path: the OpenAI base URL is the server's root and /v1, "
            "nothing else (e.g. http://HOST:8000/v1)"
        )
    try_url = f" (try {endpoint.rstrip('/')}/v1)" if endpoint else ""
    return f"model.endpoint should be the server's OpenAI base URL, usually ending in /v1{try_url}"


def _not_an_api(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    body = answer.body or ""
    kind = (answer.content_type or "").split(";", 1)[0].strip() or "non-JSON"
    if page_summary(body):
        what = f"a {kind} page{_titled(body)}"
    else:
        text = " ".join(body.split())
        what = f"{kind} {text[:80]!r}" if text else f"an empty {kind} body"
    return ConfigurationError(
        f"the server{answer.at} is not an OpenAI-compatible API: it answered HTTP "
        f"{answer.status} with {what} where the API answers JSON; "
        f"{_endpoint_hint(answer.endpoint, other_server=True)}."
    )


def _model_not_found(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    m = re.search(r"model `([^`]*)`", answer.message)
    name = m.group(1) if m else (answer.model or "?")
    return ModelNotFound(name, list(answer.served or []), endpoint=answer.endpoint)


def _no_such_route(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    return ConfigurationError(
        f"the model server{answer.at} has no such endpoint (HTTP 404: {answer.message}); "
        f"{_endpoint_hint(answer.endpoint, other_server=False)}."
    )


def _context_overflow(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    """vLLM's overflow texts (current, character pre-check, and older wording).

    vLLM 0.30+ reports only a lower bound of the prompt ("contains at least P input tokens"),
    so ``prompt_tokens`` is that bound when that is all there is.
    """
    message = answer.message
    limit = _int(r"maximum context length is (\d+)", message)
    output = _int(r"requested (\d+) output tokens", message) or _int(
        r"(\d+) in the completion", message
    )
    prompt = (
        _int(r"contains at least (\d+) input tokens", message)
        or _int(r"request has (\d+) input tokens", message)
        or _int(r"\((\d+) in the messages", message)
        or _int(r"upper bound for (\d+) input tokens", message)
    )
    return ContextOverflow(message, max_model_len=limit, prompt_tokens=prompt, max_tokens=output)


def _other_server_overflow(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    """llama-server's and SGLang's overflow texts (the window named in each)."""
    message = answer.message
    return ContextOverflow(
        message,
        max_model_len=_int(r"context size \((\d+) tokens\)", message)
        or _int(r"max context size \((\d+) tokens\)", message)
        or _int(r"maximum context length of (\d+) tokens", message)
        or _int(r"context length \((\d+) tokens\)", message),
        prompt_tokens=_int(r"(?:request|input) \((\d+) tokens\)", message)
        or _int(r"(\d+) tokens from the input", message),
        max_tokens=_int(r"(\d+) tokens for the completion", message),
    )


def _output_over_window(answer: ErrorAnswer, match: re.Match[str]) -> MarathonError:
    return ContextOverflow(
        answer.message,
        max_model_len=int(match.group(1)),
        max_tokens=_int(r"max_(?:completion_)?tokens=(\d+)", answer.message),
    )


def _no_auto_tool_choice(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    return ServerToolsOff(
        f"the server cannot let the model choose tools ({answer.message}). Start vLLM with "
        f"{AUTO_TOOL_FLAGS} (gemma4 for Gemma 4, hermes for Qwen2.5, qwen3_coder for "
        "Qwen3-Coder); in a brain profile set enable_auto_tool_choice: true and "
        "tool_call_parser: <parser> (spec fields, not extra_args), e.g. brain up PROFILE "
        "--set enable_auto_tool_choice=true --set tool_call_parser=hermes."
    )


def _unavailable(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    return ServerUnavailable(answer.endpoint or "?", f"HTTP {answer.status}: {answer.message}")


def _bad_request(answer: ErrorAnswer, _: re.Match[str]) -> MarathonError:
    return BadRequest(answer.message, status=answer.status, body=answer.body)


_MODEL_NOT_FOUND = ErrorRule(
    # vLLM: 404 NotFoundError "The model `X` does not exist."; other servers: "model 'X' not
    # found".
    _model_not_found,
    statuses=frozenset({404}),
    pattern=re.compile(r"does not exist|^(?=.*model).*not found", re.IGNORECASE | re.DOTALL),
)

VLLM_ERRORS: tuple[ErrorRule, ...] = (
    # vLLM --api-key: 401 {"error": "Unauthorized"} (serve/middleware/authenticate.py).
    ErrorRule(_api_key, statuses=frozenset({401, 403})),
    # A LiteLLM proxy's refusals of a key that answer 400 (litellm/proxy/auth/
    # user_api_key_auth.py): "No connected db." (a key other than the master key, and no
    # database of virtual keys: recorded from LiteLLM 1.108.7, tests/fixtures/litellm), and
    # "Authentication Error - Expired Key. ..."; its other auth errors are 401
    # ("Authentication Error, No api key passed in." and the like: auth_exception_handler.py).
    ErrorRule(
        _proxy_key,
        statuses=frozenset({400}),
        pattern=re.compile(
            r"No connected db\.|Authentication Error|LiteLLM Virtual Key expected|"
            r"Invalid proxy server token|No api key passed in|Malformed API Key"
        ),
    ),
    # A web page or plain text where the API answers JSON: another kind of server (or none
    # of the API's routes) at that URL. Transient statuses wait first, like any other.
    ErrorRule(
        _not_an_api,
        when=lambda answer: answer.status not in TRANSIENT_STATUS and answer.not_json,
    ),
    _MODEL_NOT_FOUND,
    # Any other 404: the route itself is missing (a base URL without /v1).
    ErrorRule(_no_such_route, statuses=frozenset({404})),
    # llama-server 400 exceed_context_size_error: "request (P tokens) exceeds the available
    # context size (N tokens), try increasing it" (or "input (P tokens) is larger than the max
    # context size (N tokens). skipping"; tools/server/server-context.cpp); SGLang 400
    # "Requested token count exceeds the model's maximum context length of N tokens. You
    # requested a total of T tokens: P tokens from the input messages and C tokens for the
    # completion." or "The input (P tokens) is longer than the model's context length (N
    # tokens)." (as its users quote them; SGLang is not run here).
    ErrorRule(
        _other_server_overflow,
        pattern=re.compile(
            r"exceeds the available context size|larger than the max context size"
            r"|exceeds the model's maximum context length|longer than the model's context length"
        ),
    ),
    # 400 "This model's maximum context length is N tokens. However, you requested M output
    # tokens and your prompt contains at least P input tokens ..." and its older wordings.
    ErrorRule(_context_overflow, pattern=re.compile("maximum context length", re.IGNORECASE)),
    # 400 "max_tokens=M cannot be greater than max_model_len=N. Please request fewer output
    # tokens." (vLLM 0.33's VLLMValidationError, param max_tokens); later releases write
    # "max_model_len=max_total_tokens=N", and max_completion_tokens when that was sent.
    ErrorRule(
        _output_over_window,
        pattern=re.compile(r"cannot be greater than max_model_len=(?:max_total_tokens=)?(\d+)"),
    ),
    # 400 '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be
    # set' (vLLM without the tool flags).
    ErrorRule(
        _no_auto_tool_choice,
        pattern=re.compile("tool choice requires|enable-auto-tool-choice", re.IGNORECASE),
    ),
    # Transient statuses reach the table only outside the retry loop.
    ErrorRule(_unavailable, statuses=TRANSIENT_STATUS),
    ErrorRule(_bad_request),
)
"""Deterministic error answers to typed errors, first match wins (order matters: a 404 that
names a model is not a missing route)."""


def map_vllm_error(
    status: int,
    message: str,
    *,
    model: str | None = None,
    served: Sequence[str] | None = None,
    endpoint: str | None = None,
    body: str | None = None,
    content_type: str | None = None,
) -> MarathonError:
    """Turn one deterministic error answer from the server into the pilot's typed error.

    ``served`` fills :class:`ModelNotFound` (the caller fetches it when
    :func:`wants_served_models` says so, since that needs I/O). Transient statuses never get
    here while the server wait lasts; if they do (outside the retry loop) they become
    :class:`ServerUnavailable`.
    """
    answer = ErrorAnswer(status, message, model, served, endpoint, body, content_type)
    for rule in VLLM_ERRORS:
        if (match := rule.match(answer)) is not None:
            return rule.build(answer, match)
    raise AssertionError("VLLM_ERRORS ends with a row that matches everything")


def wants_served_models(status: int, message: str) -> bool:
    """Whether this answer says "no such model" (so the error should list what is served);
    any other 404 is a missing route."""
    return _MODEL_NOT_FOUND.match(ErrorAnswer(status, message)) is not None


def deterministic_500(
    endpoint: str, message: str, tool_choice: Any, times: int, body: str | None
) -> MarathonError:
    """The same HTTP 500 ``times`` in a row while /health is ok: a server bug this request
    meets every time. A forced tool choice is the known case: vLLM 0.26 forces calls fine,
    but answers 500 to every constrained request when its structured-output wheels are missing
    from the server's environment (``SamplingParams._validate_structured_outputs`` loads the
    lm-format-enforcer and outlines backends for each one)."""
    if tool_choice == "required" or isinstance(tool_choice, dict):
        return ForcedCallsRefused(
            f"the server at {endpoint} answers HTTP 500 ({message!r}) to tool_choice="
            f"{json.dumps(tool_choice)} {times} times in a row while its /health is ok: its "
            "vLLM cannot run structured outputs, which a forced tool call needs. vLLM does "
            "support required and named tool choice; this is the server's install: its Python "
            "environment lacks the structured-output wheels vLLM requires (vLLM 0.26 and 0.33 "
            "pin lm-format-enforcer==0.11.3 and outlines_core==0.2.14, with interegular beside "
            "them). Install them where vLLM runs (pip install lm-format-enforcer==0.11.3 "
            "interegular outlines_core==0.2.14, or add them to the bundle) and restart it; its "
            "log names the missing module. To go on meanwhile, do not force calls: set "
            "model.tool_calls to native (tool_choice auto, the server's parser) or text (calls "
            "read from the model's text)."
        )
    return BadRequest(
        f"the server at {endpoint} answers HTTP 500 ({message!r}) to this request "
        f"{times} times in a row while its /health is ok: the request meets a server bug, "
        "it is not an outage, so it is not retried for the rest of server_wait. The "
        "server's log has the traceback.",
        status=500,
        body=body,
    )
