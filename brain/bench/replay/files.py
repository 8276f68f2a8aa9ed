"""Replay files (``pilot replay-export``'s format): read, checked line by line, and the
requests of each recorded run resolved into whole chat requests.

A file is JSON lines: a ``replay`` header, then ``msg`` and ``tools`` lines that define each
message and tool set once, and ``req`` lines that name spans of them, so a long run's
growing prompts take the room of its messages, not of every request. Plain or gzipped.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from brain.bench.models import BenchError

REPLAY_SUFFIXES = (".jsonl", ".jsonl.gz")


class ReplayRequest(BaseModel):
    """One request of a recorded run, messages resolved."""

    n: int
    kind: str = "step"
    step: int = 0
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "auto"
    """How the request asked for calls (``required`` or a named function when the run forced
    them); files written before it was recorded say nothing: ``auto``."""
    max_tokens: int | None = None
    out: int | None = None
    """The recorded answer's tokens (None when the server sent no usage)."""
    prompt: int | None = None
    """The recorded prompt tokens (what the server counted then)."""
    think: float = 0.0


class ReplayRun(BaseModel):
    name: str
    path: str
    model: str | None = None
    max_model_len: int | None = None
    compactions: int = 0
    requests: list[ReplayRequest]


def _open_text(path: Path) -> list[str]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return handle.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BenchError(f"cannot read replay file {path}: {exc}") from exc


def load_replay(path: Path) -> ReplayRun:
    """One replay file (``pilot replay-export``'s format, see ``pilot/front/replay_export.py``)."""
    head: dict[str, Any] | None = None
    messages: dict[int, dict[str, Any]] = {}
    tools: dict[int, list[dict[str, Any]]] = {}
    requests: list[ReplayRequest] = []
    for number, raw in enumerate(_open_text(path), 1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            line = json.loads(raw)
        except ValueError as exc:
            raise BenchError(f"{where}: not JSON: {exc}") from exc
        kind = line.get("type") if isinstance(line, dict) else None
        if head is None:
            if kind != "replay":
                raise BenchError(
                    f"{where}: not a replay file (its first line must be the "
                    '{"type": "replay", ...} header); write one with `pilot replay-export`'
                )
            if line.get("version") != 1:
                raise BenchError(f"{where}: replay version {line.get('version')!r}, expected 1")
            head = line
            continue
        try:
            if kind == "msg":
                messages[int(line["id"])] = dict(line["m"])
            elif kind == "tools":
                tools[int(line["id"])] = list(line["tools"])
            elif kind == "req":
                resolved: list[dict[str, Any]] = []
                for lo, hi in line["spans"]:
                    resolved += [messages[i] for i in range(int(lo), int(hi))]
                tool_id = line.get("tools")
                requests.append(
                    ReplayRequest(
                        n=len(requests),
                        kind=str(line.get("kind") or "step"),
                        step=int(line.get("step") or 0),
                        messages=resolved,
                        tools=tools[int(tool_id)] if tool_id is not None else None,
                        tool_choice=line.get("choice") or "auto",
                        max_tokens=line.get("max_tokens"),
                        out=line.get("out"),
                        prompt=line.get("prompt"),
                        think=float(line.get("think") or 0.0),
                    )
                )
            else:
                raise BenchError(f"{where}: unknown line type {kind!r} (msg, tools or req)")
        except (KeyError, TypeError, ValueError) as exc:
            raise BenchError(
                f"{where}: malformed {kind} line ({type(exc).__name__}: {exc}); a req "
                "may only name messages and tools defined above it"
            ) from exc
    if head is None:
        raise BenchError(f"{path}: empty replay file")
    if not requests:
        raise BenchError(f"{path}: the replay holds no request")
    return ReplayRun(
        name=str(head.get("run") or path.name.split(".")[0]),
        path=str(path),
        model=head.get("model"),
        max_model_len=head.get("max_model_len"),
        compactions=int(head.get("compactions") or 0),
        requests=requests,
    )


def replay_files(paths: Sequence[Path]) -> list[Path]:
    """The files named, and the replay files in the directories named (sorted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.name.endswith(REPLAY_SUFFIXES))
            if not inside:
                raise BenchError(f"{path}: no replay files (*.jsonl, *.jsonl.gz) in it")
            found += inside
        elif path.exists():
            found.append(path)
        else:
            raise BenchError(f"{path}: no such replay file or directory")
    return found


def pick_runs(recordings: Sequence[ReplayRun], count: int | None) -> list[ReplayRun]:
    """``count`` runs from the recordings, cycled; all of them once when None."""
    n = len(recordings) if count is None else count
    return [recordings[i % len(recordings)] for i in range(n)]
