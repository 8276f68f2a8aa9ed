"""The model client: the pilot's only way to the model server.

An ``openai.AsyncOpenAI`` underneath, always streaming, with the resilience an unattended run
needs and the SDK does not give: tenacity retries for as long as ``server_wait`` allows when the
server is down, restarting or busy (telling the caller when it starts and stops waiting), an
idle watchdog that cuts a stream that went silent, and vLLM's error bodies mapped to the typed
errors of ``pilot.errors`` by the one table of :mod:`pilot.model.errors`. Deterministic 4xx
answers are never retried: the same request would fail the same way for hours.

It must not decide anything about the conversation (compaction, repair, nudges): that is the
loop's job.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from brain.sse import SSEDecoder
from pilot.errors import MarathonError, ServerUnavailable, StreamInterrupted
from pilot.model.errors import (
    SAME_500_LIMIT,
    SAME_CUT_LIMIT,
    TRANSIENT_STATUS,
    TransientStatus,
    answer_of,
    describe_failure,
    deterministic_500,
    error_message,
    is_transient,
    map_vllm_error,
    wants_served_models,
)
from pilot.model.servers import (
    LLAMA_CPP_COUNT_PATH,
    PROBE_TIMEOUT_S,
    card_window,
    counts_text_only,
    probe_context_window,
    server_root,
    server_up,
    token_count,
)
from pilot.model.settings import ClientSettings
from pilot.model.streaming import StreamAccumulator
from pilot.model.types import (
    ChatRequest,
    ModelResponse,
    RetryPolicy,
    ServedModel,
    WaitCallback,
    WaitEvent,
)

if TYPE_CHECKING:
    import httpx
    import httpx2
    import openai
    from tenacity import RetryCallState

__all__ = ["OpenAIModelClient", "notify_wait"]

T = TypeVar("T")
_log = logging.getLogger(__name__)

MODELS_FRESH_S = 5.0
"""How long a model list is reused by the runs that share a client (``list_models``)."""


DRAIN_AFTER_DONE_S = 0.1
"""How long the rest of a body is read after ``[DONE]``, so HTTP/1.1 can reuse the connection
(the SDK's own bound); a server that keeps the stream open past it loses the connection."""


async def _stream_chunks(response: httpx2.Response | httpx.Response) -> AsyncIterator[Any]:
    """The JSON chunks of a streamed chat completion, up to ``data: [DONE]``.

    An error event (``data: {"error": ...}``, which vLLM sends when generation fails after the
    headers went out) is raised as ``openai.APIError``, as the SDK's stream raises it, so
    :func:`is_transient` and :func:`map_vllm_error` see the same thing either way. A body
    without content coding is read raw: one generator layer less per chunk.
    """
    import openai

    coded = response.headers.get("content-encoding", "identity").lower() != "identity"
    body = response.aiter_bytes() if coded else response.aiter_raw()
    decoder = SSEDecoder()
    loads = json.loads
    async for raw in body:
        for data in decoder.feed(raw):
            if data.startswith(b"[DONE]"):
                await _drain(body)
                return
            chunk = loads(data)
            if type(chunk) is dict and chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else None
                if not message or not isinstance(message, str):
                    message = "An error occurred during streaming"
                raise openai.APIError(message, response.request, body=error)
            yield chunk


async def _drain(body: AsyncIterator[bytes]) -> None:
    """Read what is left of a finished stream, briefly; a failure here changes nothing."""
    import httpx
    import httpx2

    try:
        async with asyncio.timeout(DRAIN_AFTER_DONE_S):
            async for _ in body:
                pass
    except (TimeoutError, httpx.TransportError, httpx2.TransportError):
        pass


async def notify_wait(on_wait: WaitCallback | None, event: WaitEvent) -> None:
    """Tell the caller about a wait (its callback may be sync or async)."""
    if on_wait is None:
        return
    result = on_wait(event)
    if inspect.isawaitable(result):
        await result


# --------------------------------------------------------------------------------------------
# The real client
# --------------------------------------------------------------------------------------------


class OpenAIModelClient:
    """:class:`ModelClient` over HTTP to vLLM (or anything speaking its OpenAI dialect).

    ``settings`` (:class:`ClientSettings`: the key, the timeouts and ``server_wait``) is the
    one value a process's client cache keys on, so two runs share a client only when they
    would have made the same one. ``http_client`` (an ``httpx.AsyncClient`` or
    ``httpx2.AsyncClient``) carries every request when given, and is left open by
    :meth:`aclose`.
    ``give_up``, when given, is asked after each transient failure; True ends the wait at once
    with :class:`ServerUnavailable` (the router's way to move on from a refused connection when
    another endpoint can take the request).

    openai, httpx and tenacity are imported when the first request goes out (tenacity at the
    first failure), not with this module nor with the client: a resume reads its store and
    folds its state without them, and ``pilot show`` never loads them.
    """

    def __init__(
        self,
        base_url: str,
        settings: ClientSettings,
        *,
        http_client: httpx.AsyncClient | httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        give_up: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._give_up = give_up
        self.settings = settings
        self._api_key = settings.api_key
        self._request_timeout = settings.request_timeout
        self._idle_timeout = settings.idle_timeout
        self._server_wait = settings.server_wait
        self._retry = retry or RetryPolicy()
        self._own_http = http_client is None
        self._http = http_client  # None: the SDK's transport, made with the SDK's client
        self._sdk: openai.AsyncOpenAI | None = None
        self._tokenize_supported: bool | None = None
        self._count_path = "/tokenize"  # llama-server counts a chat at LLAMA_CPP_COUNT_PATH
        self._takes_stream_interval: asyncio.Future[bool] | None = None
        self._models_in_flight: asyncio.Future[list[ServedModel]] | None = None
        self._models_seen: tuple[float, list[ServedModel]] | None = None

    @property
    def _client(self) -> openai.AsyncOpenAI:
        """The SDK's client, made (and the SDK imported) for the first request."""
        if self._sdk is None:
            import openai

            if self._http is None:
                # Our own pool, closed by aclose(): the SDK's default wrapper closes itself
                # from __del__ by scheduling a task on whatever loop runs then, which breaks
                # when a client outlives the loop that opened its connections.
                self._http = openai.DefaultAioHttpClient(timeout=self._request_timeout)
            # vLLM without --api-key accepts any bearer; a placeholder keeps the SDK from
            # reading OPENAI_API_KEY (a real OpenAI key must never be sent to a local server
            # by accident).
            self._sdk = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key or "no-key",
                max_retries=0,
                timeout=self._request_timeout,
                http_client=self._http,
            )
        return self._sdk

    # -- retries ------------------------------------------------------------------------------

    async def _with_retries(
        self, operation: Callable[[], Awaitable[T]], on_wait: WaitCallback | None
    ) -> tuple[T, int]:
        """Run ``operation`` until it succeeds, a deterministic error, or ``server_wait`` is over.

        The wait budget starts at the first failure (a stream cut after ten minutes of work
        still gets the whole budget); the last backoff is shortened to end with the budget.
        """
        # The first attempt runs bare: nearly every request succeeds at once, and setting up
        # the retry loop is CPU spent for nothing then (figures in bench/README.md).
        try:
            return await operation(), 1
        except Exception as exc:
            if not is_transient(exc):
                raise
            replay: Exception | None = exc
        from tenacity import AsyncRetrying, RetryError, retry_if_exception
        from tenacity.wait import wait_exponential_jitter

        first_failure: float | None = None
        attempts = 0
        backoff = wait_exponential_jitter(
            max=self._retry.max_backoff,
            jitter=self._retry.jitter,
            multiplier=self._retry.initial_backoff,
        )

        def waited() -> float:
            return time.monotonic() - first_failure if first_failure is not None else 0.0

        def wait(state: RetryCallState) -> float:
            # The last sleep is clipped to the budget, so the final attempt lands at its end
            # instead of giving up as much as a whole backoff early.
            return max(0.0, min(backoff(state), self._server_wait - waited()))

        def stop(state: RetryCallState) -> bool:
            if waited() >= self._server_wait:
                return True
            outcome = state.outcome
            if self._give_up is None or outcome is None or not outcome.failed:
                return False
            error = outcome.exception()
            return error is not None and self._give_up(error)

        retrying = AsyncRetrying(retry=retry_if_exception(is_transient), stop=stop, wait=wait)
        result: T | None = None
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    try:
                        if replay is not None:  # the first attempt's failure, seen above
                            failure, replay = replay, None
                            raise failure
                        result = await operation()
                    except Exception as exc:
                        if is_transient(exc) and first_failure is None:
                            first_failure = time.monotonic()
                            await notify_wait(
                                on_wait,
                                WaitEvent(
                                    kind="unavailable",
                                    error=describe_failure(exc),
                                    attempt=attempts,
                                ),
                            )
                        raise
        except RetryError as err:
            last = err.last_attempt.exception()
            spent = waited()
            reason = (
                f"{attempts} attempt{'s' if attempts != 1 else ''} over {spent:.1f}s "
                f"(server_wait={self._server_wait:g}s) all failed; last error: "
                f"{describe_failure(last) if last else 'unknown'}"
            )
            raise ServerUnavailable(self.base_url, reason, waited=spent) from last
        if first_failure is not None:
            await notify_wait(
                on_wait,
                WaitEvent(kind="back", waited_s=waited(), attempt=attempts, attempts=attempts),
            )
        return result, attempts  # type: ignore[return-value]

    async def _typed(self, exc: openai.APIError, model: str | None) -> MarathonError:
        """Map a deterministic SDK error to ours (see :meth:`_typed_status`)."""
        status, message, body, content_type = answer_of(exc)
        return await self._typed_status(status, message, model, body, content_type)

    async def _typed_status(
        self,
        status: int,
        message: str,
        model: str | None,
        body: str | None,
        content_type: str | None = None,
    ) -> MarathonError:
        """:func:`map_vllm_error`, after asking the server which models it serves when the
        answer says the model is not one of them."""
        served: list[str] | None = None
        if wants_served_models(status, message):
            try:
                served = [m.id for m in await self._list_models_once()]
            except Exception:
                served = []
        return map_vllm_error(
            status,
            message,
            model=model,
            served=served,
            endpoint=self.base_url,
            body=body,
            content_type=content_type,
        )

    # -- complete -----------------------------------------------------------------------------

    def _request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of one streamed chat completion, ``extra_body`` merged in."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools is not None:
            body["tools"] = request.tools
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        for name in ("temperature", "top_p", "seed", "max_tokens"):
            value = getattr(request, name)
            if value is not None:
                body[name] = value
        if request.extra_body:
            body.update(request.extra_body)
            taken = self._takes_stream_interval
            if taken is not None and taken.done() and not taken.result():
                body.pop("stream_interval", None)
        return body

    async def _check_stream_interval(self) -> None:
        """Ask the server's /version once whether it honours a request's ``stream_interval``;
        a release that does not (vLLM 0.26 drops the field with HTTP 200) is told about once,
        and the field is left out."""
        if self._takes_stream_interval is None:
            self._takes_stream_interval = asyncio.get_running_loop().create_future()
            version = None
            try:
                response = await self._http_client().get(
                    f"{server_root(self.base_url)}/version", timeout=PROBE_TIMEOUT_S
                )
                if response.status_code == 200:
                    version = (_safe_json(response) or {}).get("version")
            except Exception:
                pass
            from brain.vllm_versions import facts_for, parse_version

            takes = parse_version(version) is None or facts_for(version).request_stream_interval
            if not takes:
                _log.warning(
                    "the server at %s runs vLLM %s, which ignores a request's stream_interval: "
                    "left out (every token comes in its own chunk). Set the server's "
                    "stream_interval (brain spec) instead, or use vLLM >= 0.33.",
                    self.base_url,
                    version,
                )
            self._takes_stream_interval.set_result(takes)
        await asyncio.shield(self._takes_stream_interval)

    async def _open_stream(self, request: ChatRequest) -> httpx2.Response | httpx.Response:
        """POST /chat/completions through the official client; the body is left unread.

        ``chat.completions.create`` walks every message through the SDK's typed transform and
        builds a pydantic object per chunk: CPU that grows with the history, the largest cost
        of a long run's step (figures in bench/README.md). The messages are already plain JSON
        built by us, so the lower-level ``post`` keeps what the SDK does for the wire (headers,
        auth, status errors with their bodies) without that work; ``cast_to`` a response is
        the SDK's documented way to get the body raw, and :func:`_stream_chunks` reads it.
        """
        import httpx2

        return await self._client.post(
            "/chat/completions",
            body=self._request_body(request),
            cast_to=httpx2.Response,
            stream=True,
        )

    async def _attempt(self, request: ChatRequest) -> ModelResponse:
        """One attempt under the whole-request deadline (``request_timeout``)."""
        try:
            async with asyncio.timeout(self._request_timeout):
                return await self._stream_once(request)
        except TimeoutError:
            raise StreamInterrupted(
                f"the request took longer than request_timeout={self._request_timeout:g}s"
            ) from None

    async def _stream_once(self, request: ChatRequest) -> ModelResponse:
        """One attempt: send, read the stream under the idle watchdog, check it really ended."""
        idle = self._idle_timeout
        started = time.monotonic()
        try:
            async with asyncio.timeout(idle):
                response = await self._open_stream(request)
        except TimeoutError:
            raise StreamInterrupted(
                f"no response within idle_timeout={idle:g}s; request abandoned"
            ) from None
        acc = StreamAccumulator()
        ttft: float | None = None
        # One watchdog for the whole stream, pushed back at most every idle/8 seconds: a
        # timeout per chunk cost a timer-heap push and pop per streamed token. The stream is
        # cut between idle and idle * 9/8 after its last chunk, never sooner.
        loop = asyncio.get_running_loop()
        slack = idle / 8
        try:
            async with asyncio.timeout(idle + slack) as watchdog:
                pushed = loop.time()
                async for chunk in _stream_chunks(response):
                    now = loop.time()
                    if now - pushed > slack:
                        watchdog.reschedule(now + idle + slack)
                        pushed = now
                    if acc.add(chunk) and ttft is None:
                        ttft = time.monotonic() - started
        except TimeoutError:
            raise StreamInterrupted(
                f"no data for idle_timeout={idle:g}s; stream cut",
                received_chars=acc.received_chars,
            ) from None
        except json.JSONDecodeError as exc:
            # A server fault like a cut (a proxy's error page, a half-written event): retried.
            raise StreamInterrupted(
                f"the server sent an event that is not JSON ({exc.msg}: {exc.doc[:80]!r})",
                received_chars=acc.received_chars,
            ) from None
        finally:
            try:
                await response.aclose()
            except Exception:
                pass  # closing a broken connection may fail; the attempt's outcome stands
        if acc.finish_reason is None:
            raise StreamInterrupted(
                "the stream ended without a finish_reason (connection closed mid-answer)",
                received_chars=acc.received_chars,
            )
        return ModelResponse(
            content=acc.text,
            reasoning=acc.reasoning_text,
            tool_calls=acc.tool_calls(),
            finish_reason=acc.finish_reason,
            usage=acc.usage,
            ttft_s=ttft,
            duration_s=time.monotonic() - started,
            endpoint=self.base_url,
        )

    async def complete(
        self, request: ChatRequest, *, on_wait: WaitCallback | None = None
    ) -> ModelResponse:
        """Stream one completion to its end, retrying transient failures within server_wait.

        Raises :class:`ServerUnavailable` when the wait runs out, :class:`ContextOverflow`,
        :class:`ModelNotFound`, :class:`ConfigurationError` or :class:`BadRequest` for answers
        that retrying cannot change.
        """
        if request.extra_body and "stream_interval" in request.extra_body:
            await self._check_stream_interval()
        import httpx
        import httpx2
        import openai

        same_500: list[str] = []
        cuts = 0

        async def attempt() -> ModelResponse:
            nonlocal cuts
            try:
                return await self._attempt(request)
            except (StreamInterrupted, httpx.TransportError, httpx2.TransportError):
                cuts += 1
                if cuts == SAME_CUT_LIMIT and await self._healthy():
                    await self._ask_without_streaming(request)
                raise
            except openai.APIStatusError as exc:
                if exc.status_code == 500:
                    body = exc.response.text if exc.response is not None else ""
                    same_500[:] = [*same_500, body] if same_500[-1:] == [body] else [body]
                    if len(same_500) >= SAME_500_LIMIT and await self._healthy():
                        raise deterministic_500(
                            self.base_url,
                            error_message(exc.body, exc.message) or "no message",
                            request.tool_choice,
                            len(same_500),
                            exc.response.text if exc.response is not None else None,
                        ) from exc
                raise

        try:
            response, attempts = await self._with_retries(attempt, on_wait)
        except openai.APIError as exc:
            raise await self._typed(exc, request.model) from exc
        return response.model_copy(update={"attempts": attempts})

    async def _ask_without_streaming(self, request: ChatRequest) -> None:
        """The same request once more, not streamed and for one token, to hear the server's
        reason for cutting its streams: some servers (llama-cpp-python) check the prompt only
        once the stream has started, so a prompt over the window reaches the client as a cut
        stream, forever, while the same request unstreamed gets a 400 naming the window. That
        answer is raised (a deterministic error, mapped like any other); any other outcome
        leaves the cut to be retried."""
        body = self._request_body(request)
        body.pop("stream_options", None)
        body |= {"stream": False, "max_tokens": 1}
        import httpx2
        import openai

        try:
            response = await self._client.post(
                "/chat/completions", body=body, cast_to=httpx2.Response
            )
            await response.aclose()
        except openai.APIStatusError as exc:
            if 400 <= exc.status_code < 500:
                raise
        except Exception:
            return

    async def _healthy(self) -> bool:
        """The server is up (:func:`server_up`), so a repeated 500 is about the request."""
        return await server_up(self._http_client(), self.base_url)

    # -- models and tokens ---------------------------------------------------------------------

    async def _list_models_once(self) -> list[ServedModel]:
        page = await self._client.models.list()
        served: list[ServedModel] = []
        for item in page.data:
            card = getattr(item, "model_extra", None) or {}
            stated = card_window({**card, "owned_by": item.owned_by})
            served.append(
                ServedModel(
                    id=item.id,
                    max_model_len=stated.tokens if stated else None,
                    window_source=stated.source or None if stated else None,
                    server=stated.server if stated else None,
                )
            )
        if served and served[0].max_model_len is None:  # not vLLM or SGLang: ask its own way
            window = await probe_context_window(
                self._http_client(), server_root(self.base_url), served[0].id, self._api_key
            )
            served[0] = served[0].model_copy(
                update={
                    "max_model_len": window.tokens,
                    "window_source": window.source,
                    "server": window.server,
                    "slots": window.slots,
                }
            )
        return served

    async def list_models(self, *, on_wait: WaitCallback | None = None) -> list[ServedModel]:
        """``GET /v1/models`` with vLLM's ``max_model_len``, waiting out a server that is down.

        The runs of a process share one client per endpoint, and each asks this as it starts:
        an answer less than ``MODELS_FRESH_S`` old is reused, and callers that come while a
        request is out wait for it (rather than one request per starting run). If that one
        request fails, each caller asks again on its own, with its own retries and ``on_wait``.
        """
        seen = self._models_seen
        if seen is not None and time.monotonic() - seen[0] < MODELS_FRESH_S:
            return list(seen[1])
        try:
            return list(await self._shared_list_models())
        except Exception:
            pass
        import openai

        try:
            models, _ = await self._with_retries(self._list_models_once, on_wait)
        except openai.APIError as exc:
            raise await self._typed(exc, None) from exc
        return models

    def _shared_list_models(self) -> asyncio.Future[list[ServedModel]]:
        """The request out for the model list, started if none is; shielded, so that a caller
        that is cancelled does not cancel it for the others."""
        flight = self._models_in_flight
        if flight is None:
            flight = self._models_in_flight = asyncio.ensure_future(self._list_models_once())
            flight.add_done_callback(self._models_landed)
        return asyncio.shield(flight)

    def _models_landed(self, flight: asyncio.Future[list[ServedModel]]) -> None:
        self._models_in_flight = None
        if not flight.cancelled() and flight.exception() is None:
            self._models_seen = (time.monotonic(), flight.result())

    def _http_client(self) -> httpx.AsyncClient | httpx2.AsyncClient:
        if self._http is None and self._sdk is None:
            self._client  # noqa: B018 (the SDK's transport, as the first request would make)
        if self._http is None:  # closed by aclose(): a fresh pool
            import httpx

            self._http = httpx.AsyncClient(timeout=self._request_timeout)
        return self._http

    async def _tokenize_once(self, payload: dict[str, Any]) -> int | None:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        response = await self._http_client().post(
            f"{server_root(self.base_url)}{self._count_path}",
            json=payload,
            headers=headers,
            timeout=self._request_timeout,
        )
        body = _safe_json(response)
        message = error_message(body, response.text)
        if response.status_code == 404 and not wants_served_models(404, message):
            self._tokenize_supported = False  # no such route: an older or non-vLLM server
            return None
        if response.status_code in TRANSIENT_STATUS:
            raise TransientStatus(f"HTTP {response.status_code}: {message}")
        if response.status_code >= 400:
            raise await self._typed_status(
                response.status_code,
                message,
                payload.get("model"),
                response.text,
                response.headers.get("content-type"),
            )
        count = token_count(body)
        if count is not None:
            self._tokenize_supported = True
            return count
        if self._count_path == "/tokenize" and counts_text_only(body):
            self._count_path = LLAMA_CPP_COUNT_PATH  # llama-server: ask where it counts chats
            return await self._tokenize_once(payload)
        return None

    async def count_tokens(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int | None:
        """The prompt's size from the server's own tokenizer (``POST /tokenize`` at the root;
        llama-server's chat count where its ``/tokenize`` shows it is one).

        Returns None when the server has no /tokenize (remembered, so it is asked once).
        """
        if self._tokenize_supported is False:
            return None
        payload: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            payload["tools"] = tools
        count, _ = await self._with_retries(lambda: self._tokenize_once(payload), None)
        return count

    async def aclose(self) -> None:
        """Close the connections this client opened (not an ``http_client`` passed in)."""
        if self._own_http:
            if self._sdk is not None:
                await self._sdk.close()
            if self._http is not None:
                await self._http.aclose()
                self._http = None

    async def __aenter__(self) -> OpenAIModelClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _safe_json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
