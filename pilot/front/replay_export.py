"""A stored run's requests as a replay file for ``brain bench --replay``.

The store keeps events, not request bodies, so the requests are rebuilt the way the loop built
them: the events are folded in order and, at each ``model_request``, the folded messages are
shaped as the loop shaped them (``pilot.agent.call_modes.shape_request``: the call mode in
force then, its tools or none, the history as text, the syntax it adds); at each
``compaction`` whose summary the model wrote (runs recorded before summaries were built from
the events, which send no request) the summary request is rebuilt from the replaced turns with
:func:`pilot.agent.compaction.summary_request`. The answer's recorded length
(``usage.completion_tokens``) becomes the replayed ``max_tokens``, and the time between an
answer and the next request (tools, checks, the pilot) the think time.

The file is JSONL (gzip when its name ends in ``.gz``): every distinct message once, and each
request as spans of message ids, so a 200-step run is not 200 copies of its history. The format
is written and read without ``pilot`` on the reading side (``brain`` never imports ``pilot``):

* ``{"type": "replay", "version": 1, "run": ..., "workflow": ..., "model": ..., ...}`` first;
* ``{"type": "tools", "id": 0, "tools": [...]}``: a tool list, referenced by id;
* ``{"type": "msg", "id": 7, "m": {...}}``: a message as sent;
* ``{"type": "req", "n": 0, "kind": "step"|"summary", "step": 1, "spans": [[0, 3]],
  "tools": 0, "max_tokens": 2048, "out": 57, "prompt": 912, "think": 0.012}``: ``spans`` are
  half-open id ranges, concatenated; ``choice`` (only when not ``auto``) the request's
  ``tool_choice`` (a forced answer: ``required`` or the named form); ``out`` the answer's
  recorded tokens, ``prompt`` the prompt tokens the server counted then, ``think`` seconds
  before this request was sent.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pilot.errors import ConfigurationError
from pilot.front.completion import run_id_argument

if TYPE_CHECKING:
    from pilot.store.event_store import EventStore

REPLAY_VERSION = 1


def _key(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _spans(ids: Sequence[int]) -> list[list[int]]:
    """Consecutive ids as half-open ranges: [0,1,2,5,6] -> [[0,3],[5,7]]."""
    spans: list[list[int]] = []
    for i in ids:
        if spans and spans[-1][1] == i:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
    return spans


class _Writer:
    """Numbers messages and tool lists the first time they appear."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._messages: dict[str, int] = {}
        self._tools: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []

    def message_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        ids = []
        for message in messages:
            key = _key(message)
            known = self._messages.get(key)
            if known is None:
                known = self._messages[key] = len(self._messages)
                self.lines.append({"type": "msg", "id": known, "m": message})
            ids.append(known)
        return ids

    def tools_id(self, tools: list[dict[str, Any]] | None) -> int | None:
        if not tools:
            return None
        key = _key({"tools": tools})
        known = self._tools.get(key)
        if known is None:
            known = self._tools[key] = len(self._tools)
            self.lines.append({"type": "tools", "id": known, "tools": tools})
        return known

    def request(self, **fields: Any) -> dict[str, Any]:
        line = {"type": "req", "n": len(self.requests), **fields}
        self.requests.append(line)
        self.lines.append(line)
        return line


def export_run(store: EventStore, run_id: str, *, source: str = "") -> list[dict[str, Any]]:
    """The replay lines of one stored run (see the module docstring for the format)."""
    from pilot import events as ev
    from pilot.agent import call_modes
    from pilot.agent.compaction import summary_request
    from pilot.agent.context import SUMMARY_MAX_TOKENS, Budget
    from pilot.agent.state import RunState
    from pilot.run.launch import load_stored
    from pilot.tactics.small_models import SmallModelTactics
    from tools.registry import default_registry

    record = store.find_run(run_id)
    loaded, _ = load_stored(record)
    workflow = loaded.workflow
    registry = default_registry()
    state = RunState()
    out = _Writer()
    last: dict[str, Any] | None = None
    answered_at: Any = None
    phase_prompt = ""
    compactions = 0
    tactics = SmallModelTactics()  # the runner's own
    text_mode = False  # sticky, as the loop's: once a call came as text
    for event in store.load_events(record.id):
        compactions += isinstance(event, ev.Compaction)
        if isinstance(event, ev.PhaseStarted):
            phase_prompt = event.prompt
        elif isinstance(event, ev.ModelRequest):
            phase = state.phase.index if state.phase is not None else 0
            names = workflow.phase_tools(phase)
            history = state.messages[: event.messages]
            model = state.model or workflow.model.name
            text_mode = text_mode or tactics.writes_calls_as_text(history)
            shaped = call_modes.shape_request(
                history,
                registry.openai_tools(names) or None,
                call_modes.ask(state.call_book, model, workflow.model.tool_calls, names),
                tactics,
                text_mode=text_mode,
            )
            think = (event.at - answered_at).total_seconds() if answered_at is not None else 0.0
            last = out.request(
                kind="step",
                step=event.step,
                spans=_spans(out.message_ids(shaped.messages)),
                tools=out.tools_id(shaped.tools),
                **(
                    {"choice": shaped.tool_choice}
                    if shaped.tool_choice not in (None, "auto")
                    else {}
                ),
                max_tokens=event.max_tokens,
                out=None,
                prompt=None,
                think=round(max(think, 0.0), 4),
            )
        elif isinstance(event, ev.AssistantMessage) and last is not None and last["out"] is None:
            if event.usage is not None:
                last["out"] = event.usage.completion_tokens
                last["prompt"] = event.usage.prompt_tokens
            answered_at = event.at
        elif isinstance(event, ev.Compaction) and event.summary_source != "events":
            # a summary the model wrote (runs recorded before): its request is rebuilt;
            # one built from the events sent none
            window = state.max_model_len or 0
            margin = min(workflow.model.context_margin, window // 8)
            limit = Budget(
                max_model_len=window, max_tokens_wanted=1, margin=margin
            ).summary_input_tokens()
            replaced = [
                m
                for i, m in enumerate(state.messages[: event.replaced_to])
                if i not in event.pinned
            ]
            asked = summary_request(replaced, task=phase_prompt, max_input_tokens=limit)
            out.request(
                kind="summary",
                step=state.steps,
                spans=_spans(out.message_ids(asked)),
                tools=None,
                max_tokens=SUMMARY_MAX_TOKENS,
                out=max(1, math.ceil(len(event.summary.encode("utf-8")) / 4)),
                prompt=None,
                think=0.0,
            )
        state.apply(event)
    if not out.requests:
        raise ConfigurationError(f"run {record.id} made no model request: nothing to replay")
    head = {
        "type": "replay",
        "version": REPLAY_VERSION,
        "run": record.id,
        "workflow": record.workflow_name,
        "model": state.model,
        "max_model_len": state.max_model_len,
        "requests": len(out.requests),
        "compactions": compactions,
        "source": source,
    }
    return [head, *out.lines]


def write_replay(lines: Sequence[dict[str, Any]], path: Path) -> None:
    """Write replay lines as JSONL, gzip-compressed when ``path`` ends in ``.gz``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(
        json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines
    )
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def _run_ids(store: EventStore, ids: Sequence[str], last: int | None) -> Iterator[str]:
    yield from ids
    if last:
        for record in store.list_runs(limit=last):
            yield record.id


def replay_export_command(
    run_ids: list[str] = run_id_argument(None, help="Run ids (any unambiguous prefix)."),
    last: int | None = typer.Option(None, "--last", help="Also the N most recent runs."),
    out_dir: Path = typer.Option(Path("."), "--out", "-o", help="Directory for the files."),
    db: str | None = typer.Option(None, "--db", envvar="MARATHON_DB", help="Store URL or path."),
    source: str = typer.Option("", "--source", help="A note on how the runs were made."),
) -> None:
    """Write runs' requests as replay files (<run>.jsonl.gz) for `brain bench --replay`."""
    from rich.console import Console

    from pilot.errors import MarathonError
    from pilot.store.event_store import EventStore

    console = Console(highlight=False)
    store = EventStore(db)
    ids = list(_run_ids(store, run_ids or [], last))
    if not ids:
        console.print("[red]give run ids or --last N[/red]")
        raise typer.Exit(2)
    for run_id in ids:
        try:
            lines = export_run(store, run_id, source=source)
        except MarathonError as exc:
            console.print(f"[red]{run_id}:[/red] {exc}")
            raise typer.Exit(1) from None
        path = out_dir / f"{lines[0]['run']}.jsonl.gz"
        write_replay(lines, path)
        console.print(
            f"{path}: {lines[0]['requests']} requests, {lines[0]['compactions']} compaction(s)"
        )


def register(app: typer.Typer) -> None:
    """Add ``replay-export`` to the ``pilot`` app."""
    app.command("replay-export")(replay_export_command)
