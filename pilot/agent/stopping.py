"""A stop asked for (a signal, ``pilot pause``) reaches the loop where it waits.

The loop awaits its requests and counts through ``StopGuard.stoppable``: a stop cancels the
wait at once and raises ``StopRequested``; the loop then records the pause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from pilot.agent.seams import StopRequested

_T = TypeVar("_T")


class StopGuard:
    """The stop event of one loop, and the one waiter on it for the loop's life."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self._waiter: asyncio.Future[Any] | None = None

    async def stoppable(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable`` (a request, its retries and backoffs while the server is away),
        raising ``StopRequested`` the moment a stop is asked for.

        It runs in this task; a stop cancels it where it waits. (A task per request raced
        against a waiter on the stop event cost two tasks and three turns of the event loop a
        step.)"""
        if self.stop.is_set():
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # a coroutine never awaited
            raise StopRequested
        task = asyncio.current_task()
        assert task is not None
        interrupted = waiting = False

        def interrupt(_waiter: object) -> None:
            nonlocal interrupted
            if waiting:  # not a callback scheduled just before this request ended
                interrupted = True
                task.cancel()

        waiter = self.waiter()
        waiter.add_done_callback(interrupt)
        waiting = True
        try:
            result = await awaitable
        except asyncio.CancelledError:
            if interrupted and task.uncancel() == 0:
                raise StopRequested from None
            raise
        finally:
            waiting = False
            waiter.remove_done_callback(interrupt)
        if interrupted:  # the awaited code swallowed the cancellation
            task.uncancel()
            raise StopRequested
        return result

    def release(self) -> None:
        if self._waiter is not None:
            self._waiter.cancel()
            self._waiter = None

    def waiter(self) -> asyncio.Future[Any]:
        """One waiter on the stop event for the loop's life (``run`` cancels it)."""
        if self._waiter is None:
            self._waiter = asyncio.ensure_future(self.stop.wait())
        return self._waiter
