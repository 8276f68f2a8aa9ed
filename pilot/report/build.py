"""The morning report's facts, built only from what was recorded.

Everything comes from the store (the run's events, its row, the brain's server events) and
from git (the work branch's commits and the snapshots' diff). Nothing is asked of the model and
nothing the model said about itself is taken as an outcome: a phase "succeeded" because a
``phase_finished`` event says so after its check passed, not because the model claimed it.

The run's events are folded once, by ``pilot.agent.state`` (the fold the loop resumes from), and its
counts are read from that state; this module adds only the report's lists of what happened.
``build_report`` returns ``pilot.report.facts.Report``; ``pilot.report.markdown`` and
``pilot.report.html`` write it out. This module must not write to the store or the workspace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pilot import environ
from pilot import events as ev
from pilot.agent import call_modes
from pilot.agent.state import RunState
from pilot.front.lines import format_duration
from pilot.report.facts import (
    QUESTION,
    CheckResult,
    Commit,
    GitFacts,
    Interval,
    OtherEvent,
    PhaseReport,
    Report,
    RunReport,
    ServerNote,
    TestRun,
    ToolFailure,
    ToolStats,
    hms,
)
from pilot.store import queries
from pilot.store.event_store import EventStore, RunRecord, lease_holder_gone
from pilot.store.queries import StoredEvent

TEST_COMMAND = re.compile(
    r"(?:\S*/)?(?:"
    r"(?:python[\d.]*\s+-m\s+)?(?:pytest|unittest)\b|py\.test\b"
    r"|(?:npm|yarn|pnpm)\s+(?:run\s+)?test\b"
    r"|cargo\s+test\b|go\s+test\b|tox\b|nox\b"
    r"|make\s+(?:\S+\s+)*?(?:test|check)\b"
    r")"
)
"""The start of a shell command (after any env assignments and wrappers) that runs tests."""

_SEGMENT_SPLIT = re.compile(r"&&|\|\||[;|&(){}\n]")
_COMMAND_PREFIX = re.compile(
    r"^(?:\s*(?:\w+=\S*|(?:uv|poetry|pipenv|hatch|pdm)\s+run|timeout\s+\S+|time|nice|exec"
    r"|env|xvfb-run|cd\s+\S+\s*(?:&&|;))\s+)*"
)


def is_test_command(command: str) -> bool:
    """Whether a shell command runs tests (pytest, unittest, npm/cargo/go/make test ...).

    Each part of a compound command (``cd x && pytest -q | tail``) is looked at from its
    command word, so ``cat pytest.ini`` is not a test run.
    """
    for segment in _SEGMENT_SPLIT.split(command):
        rest = _COMMAND_PREFIX.sub("", segment.strip())
        if TEST_COMMAND.match(rest):
            return True
    return False


_EXIT_LINE = re.compile(r"^exit code: (-?\d+)")
_SERVER_DOWN = frozenset({"died", "restarting", "starting", "gave_up", "stopped"})


# -- building ------------------------------------------------------------------------------------


def build_report(
    store: EventStore,
    run_ids: Sequence[str] | None = None,
    since: datetime | None = None,
    *,
    now: datetime | None = None,
) -> Report:
    """Facts about the named runs (any unambiguous id prefix) or those active since ``since``."""
    if (run_ids is None) == (since is None):
        raise ValueError("give run_ids or since, not both and not neither")
    db_option = environ.db_option(store.url)
    if run_ids is not None:
        records = [store.find_run(run_id) for run_id in run_ids]
    else:
        records = sorted(store.list_runs(limit=100_000, since=since), key=lambda r: r.created_at)
    runs = [build_run_report(store, record, db_option=db_option) for record in records]
    return Report(
        generated_at=now or datetime.now(UTC), runs=runs, since=since, db_option=db_option
    )


def build_run_report(store: EventStore, record: RunRecord, *, db_option: str = "") -> RunReport:
    stored = queries.stored_events(store, record.id)
    report = RunReport(
        run_id=record.id,
        workflow=record.workflow_name,
        status=record.status,
        reason=record.status_reason,
        record_status=record.status,
        created_at=record.created_at,
        params=dict(record.params),  # the user's own: launch facts are columns of the run
    )
    _History(report).read(stored)
    if stored:
        report.first_at, report.last_at = stored[0].at, stored[-1].at
        report.wall_s = (stored[-1].at - stored[0].at).total_seconds()
        _brain_events(store, report)
    _outcome(report, record, stored)
    report.next_commands = _next_commands(report, db_option)
    return report


class _History:
    """What happened, in order, taken event by event beside the one fold (``RunState.apply``).

    Every count and position comes from the folded state: steps, tokens, the time the run was
    driven, each phase's steps and tokens, the model, the head and snapshot, a tool left
    running. Kept here are only the report's lists (checks, test runs, tool failures, server
    notes, waits, pauses, phase marks), which the state has no use for.
    """

    def __init__(self, report: RunReport) -> None:
        self.r = report
        self.state = RunState()
        self.phases: dict[int, PhaseReport] = {}
        self.calls: dict[str, tuple[str, int]] = {}
        """Each call's arguments and step, for its result."""
        self.tools: dict[str, ToolStats] = {}
        self.wait_start: datetime | None = None
        self.stopped_at: datetime | None = None
        """The last pause or end: a resume after it ends a gap where nothing drove the run."""

    def read(self, stored: Iterable[StoredEvent]) -> None:
        r, state = self.r, self.state
        for row in stored:
            r.event_counts[row.type] += 1
            if row.event is None:
                if row.error:
                    r.unreadable_events += 1
                r.unknown_events.append(OtherEvent(row.at, row.type, _payload_detail(row.payload)))
                state.note_time(row.at)
                continue
            if isinstance(row.event, ev.RunStarted | ev.RunResumed):
                self._resumed(row.event.at)
            state.apply(row.event)
            self.record(row.event)
        self.close()

    def record(self, event: ev.Event) -> None:
        r, state = self.r, self.state
        match event:
            case ev.RunStarted():
                r.routed = r.routed or bool(event.endpoints)
                r.sandbox = event.sandbox or r.sandbox
                for url in (event.endpoint, *event.endpoints):
                    if url not in r.endpoints:
                        r.endpoints.append(url)
                for index, name in enumerate(event.phases):
                    self.phases.setdefault(index, PhaseReport(index=index, name=name))
            case ev.PhaseStarted():
                phase = self.phases.setdefault(
                    event.index, PhaseReport(index=event.index, name=event.name)
                )
                phase.outcome, phase.started_at = "in progress", event.at
                r.phase_marks.append((event.at, event.name))
            case ev.AssistantMessage():
                r.step_times.append(event.at)
                if event.endpoint:
                    r.endpoint_requests[event.endpoint] += 1
                if state.phase is not None and state.phase.index in self.phases:
                    phase = self.phases[state.phase.index]
                    phase.steps, phase.tokens = state.phase.steps, state.phase.tokens
                for call in event.tool_calls:
                    self.calls[call.id] = (call.arguments, event.step)
                r.repairs.extend((event.step, repair) for repair in event.repairs)
            case ev.ToolFinished():
                self._tool_finished(event)
            case ev.CheckFinished():
                self._check_finished(event)
            case ev.CallModeChosen():
                r.call_choices.append(call_modes.choice_line(event))
            case ev.PhaseEvidence():
                if event.phase in self.phases:
                    self.phases[event.phase].evidence = event.line()
            case ev.PhaseFinished():
                phase = self.phases.setdefault(
                    event.index, PhaseReport(index=event.index, name=event.name)
                )
                phase.outcome, phase.reason, phase.summary = (
                    event.outcome,
                    event.reason,
                    event.summary,
                )
                phase.finished_at = event.at
            case ev.Question():
                # kept with the other notable events; listed under "Interventions"
                r.unknown_events.append(OtherEvent(event.at, QUESTION, event.text))
            case ev.Nudge():
                r.nudges[event.reason] += 1
            case ev.ServerAway():
                if self.wait_start is None:
                    self.wait_start = event.at
                r.server_notes.append(
                    ServerNote(
                        event.at,
                        "run",
                        event.type,
                        f"attempt {event.attempt}: {_first_line(event.error)}",
                    )
                )
            case ev.ServerBack():
                start = self.wait_start or event.at - timedelta(seconds=event.waited_s)
                r.waiting.append(Interval(start, event.at, "waiting for the server"))
                self.wait_start = None
                r.server_notes.append(
                    ServerNote(
                        event.at,
                        "run",
                        event.type,
                        f"after {format_duration(event.waited_s)} and {event.attempts} attempt(s)",
                    )
                )
            case ev.WorkspaceRestored():
                r.restores.append(event.reason)
            case ev.RunPaused() | ev.RunFinished():
                if isinstance(event, ev.RunFinished) and state.phase is not None:
                    phase = self.phases.get(state.phase.index)
                    if phase is not None and phase.outcome == "in progress":
                        phase.outcome = f"unfinished (run {event.status})"
                self._close_wait(event.at)
                self.stopped_at = event.at
            case _:
                pass

    def _resumed(self, at: datetime) -> None:
        """A start or resume (before the state takes it): the gap since the run last stopped."""
        end = self.stopped_at
        if self.state.driven:  # resumed without a pause: the previous process died
            end = self.state.last_at
            self._close_wait(end or at)
        if end is not None and at > end:
            self.r.pauses.append(Interval(end, at, "not running"))
        self.stopped_at = None

    def _tool_finished(self, event: ev.ToolFinished) -> None:
        r = self.r
        stats = self.tools.setdefault(event.name, ToolStats(event.name))
        stats.calls += 1
        if event.is_error:
            stats.errors += 1
        if not event.executed:
            stats.not_executed += 1
        arguments, step = self.calls.get(event.call_id, ("", None))
        if event.is_error:
            r.tool_failures.append(
                ToolFailure(step, event.name, _first_line(event.output), event.at)
            )
        if event.name == "run" and event.executed:
            command = _command_of(arguments)
            if command and is_test_command(command):
                code = _exit_code(event.output)
                timed_out = event.is_error and code is None
                r.tests.append(
                    TestRun(
                        "tool",
                        command,
                        code,
                        code == 0 and not timed_out,
                        timed_out,
                        event.at,
                        step,
                    )
                )

    def _check_finished(self, event: ev.CheckFinished) -> None:
        r = self.r
        phase = self.phases.get(event.phase)
        if phase is not None:
            phase.check_attempts = max(phase.check_attempts, event.attempt)
            phase.checks_passed += int(event.passed)
        r.checks.append(
            CheckResult(
                phase=event.phase,
                phase_name=phase.name if phase else str(event.phase),
                attempt=event.attempt,
                command=event.command,
                passed=event.passed,
                exit_code=event.exit_code,
                timed_out=event.timed_out,
                duration_s=event.duration_s,
                output_head=_head_lines(event.output, 5),
                at=event.at,
            )
        )
        r.tests.append(
            TestRun(
                "check",
                event.command,
                event.exit_code,
                event.passed,
                event.timed_out,
                event.at,
            )
        )

    def _close_wait(self, at: datetime) -> None:
        if self.wait_start is not None:
            self.r.waiting.append(Interval(self.wait_start, at, "waiting, never came back"))
            self.wait_start = None

    def close(self) -> None:
        r, state = self.r, self.state
        last = state.last_at
        if last is not None:
            self._close_wait(last)
        r.active_s = state.elapsed_active(last) if last is not None else state.active_seconds
        r.steps, r.model = state.steps, state.model
        r.prompt_tokens, r.completion_tokens = state.prompt_tokens, state.completion_tokens
        r.waiting_s = sum(i.seconds for i in r.waiting)
        r.phases = [self.phases[i] for i in sorted(self.phases)]
        r.tools = sorted(self.tools.values(), key=lambda t: (-t.calls, t.name))
        r.interrupted_tools = [state.started_call.name] if state.started_call else []
        r.call_modes = call_modes.summary_lines(state.call_book)
        if state.started is not None:
            r.git = _git_facts(state.started, state.head, state.snapshot)


def _outcome(report: RunReport, record: RunRecord, stored: list[StoredEvent]) -> None:
    """Status and reason from the last lifecycle event; the row only when events say nothing."""
    last: ev.Event | None = None
    for row in stored:
        if isinstance(row.event, ev.RunStarted | ev.RunResumed | ev.RunPaused | ev.RunFinished):
            last = row.event
    match last:
        case ev.RunFinished():
            report.status, report.reason = last.status, last.reason
        case ev.RunPaused():
            report.status, report.reason = "paused", last.reason
        case ev.RunStarted() | ev.RunResumed():
            expires = record.lease_expires_at
            if not lease_holder_gone(replace(record, status="running")):
                report.status = "running"
                report.reason = f"driven by {record.lease_owner} (lease until {hms(expires)})"
            else:
                report.status = "interrupted"
                when = f" (lease expired {hms(expires)})" if expires else ""
                report.reason = (
                    "the process driving it stopped without pausing"
                    f"{when}; last event {hms(stored[-1].at)}"
                )
        case _ if lease_holder_gone(record):
            report.status = "interrupted"
            report.reason = "the process starting it stopped before its first event"
        case _:
            report.status, report.reason = record.status, record.status_reason


def _next_commands(report: RunReport, db_option: str) -> list[str]:
    rid = f"{report.run_id}{db_option}"
    has_diff = report.git is not None and bool(report.git.stat or report.git.commits)
    commands: list[str] = []
    if report.status in ("paused", "interrupted"):
        commands.append(f"pilot resume {rid}")
    elif report.status in ("running", "cancelling"):
        commands.append(f"pilot logs {rid} -f")
    if report.status != "succeeded":
        commands.append(f"pilot show {rid}")
    if has_diff:
        commands.append(f"pilot diff {rid}")
    return commands


def endpoint_port(url: str) -> int | None:
    """The TCP port of an endpoint URL (its scheme's default when it names none)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


def run_servers(store: EventStore, endpoints: Sequence[str], until: datetime) -> set[str] | None:
    """The brain servers a run with these endpoints talked to (matched on port), or None when
    the run names no endpoint (then every server is shown). A server whose port was never
    recorded is kept: nothing says it is another one."""
    ports = {p for p in (endpoint_port(u) for u in endpoints) if p is not None}
    if not ports:
        return None
    known = queries.server_ports(store, until)
    names = queries.server_names(store)
    return {n for n in names if known.get(n) is None or known[n] in ports}


def _brain_events(store: EventStore, report: RunReport) -> None:
    """The brain's server events inside the run's time window, of the servers the run used
    (its endpoints' ports): restarts, deaths, downtime. Another port's server is not this
    run's trouble, nor is a replica of its fleet that it was given and never asked (a routed
    run's answers say which servers it asked; without them, every endpoint it was given)."""
    start, end = report.first_at, report.last_at
    assert start is not None and end is not None
    mine = run_servers(store, list(report.endpoint_requests) or report.endpoints, end)
    down_since: dict[str, datetime] = {}
    # Was a server already down when the run began? Its latest event before the window says.
    before = queries.server_events_before(store, start, limit=200)
    seen: set[str] = set()
    for server, type_ in before:
        if server not in seen and (mine is None or server in mine):
            seen.add(server)
            if type_ in _SERVER_DOWN:
                down_since[server] = start
    for at, server, type_, payload in store.server_events(since=start, until=end):
        if mine is not None and server not in mine:
            continue
        report.server_notes.append(ServerNote(at, server, type_, _server_detail(type_, payload)))
        if type_ == "restarting":
            report.server_restarts += 1
        elif type_ == "died":
            report.server_deaths += 1
        if type_ in _SERVER_DOWN:
            down_since.setdefault(server, at)
        elif type_ == "ready" and server in down_since:
            report.downtime.append(Interval(down_since.pop(server), at, f"{server} down"))
    for server, since in down_since.items():
        report.downtime.append(Interval(since, end, f"{server} down (not back in this window)"))
    report.server_notes.sort(key=lambda n: n.at)
    report.downtime.sort(key=lambda i: i.start)


def _git_facts(started: ev.RunStarted, head: str | None, snapshot: str | None) -> GitFacts:
    from pilot.workspace.snapshot import GitError, GitRepo, snapshot_diff

    facts = GitFacts(
        workspace=started.workspace, branch=started.branch, base_head=started.base_head, head=head
    )
    root = Path(started.workspace)
    if not root.is_dir() and started.repository:
        root = Path(started.repository)  # the run's worktree was removed (pilot gc)
    if not root.is_dir():
        facts.note = f"workspace {root} no longer exists; commits and diff are not available"
        return facts
    repo = GitRepo(root)
    try:
        tip = repo.git("rev-parse", "--verify", "-q", f"refs/heads/{started.branch}", check=False)
        facts.branch_tip = tip or None
        if started.base_head and head and head != started.base_head:
            log = repo.git("log", "--format=%H%x1f%s", f"{started.base_head}..{head}")
            facts.commits = [
                Commit(*line.split("\x1f", 1)) for line in log.splitlines() if "\x1f" in line
            ]
        if started.base_snapshot and snapshot and snapshot != started.base_snapshot:
            base = started.base_snapshot
            numstat = snapshot_diff(repo, base, snapshot, "--numstat")
            for line in numstat.splitlines():
                added, deleted, _path = line.split("\t", 2)
                facts.files_changed += 1
                facts.insertions += int(added) if added.isdigit() else 0
                facts.deletions += int(deleted) if deleted.isdigit() else 0
            # git's output is stripped; put back the first line's indent so the columns align.
            stat = snapshot_diff(repo, base, snapshot, "--stat=100")
            facts.stat = f" {stat}" if stat else ""
    except (GitError, OSError) as exc:
        facts.note = f"git could not answer in {root}: {_first_line(str(exc))}"
    return facts


# -- small helpers -------------------------------------------------------------------------------


def _command_of(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return ""
    return str(value.get("command", "")) if isinstance(value, dict) else ""


def _exit_code(output: str) -> int | None:
    match = _EXIT_LINE.match(output)
    return int(match.group(1)) if match else None


def _first_line(text: str, limit: int = 160) -> str:
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _head_lines(text: str, count: int) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return [line[:200] for line in lines[:count]]


def _payload_detail(payload: dict[str, Any]) -> str:
    for key in ("question", "text", "summary", "reason", "message", "detail"):
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return _first_line(value)
    rest = {k: v for k, v in payload.items() if k not in ("type", "at")}
    return _first_line(json.dumps(rest, ensure_ascii=False, default=str), 120) if rest else ""


def _server_detail(type_: str, payload: dict[str, Any]) -> str:
    for key in ("summary", "reason", "error"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return _first_line(value, 120)
    if type_ == "restarting" and "delay_s" in payload:
        return f"in {payload['delay_s']} s"
    return ""
