"""A run's events written as lines from a side thread: what a pipe, a log file, CI and
``--detach`` get, and ``--json``.

The run's step only puts ``(run_id, seq, event)`` on a bounded queue; a daemon thread takes
what has come, renders each as one line (plain text, no rich: :func:`pilot.front.lines.plain_line`,
or a JSON object) and writes the batch with one write and one flush. A log file so holds every
event a fraction of a second after it is stored, and the step never waits on rendering or on
the file; it waits only when ``capacity`` events are still unwritten, that is when the reader
of the pipe has stopped reading (the line is never dropped). A write that fails (the reader
went away) ends the writing, never the run.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TextIO

from pilot import events as ev
from pilot.front.lines import plain_line

Render = Callable[[str, int, ev.Event], str]
"""``(run_id, seq, event) -> line`` without its newline."""

BATCH_WAIT_S = 0.05
"""How long the thread lets events gather after the first of a batch: at most 20 writes a
second however fast the steps go, and a line at most this late in its file."""


def plain_render(*, with_run_id: bool) -> Render:
    """Plain event lines, each after its run's id when several runs share the output."""

    def render(run_id: str, _seq: int, event: ev.Event) -> str:
        line = plain_line(event)
        return f"{run_id} {line}" if with_run_id else line

    return render


class LinePrinter:
    """An observer of the runner (``observer(run_id, seq, event, state)``) writing lines to
    ``out`` off the step's thread; use it as a context manager around the runs it shows (the
    exit writes what is left, in order, before anything printed after it)."""

    def __init__(self, out: TextIO, render: Render, *, capacity: int = 4096) -> None:
        self.out = out
        self.render = render
        self._queue: queue.Queue[tuple[str, int, ev.Event] | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._write_all, name="pilot-printer", daemon=True)
        self._broken = False
        self._closing = threading.Event()

    def __enter__(self) -> LinePrinter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, run_id: str, seq: int, event: ev.Event, _state: Any) -> None:
        self._queue.put((run_id, seq, event))

    def close(self) -> None:
        """Write every event put so far, then stop the thread."""
        if self._thread.is_alive():
            self._closing.set()  # the last batch is written without waiting for more
            self._queue.put(None)
            self._thread.join()

    def _write_all(self) -> None:
        while True:
            batch = [self._queue.get()]
            self._closing.wait(BATCH_WAIT_S)  # let a burst gather: one write for many events
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            items = [item for item in batch if item is not None]
            if items:
                self._write(items)
            if len(items) < len(batch):
                return

    def _write(self, items: list[tuple[str, int, ev.Event]]) -> None:
        if self._broken:
            return
        text = "".join(self.render(run_id, seq, event) + "\n" for run_id, seq, event in items)
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # the reader went away (EPIPE) or the file was closed
            self._broken = True
