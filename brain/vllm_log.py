"""vLLM's log read back as lines of processes, and the exceptions each process printed.

A vLLM server is several processes writing to one stream: the API server, the engine core
(``EngineCore``, ``EngineCore_DP0`` with data parallelism) and its workers (``Worker_TP1``...).
Every line carries its writer: ``(EngineCore pid=3292) ERROR 12-01 13:53:33 [core.py:1330] ...``
for a logger line, ``(EngineCore pid=3292) ValueError: ...`` for what Python printed itself (an
uncaught exception). vLLM 0.26 prefixes every line a process writes (``decorate_logs`` in
``vllm/utils/system_utils.py`` wraps stdout and stderr); 0.33 prefixes its logger's lines only
(``vllm/logger.py``'s format), and Python's own traceback of a dying child follows
multiprocessing's ``Process EngineCore:`` line instead. The logger repeats a record's whole
prefix on each line of a multi-line message (``NewLineFormatter``).

This module only reads: which process wrote each line and when, and each exception with its
whole message (bounded). What a failure means is :mod:`brain.diagnose`'s job. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

MAX_MESSAGE_LINES = 16
"""Lines of one exception's message kept (its first line and what follows it)."""
MAX_MESSAGE_CHARS = 2000
"""Characters of one exception's message kept; the rest is cut with an ellipsis."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROCESS = re.compile(r"^\((?P<name>[^()\n]*?) pid=(?P<pid>\d+)\) ?")
_HEADER = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[[^\]]*\] ?"
)
_EXCEPTION = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))"
    r"(?::(?: (?P<message>.*))?)?$"
)
_FATAL_PYTHON = re.compile(r"^Fatal Python error: .*")
_CHILD_TRACEBACK = re.compile(r"^Process (?P<name>\S+):$")
# A line that is no part of a message: a new traceback or a chained one, a frame, a line
# another writer printed (uvicorn's "INFO:     ...", torch's "[rank0]:[W...]").
_NOT_MESSAGE = re.compile(
    r"^(?:Traceback \(most recent call last\)|The above exception was the direct cause|"
    r"During handling of the above exception|Exception ignored in|Process \S+:$|"
    r"File \"|\[rank\d+\]|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s)"
)


@dataclass(frozen=True)
class LogLine:
    """One line of the log and who wrote it."""

    index: int
    offset: int
    """Where the line starts in the text."""
    process: str | None
    """``APIServer``, ``EngineCore``, ``Worker_TP0``...; None when the line does not say."""
    pid: int | None
    header: str
    """The logger's ``LEVEL MM-DD HH:MM:SS [file:line] `` ("" for a line Python printed)."""
    stamp: float | None
    """Seconds into the year of this line's time, or of the last line before it that had one."""
    body: str

    @property
    def writer(self) -> str | None:
        """``EngineCore pid=3292``, as vLLM names the process; None when unknown."""
        if self.process is None:
            return None
        return f"{self.process} pid={self.pid}" if self.pid is not None else self.process


@dataclass(frozen=True)
class LoggedException:
    """An exception a process printed: its first line's ``LogLine`` and its whole message."""

    line: LogLine
    name: str
    """``ValueError``, ``pydantic_core._pydantic_core.ValidationError``..."""
    lines: tuple[str, ...]
    """``ValueError: ...`` and the message's further lines, stripped and bounded."""
    process: str | None
    pid: int | None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def writer(self) -> str | None:
        if self.process is None:
            return None
        return f"{self.process} pid={self.pid}" if self.pid is not None else self.process


def _seconds(stamp: str) -> float | None:
    """``12-01 13:53:33`` as seconds into a leap year (vLLM's log has no year)."""
    try:
        when = datetime.strptime(f"2000-{stamp}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return (when - datetime(2000, 1, 1)).total_seconds()


def read_lines(text: str) -> list[LogLine]:
    """Every line of ``text`` with its process, its logger header and its time."""
    out: list[LogLine] = []
    offset = 0
    stamp: float | None = None
    for index, raw in enumerate(text.splitlines(keepends=True)):
        line = _ANSI.sub("", raw.rstrip("\r\n"))
        process = pid = None
        if m := _PROCESS.match(line):
            process, pid = m["name"].strip(), int(m["pid"])
            line = line[m.end() :]
        header = ""
        if h := _HEADER.match(line):
            header = h.group(0)
            if (seconds := _seconds(h["stamp"])) is not None:
                stamp = seconds
            line = line[h.end() :]
        out.append(LogLine(index, offset, process, pid, header, stamp, line))
        offset += len(raw)
    return out


def _message(lines: list[LogLine], first: LogLine, head: str) -> tuple[str, ...]:
    """``head`` and the lines after ``first`` that continue its message: same writer, same
    logger header (or none, for a traceback Python printed), up to a blank line or anything
    that starts something else; bounded by MAX_MESSAGE_LINES and MAX_MESSAGE_CHARS."""
    kept = [head] if head else []
    for line in lines[first.index + 1 : first.index + MAX_MESSAGE_LINES]:
        body = line.body.strip()
        if (
            (line.process, line.pid) != (first.process, first.pid)
            or line.header != first.header
            or not body
            or _NOT_MESSAGE.match(body)
            or _EXCEPTION.match(body)
        ):
            break
        kept.append(body)
    text = "\n".join(kept)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return tuple(text.split("\n"))


def exceptions(lines: list[LogLine]) -> list[LoggedException]:
    """Every exception line in the log, in order, with its message whole and its process.

    A line Python printed without a process prefix (vLLM 0.33's dying child) belongs to the
    process multiprocessing named just before its traceback (``Process EngineCore:``)."""
    found: list[LoggedException] = []
    child: str | None = None  # named by "Process X:", for the unprefixed traceback after it
    for line in lines:
        body = line.body.strip()
        if line.process is None and not line.header and (m := _CHILD_TRACEBACK.match(body)):
            child = m["name"]
            continue
        exc = _EXCEPTION.match(body)
        fatal = None if exc else _FATAL_PYTHON.match(body)
        if not exc and not fatal:
            continue
        process, pid = line.process, line.pid
        if process is None and not line.header and child is not None:
            process, child = child, None
        if exc:
            name = exc["name"]
            head = f"{name}: {exc['message']}" if exc["message"] else f"{name}:"
            if exc["message"] is None and not body.endswith(":"):
                head = name
        else:
            name, head = "Fatal Python error", body
        kept = _message(lines, line, head)
        if exc and not exc["message"] and len(kept) > 1:
            kept = (f"{name}: {kept[1]}", *kept[2:])  # "RuntimeError:" + its message's lines
        found.append(LoggedException(line, name, kept, process, pid))
    return found


def has_process_prefixes(lines: list[LogLine]) -> bool:
    """Whether the log says which process wrote its lines (vLLM's own format does)."""
    return any(line.process is not None for line in lines)


def is_api_server(process: str | None) -> bool:
    """vLLM's front end (``APIServer``, ``APIServer_1`` with several API servers)."""
    return process is not None and process.startswith("APIServer")
