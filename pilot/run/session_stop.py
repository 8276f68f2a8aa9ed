"""The stop one run session reads: its own, or the process-wide one it follows."""

from __future__ import annotations

import asyncio


class SessionStop:
    """One run session's stop: set by its own cancel or lost lease, or by the process-wide
    stop (a signal) it follows; what the loop reads as ``stop`` (``is_set``, ``wait``). A
    cancel of one run of a worker driving several stops that run only."""

    def __init__(self, shared: asyncio.Event | None) -> None:
        self.own = asyncio.Event()
        self.shared = shared

    def is_set(self) -> bool:
        return self.own.is_set() or (self.shared is not None and self.shared.is_set())

    def set(self) -> None:
        self.own.set()

    async def wait(self) -> bool:
        if self.shared is None:
            return await self.own.wait()
        waits = [asyncio.ensure_future(e.wait()) for e in (self.own, self.shared)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return True
