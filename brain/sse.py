"""Server-sent events out of a byte stream: the ``data`` of each event, as it completes.

The one event-stream reader of the project: the pilot's model client reads vLLM's streamed
answers with it (through the official SDK's raw-response mode) and ``brain bench`` times its
requests with it; it lives in the brain because the brain never imports the pilot. The SDK's
stream iterator (its decoder, async-generator layers from the body up and a stream object per
request) is a visible share of the pilot's CPU when many runs share one process, for a format
that vLLM writes as ``data: <json>\n\n``; the figures are in bench/README.md
(`bench/parallel.py`).

Kept rather than ``httpx-sse`` (well kept, the same WHATWG rules): on the same httpx stream,
reading costs 1.9 us of CPU an event above httpx's own here against 5.7 for ``httpx-sse``'s
``aiter_sse`` (which decodes the bytes to text first and builds an event object each); and
after a leading BOM, which the spec says to drop, ``httpx-sse`` loses the first event (its
field reads ``\ufeffdata``). Both shown by ``python -m bench.libraries sse``; figures in
bench/README.md.

It keeps to the parts of the WHATWG event-stream rules a chat stream can meet: LF, CRLF or CR
line ends (a CR that ends one read and an LF that starts the next are one line end), several
``data`` lines joined by LF, comments and other fields ignored, a leading BOM dropped, and an
event not closed by a blank line before the end of the stream never dispatched (a cut stream
must not look complete).
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]

_BOM = b"\xef\xbb\xbf"


class SSEDecoder:
    """Feed it the body's bytes in any chunking; it returns the ``data`` of completed events.

    Pure and incremental: the same events come out however the bytes were split.
    """

    __slots__ = ("_data", "_skip_lf", "_started", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        """The start of a line whose end has not arrived yet."""
        self._data: list[bytes] = []
        """The ``data`` lines of the event being read."""
        self._skip_lf = False
        """The last read ended with a CR, so an LF that starts the next one is its other half."""
        self._started = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """The ``data`` of every event completed by ``chunk``, in order (often none or one)."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        text = self._tail + chunk if self._tail else chunk
        if not self._started:
            if len(text) < len(_BOM) and _BOM.startswith(text):
                self._tail = text  # too short to tell whether this is a BOM
                return []
            self._started = True
            if text.startswith(_BOM):
                text = text[len(_BOM) :]
        lines = text.split(b"\n")
        self._tail = lines.pop()
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                continue
            if line.startswith(b"data"):
                if line.startswith(b"data: "):
                    data.append(line[6:])
                    continue
                if line == b"data":
                    data.append(b"")
                    continue
                if line.startswith(b"data:"):
                    data.append(line[5:])
                    continue
            # Comments (":...") and the other fields (event, id, retry): nothing a chat stream
            # carries that the client uses.
        return events
