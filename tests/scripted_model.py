"""A :class:`~pilot.model.types.ModelClient` that answers from a script, with no I/O.

For tests of the loop's seam only: the project's tests otherwise talk to the simulated vLLM
server over loopback (``brain.sim``), and production code never imports this.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pilot.model.types import ChatRequest, ModelResponse, ServedModel, WaitCallback


class ScriptExhausted(AssertionError):
    """A :class:`ScriptedModelClient` was asked for more turns than it was given."""


class ScriptedModelClient:
    """:class:`ModelClient` answering from a fixed list of turns, with no I/O.

    Each turn is a :class:`ModelResponse` or a function of the request returning one (to
    answer from what the loop sent). ``requests`` keeps every request received, so a test can
    check what the loop asked.
    """

    def __init__(
        self,
        turns: Sequence[ModelResponse | Callable[[ChatRequest], ModelResponse]],
        *,
        served: Sequence[ServedModel] = (ServedModel(id="scripted", max_model_len=32768),),
        tokens_per_char: float | None = 0.25,
    ) -> None:
        self._turns = list(turns)
        self._next = 0
        self._served = list(served)
        self._tokens_per_char = tokens_per_char
        self.requests: list[ChatRequest] = []
        self.closed = False

    @property
    def remaining(self) -> int:
        """Turns not yet used."""
        return len(self._turns) - self._next

    async def complete(
        self, request: ChatRequest, *, on_wait: WaitCallback | None = None
    ) -> ModelResponse:
        """The next scripted turn (computed from ``request`` if the turn is a function)."""
        self.requests.append(request)
        if self._next >= len(self._turns):
            raise ScriptExhausted(
                f"scripted model has no turn {self._next + 1} (it was given {len(self._turns)})"
            )
        turn = self._turns[self._next]
        self._next += 1
        return turn(request) if callable(turn) else turn

    async def list_models(self, *, on_wait: WaitCallback | None = None) -> list[ServedModel]:
        return list(self._served)

    async def count_tokens(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int | None:
        """A cheap deterministic estimate (characters of the JSON times ``tokens_per_char``)."""
        if self._tokens_per_char is None:
            return None
        size = len(json.dumps(messages)) + (len(json.dumps(tools)) if tools else 0)
        return int(size * self._tokens_per_char) + 1

    async def aclose(self) -> None:
        self.closed = True
