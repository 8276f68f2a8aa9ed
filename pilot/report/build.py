"""The morning report: what each run did, built only from recorded facts.

Everything here comes from the store (the run's events, its row, the brain's server events) and
from git (the work branch's commits and the snapshots' diff). Nothing is asked of the model and
nothing the model said about itself is taken as an outcome: a phase "succeeded" because a
``phase_finished`` event says so after its check passed, not because the model claimed it.

``build_report`` gathers the facts into plain data (``Report``); ``render_markdown`` and
``pilot.report.html.render_html`` turn that data into text. This module must not write to the
store or the workspace.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pilot import environ
from pilot import events as ev
from pilot.store import queries
from pilot.store.event_store import EventStore, RunRecord, lease_holder_gone
from pilot.store.queries import StoredEvent
from pilot.ui import format_duration, short_endpoint

FINISHED_STATUSES = ("succeeded", "failed", "cancelled", "limit")

# Event types another engineer may add; until then they are read as plain dicts.
COMPACTION, LOOP_DETECTED, QUESTION = "compaction", "loop_detected", "question"

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


# -- the report's data ---------------------------------------------------------------------------


@dataclass
class CheckResult:
    phase: int
    phase_name: str
    attempt: int
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_head: list[str]
    at: datetime


@dataclass
class PhaseReport:
    index: int
    name: str
    outcome: str = "not started"
    """succeeded / failed / limit from ``phase_finished``; "in progress" or "not started"."""
    reason: str = ""
    summary: str = ""
    steps: int = 0
    tokens: int = 0
    check_attempts: int = 0
    checks_passed: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass
class TestRun:
    __test__ = False  # not a pytest test class

    source: str
    """"tool" (the model ran it with the run tool) or "check" (the phase check)."""
    command: str
    exit_code: int | None
    passed: bool
    timed_out: bool
    at: datetime
    step: int | None = None


@dataclass
class ToolStats:
    name: str
    calls: int = 0
    errors: int = 0
    not_executed: int = 0


@dataclass
class ToolFailure:
    step: int | None
    name: str
    first_line: str
    at: datetime


@dataclass
class Interval:
    start: datetime
    end: datetime
    label: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())


@dataclass
class ServerNote:
    at: datetime
    source: str
    """"run" (the run saw it: server_unavailable / server_back) or the brain's server name."""
    type: str
    detail: str


@dataclass
class Commit:
    sha: str
    subject: str


@dataclass
class GitFacts:
    workspace: str
    branch: str
    base_head: str | None = None
    head: str | None = None
    """The work branch's head as last recorded by the run."""
    branch_tip: str | None = None
    """Where the branch points now (it may have moved since the run)."""
    commits: list[Commit] = field(default_factory=list)
    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0
    stat: str = ""
    note: str = ""
    """Why commits or the diff are missing (workspace deleted, no snapshots, git error)."""


@dataclass
class OtherEvent:
    at: datetime
    type: str
    detail: str


@dataclass
class RunReport:
    run_id: str
    workflow: str
    status: str
    """The outcome: succeeded/failed/cancelled/limit, paused, running, interrupted, or the row's."""
    reason: str
    record_status: str
    created_at: datetime
    first_at: datetime | None = None
    last_at: datetime | None = None
    model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    git: GitFacts | None = None
    phases: list[PhaseReport] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    tests: list[TestRun] = field(default_factory=list)
    tools: list[ToolStats] = field(default_factory=list)
    tool_failures: list[ToolFailure] = field(default_factory=list)
    interrupted_tools: list[str] = field(default_factory=list)
    repairs: list[tuple[int, str]] = field(default_factory=list)
    nudges: Counter[str] = field(default_factory=Counter)
    restores: list[str] = field(default_factory=list)
    event_counts: Counter[str] = field(default_factory=Counter)
    unknown_events: list[OtherEvent] = field(default_factory=list)
    unreadable_events: int = 0
    server_notes: list[ServerNote] = field(default_factory=list)
    server_restarts: int = 0
    server_deaths: int = 0
    downtime: list[Interval] = field(default_factory=list)
    """The brain's record: from a death/stop/restart to the next ``ready``, inside the run."""
    waiting: list[Interval] = field(default_factory=list)
    """The run's record: from ``server_unavailable`` to ``server_back`` (or to the pause)."""
    pauses: list[Interval] = field(default_factory=list)
    """Gaps where no process drove the run (paused or crashed, until resumed)."""
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    active_s: float = 0.0
    waiting_s: float = 0.0
    endpoint_requests: Counter[str] = field(default_factory=Counter)
    """Answered requests per server (``assistant_message.endpoint``), when recorded."""
    routed: bool = False
    """The run was routed over several endpoints (``model.endpoints``)."""
    endpoints: list[str] = field(default_factory=list)
    """The servers the run was given (its ``run_started`` endpoint and endpoints)."""
    step_times: list[datetime] = field(default_factory=list)
    phase_marks: list[tuple[datetime, str]] = field(default_factory=list)
    next_commands: list[str] = field(default_factory=list)

    @property
    def working_s(self) -> float:
        return max(0.0, self.active_s - self.waiting_s)

    @property
    def downtime_s(self) -> float:
        return sum(i.seconds for i in self.downtime)

    @property
    def compactions(self) -> int:
        return self.event_counts[COMPACTION]

    @property
    def loops_caught(self) -> int:
        return self.event_counts[LOOP_DETECTED]

    @property
    def questions(self) -> list[OtherEvent]:
        return [e for e in self.unknown_events if e.type == QUESTION]

    @property
    def phases_succeeded(self) -> int:
        return sum(1 for p in self.phases if p.outcome == "succeeded")

    @property
    def unfinished(self) -> bool:
        return self.status not in FINISHED_STATUSES


@dataclass
class Report:
    generated_at: datetime
    runs: list[RunReport]
    since: datetime | None = None
    db_option: str = ""
    """`` --db URL`` when the store is not the default one, for the commands to copy."""


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
        params={k: v for k, v in record.params.items() if not k.startswith("__")},
    )
    _Folder(report).feed(stored)
    if stored:
        report.first_at, report.last_at = stored[0].at, stored[-1].at
        report.wall_s = (stored[-1].at - stored[0].at).total_seconds()
        _brain_events(store, report)
    _outcome(report, record, stored)
    report.next_commands = _next_commands(report, db_option)
    return report


class _Folder:
    """One pass over the events, filling the report (the report's own fold)."""

    def __init__(self, report: RunReport) -> None:
        self.r = report
        self.started: ev.RunStarted | None = None
        self.phases: dict[int, PhaseReport] = {}
        self.current: PhaseReport | None = None
        self.calls: dict[str, tuple[str, str, int]] = {}
        self.tools: dict[str, ToolStats] = {}
        self.open_tools: dict[str, str] = {}
        self.head: str | None = None
        self.snapshot: str | None = None
        self.wait_start: datetime | None = None
        self.segment_start: datetime | None = None
        self.segment_end: datetime | None = None
        self.last_at: datetime | None = None

    def feed(self, stored: Iterable[StoredEvent]) -> None:
        r = self.r
        for row in stored:
            if self.last_at is None and row.type not in ("run_started", "run_resumed"):
                self._open_segment(row.at)  # a run recorded without its start: count from here
            r.event_counts[row.type] += 1
            if row.event is None:
                if row.error:
                    r.unreadable_events += 1
                r.unknown_events.append(OtherEvent(row.at, row.type, _payload_detail(row.payload)))
                self.last_at = row.at
                continue
            self.apply(row.event)
            self.last_at = row.at
        self.close()

    def apply(self, event: ev.Event) -> None:
        r = self.r
        match event:
            case ev.RunStarted():
                self.started = event
                r.routed = r.routed or bool(event.endpoints)
                for url in (event.endpoint, *event.endpoints):
                    if url not in r.endpoints:
                        r.endpoints.append(url)
                self.head, self.snapshot = event.base_head, event.base_snapshot
                for index, name in enumerate(event.phases):
                    self.phases.setdefault(index, PhaseReport(index=index, name=name))
                self._open_segment(event.at)
            case ev.RunResumed():
                self._open_segment(event.at)
            case ev.ModelResolved():
                r.model = event.model
            case ev.PhaseStarted():
                phase = self.phases.setdefault(
                    event.index, PhaseReport(index=event.index, name=event.name)
                )
                phase.outcome, phase.started_at = "in progress", event.at
                self.current = phase
                r.phase_marks.append((event.at, event.name))
            case ev.AssistantMessage():
                r.steps += 1
                r.step_times.append(event.at)
                if event.endpoint:
                    r.endpoint_requests[event.endpoint] += 1
                if event.usage is not None:
                    r.prompt_tokens += event.usage.prompt_tokens
                    r.completion_tokens += event.usage.completion_tokens
                if self.current is not None:
                    self.current.steps += 1
                    if event.usage is not None:
                        self.current.tokens += (
                            event.usage.prompt_tokens + event.usage.completion_tokens
                        )
                for call in event.tool_calls:
                    self.calls[call.id] = (call.name, call.arguments, event.step)
                r.repairs.extend((event.step, repair) for repair in event.repairs)
            case ev.ToolStarted():
                self.open_tools[event.call_id] = event.name
            case ev.ToolFinished():
                self._tool_finished(event)
            case ev.CheckFinished():
                self._check_finished(event)
            case ev.WorkspaceSnapshot():
                self.snapshot, self.head = event.snapshot, event.head or self.head
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
                self.current = None
            case ev.Question():
                # kept with the other notable events; listed under "Interventions"
                self.r.unknown_events.append(OtherEvent(event.at, QUESTION, event.text))
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
                self.snapshot, self.head = event.snapshot, event.head or self.head
                self.open_tools.clear()
                r.restores.append(event.reason)
            case ev.RunPaused() | ev.RunFinished():
                if isinstance(event, ev.RunFinished) and self.current is not None:
                    self.current.outcome = f"unfinished (run {event.status})"
                    self.current = None
                self._close_wait(event.at)
                self.segment_end = event.at
                self._close_segment()
            case _:
                pass

    def _tool_finished(self, event: ev.ToolFinished) -> None:
        r = self.r
        self.open_tools.pop(event.call_id, None)
        stats = self.tools.setdefault(event.name, ToolStats(event.name))
        stats.calls += 1
        if event.is_error:
            stats.errors += 1
        if not event.executed:
            stats.not_executed += 1
        if event.snapshot:
            self.snapshot = event.snapshot
        if event.head:
            self.head = event.head
        _name, arguments, step = self.calls.get(event.call_id, (event.name, "", None))
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
        if event.snapshot:
            self.snapshot = event.snapshot
        if event.head:
            self.head = event.head
        phase = self.phases.get(event.phase)
        name = phase.name if phase else str(event.phase)
        if phase is not None:
            phase.check_attempts = max(phase.check_attempts, event.attempt)
            phase.checks_passed += int(event.passed)
        r.checks.append(
            CheckResult(
                phase=event.phase,
                phase_name=name,
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

    def _open_segment(self, at: datetime) -> None:
        if self.segment_start is not None:
            # Resumed without a pause: the previous process died; it worked until its last event.
            self.segment_end = self.last_at
            self._close_wait(self.last_at or at)
            self._close_segment()
        if self.segment_end is not None and at > self.segment_end:
            self.r.pauses.append(Interval(self.segment_end, at, "not running"))
        self.segment_start, self.segment_end = at, None

    def _close_segment(self) -> None:
        if self.segment_start is not None and self.segment_end is not None:
            self.r.active_s += max(0.0, (self.segment_end - self.segment_start).total_seconds())
        self.segment_start = None

    def _close_wait(self, at: datetime) -> None:
        if self.wait_start is not None:
            self.r.waiting.append(Interval(self.wait_start, at, "waiting, never came back"))
            self.wait_start = None

    def close(self) -> None:
        r = self.r
        if self.last_at is not None:
            self._close_wait(self.last_at)
            if self.segment_start is not None:
                self.segment_end = self.last_at
                self._close_segment()
        r.waiting_s = sum(i.seconds for i in r.waiting)
        r.phases = [self.phases[i] for i in sorted(self.phases)]
        r.tools = sorted(self.tools.values(), key=lambda t: (-t.calls, t.name))
        r.interrupted_tools = list(self.open_tools.values())
        if self.started is not None:
            r.git = _git_facts(self.started, self.head, self.snapshot)


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
                report.reason = f"driven by {record.lease_owner} (lease until {_hms(expires)})"
            else:
                report.status = "interrupted"
                when = f" (lease expired {_hms(expires)})" if expires else ""
                report.reason = (
                    "the process driving it stopped without pausing"
                    f"{when}; last event {_hms(stored[-1].at)}"
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


def plural(count: int, noun: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


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
    run's trouble."""
    start, end = report.first_at, report.last_at
    assert start is not None and end is not None
    mine = run_servers(store, report.endpoints, end)
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
    from pilot.snapshot import GitError, GitRepo

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
            numstat = repo.git("diff", "--no-ext-diff", "--numstat", base, snapshot)
            for line in numstat.splitlines():
                added, deleted, _path = line.split("\t", 2)
                facts.files_changed += 1
                facts.insertions += int(added) if added.isdigit() else 0
                facts.deletions += int(deleted) if deleted.isdigit() else 0
            # git's output is stripped; put back the first line's indent so the columns align.
            stat = repo.git("diff", "--no-ext-diff", "--stat=100", base, snapshot)
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


def _hms(value: datetime) -> str:
    return value.astimezone().strftime("%H:%M:%S")


def _stamp(value: datetime) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M")


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or combinations (``1d12h``) -> timedelta."""
    parts = re.fullmatch(r"\s*((?:\d+(?:\.\d+)?\s*[wdhms]\s*)+)", text.lower())
    if not parts:
        raise ValueError(f"cannot read the duration {text!r}; write it like 30d, 12h, 90m or 1d12h")
    units = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
    seconds = sum(
        float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)\s*([wdhms])", text.lower())
    )
    return timedelta(seconds=seconds)


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """A duration back from now (``12h``) or an ISO date/time (local time when no zone)."""
    try:
        return (now or datetime.now(UTC)) - parse_age(text)
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"cannot read --since {text!r}; give a duration (12h, 2d) or a date/time "
            "(2025-06-01 or 2025-06-01T20:00)"
        ) from None
    return value if value.tzinfo else value.astimezone()


# -- Markdown ------------------------------------------------------------------------------------


def _md(text: object) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 10_000 else str(count)


def summarize_tests(run: RunReport) -> str:
    """ "3 ok / 1 failed" over every test command and check run (or "-")."""
    if not run.tests:
        return "-"
    passed = sum(1 for t in run.tests if t.passed)
    failed = len(run.tests) - passed
    return f"{passed} ok / {failed} failed" if failed else f"{passed} ok"


def change_summary(run: RunReport) -> str:
    git = run.git
    if git is None:
        return "-"
    if git.note and not git.stat:
        return "unknown"
    return f"{plural(git.files_changed, 'file')} +{git.insertions} -{git.deletions}"


def endpoint_summary(run: RunReport) -> str:
    """``requests per endpoint: a:8000 12, b:8001 3`` for a routed run (or one whose requests
    went to more than one server); empty otherwise."""
    if not run.endpoint_requests or (not run.routed and len(run.endpoint_requests) < 2):
        return ""
    parts = [f"{short_endpoint(url)} {n}" for url, n in run.endpoint_requests.most_common()]
    return "requests per endpoint: " + ", ".join(parts)


def summary_rows(report: Report) -> list[list[str]]:
    rows = []
    for run in report.runs:
        rows.append(
            [
                run.run_id,
                run.workflow,
                run.status,
                f"{run.phases_succeeded}/{len(run.phases)}",
                str(run.steps),
                summarize_tests(run),
                str(len(run.git.commits)) if run.git else "-",
                change_summary(run),
                f"{_tokens(run.prompt_tokens)} / {_tokens(run.completion_tokens)}",
                format_duration(run.wall_s),
                format_duration(run.waiting_s),
                run.next_commands[0] if run.status != "succeeded" and run.next_commands else "",
            ]
        )
    return rows


SUMMARY_COLUMNS = [
    "run",
    "workflow",
    "outcome",
    "phases ok",
    "steps",
    "tests",
    "commits",
    "changes",
    "tokens in / out",
    "wall",
    "waiting",
    "next",
]


def render_markdown(report: Report) -> str:
    out: list[str] = []
    generated = _stamp(report.generated_at)
    if report.since is not None:
        out.append(f"# Marathon report: {len(report.runs)} run(s) since {_stamp(report.since)}")
    else:
        out.append("# Marathon report")
    out.append("")
    out.append(
        f"Generated {generated} from the run store's recorded events and git; nothing here is "
        "the model's own account."
    )
    out.append("")
    if report.since is not None or len(report.runs) > 1:
        counts = Counter(run.status for run in report.runs)
        out.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no runs")
        out.append("")
        if report.runs:
            out.append("| " + " | ".join(SUMMARY_COLUMNS) + " |")
            out.append("|" + "---|" * len(SUMMARY_COLUMNS))
            for row in summary_rows(report):
                out.append("| " + " | ".join(_md(c) if c else "" for c in row) + " |")
            out.append("")
    for run in report.runs:
        out.extend(_run_markdown(run))
    return "\n".join(out).rstrip() + "\n"


def _run_markdown(run: RunReport) -> list[str]:
    out = [f"## Run {run.run_id}: {run.workflow}: {run.status}", ""]
    out.append(f"**Outcome:** {run.status}" + (f": {run.reason}" if run.reason else ""))
    out.append("")
    facts = []
    if run.first_at and run.last_at:
        facts.append(f"- Time: {_stamp(run.first_at)} to {_stamp(run.last_at)}")
        facts.append(
            f"- Wall {format_duration(run.wall_s)}; driven {format_duration(run.active_s)} "
            f"(working {format_duration(run.working_s)}, waiting on the server "
            f"{format_duration(run.waiting_s)}); not running "
            f"{format_duration(max(0.0, run.wall_s - run.active_s))}"
        )
    else:
        facts.append(f"- Created {_stamp(run.created_at)}; no events recorded")
    facts.append(
        f"- Steps {run.steps}; tokens {run.prompt_tokens} in / {run.completion_tokens} out"
        + (f"; model {run.model}" if run.model else "")
    )
    if endpoints := endpoint_summary(run):
        facts.append(f"- {endpoints[0].upper()}{endpoints[1:]}")
    if run.git is not None:
        facts.append(f"- Workspace {run.git.workspace}, branch `{run.git.branch}`")
    if run.params:
        params = ", ".join(f"{k}={v}" for k, v in run.params.items())
        facts.append(f"- Params: {_md(params)}")
    out.extend([*facts, ""])

    if run.phases:
        out += ["### Phases", "", "| # | phase | outcome | steps | check attempts | note |"]
        out.append("|---|---|---|---|---|---|")
        for p in run.phases:
            note = p.reason or p.summary
            attempts = f"{p.check_attempts} ({p.checks_passed} passed)" if p.check_attempts else ""
            out.append(
                f"| {p.index + 1} | {_md(p.name)} | {p.outcome} | {p.steps} | {attempts} | "
                f"{_md(note)} |"
            )
        out.append("")
    if run.checks:
        out += ["### Checks", ""]
        for c in run.checks:
            verdict = "passed" if c.passed else ("timed out" if c.timed_out else "failed")
            out.append(
                f"- {c.phase_name} attempt {c.attempt}: `{c.command}` {verdict} "
                f"(exit {c.exit_code}, {c.duration_s:.1f}s)"
            )
            if not c.passed and c.output_head:
                out.append("")
                out.extend(f"      {line}" for line in c.output_head)
                out.append("")
        out.append("")
    if run.tests:
        out += ["### Tests run", "", "| time | by | command | result |", "|---|---|---|---|"]
        for t in run.tests:
            who = f"model (step {t.step})" if t.source == "tool" and t.step else t.source
            result = "timed out" if t.timed_out else f"exit {t.exit_code}"
            result = f"{'pass' if t.passed else 'FAIL'} ({result})"
            out.append(f"| {_hms(t.at)} | {who} | `{_md(t.command)}` | {result} |")
        out.append("")
    if run.git is not None:
        git = run.git
        out += ["### Changes", ""]
        if git.note:
            out += [f"_{git.note}_", ""]
        short = (git.base_head or "?")[:10]
        out.append(f"{len(git.commits)} commit(s) on `{git.branch}` since {short}:")
        out.extend(f"- {c.sha[:10]} {c.subject}" for c in git.commits)
        if git.branch_tip and git.head and git.branch_tip != git.head:
            out.append(
                f"- (the branch has moved since the run: now {git.branch_tip[:10]}, "
                f"run recorded {git.head[:10]})"
            )
        out.append("")
        if git.stat:
            out.append(
                "Diff of the workspace, first to last snapshot: "
                f"{plural(git.files_changed, 'file')}, +{git.insertions} -{git.deletions}"
            )
            out += ["", "```", git.stat, "```", ""]
        elif not git.note:
            out += ["No change to the workspace.", ""]
    if run.tools:
        out += ["### Tool calls", "", "| tool | calls | errors | not run |", "|---|---|---|---|"]
        for t in run.tools:
            out.append(f"| {t.name} | {t.calls} | {t.errors} | {t.not_executed} |")
        out.append("")
        for failure in run.tool_failures[:15]:
            step = f"step {failure.step} " if failure.step is not None else ""
            out.append(f"- {step}`{failure.name}` failed: {_md(failure.first_line)}")
        if len(run.tool_failures) > 15:
            out.append(f"- ... and {len(run.tool_failures) - 15} more (`pilot show {run.run_id}`)")
        if run.interrupted_tools:
            out.append(f"- started, never finished: {', '.join(run.interrupted_tools)}")
        out.append("")
    out += _harness_markdown(run)
    out += _server_markdown(run)
    if run.next_commands:
        out += ["### Next", ""]
        out.extend(f"- `{command}`" for command in run.next_commands)
        out.append("")
    return out


def _harness_markdown(run: RunReport) -> list[str]:
    out = ["### Interventions", ""]
    out.append(
        f"- Repairs of malformed tool calls: {len(run.repairs)}; compactions: {run.compactions}; "
        f"loops caught: {run.loops_caught}; questions: {len(run.questions)}; "
        f"workspace restores: {len(run.restores)}"
    )
    for step, repair in run.repairs[:10]:
        out.append(f"  - step {step}: {_md(repair)}")
    if run.nudges:
        nudges = ", ".join(f"{reason} x{n}" for reason, n in sorted(run.nudges.items()))
        out.append(f"- Nudges: {nudges}")
    for question in run.questions:
        out.append(f"- Question at {_hms(question.at)}: {_md(question.detail)}")
    others = Counter(
        e.type for e in run.unknown_events if e.type not in (QUESTION, COMPACTION, LOOP_DETECTED)
    )
    if others:
        listed = ", ".join(f"{t} x{n}" for t, n in sorted(others.items()))
        out.append(f"- Other recorded events: {listed}")
    if run.unreadable_events:
        out.append(f"- Unreadable events (kept, not interpreted): {run.unreadable_events}")
    out.append("")
    return out


def _server_markdown(run: RunReport) -> list[str]:
    if not run.server_notes and not run.downtime:
        return ["### Server", "", "No server trouble recorded.", ""]
    out = ["### Server", ""]
    out.append(
        f"Waited on the server {format_duration(run.waiting_s)} over {len(run.waiting)} "
        f"outage(s); the brain recorded {run.server_deaths} death(s), {run.server_restarts} "
        f"restart(s), downtime {format_duration(run.downtime_s)}."
    )
    out.append("")
    for note in run.server_notes[:30]:
        who = "run" if note.source == "run" else f"brain `{note.source}`"
        detail = f": {_md(note.detail)}" if note.detail else ""
        out.append(f"- {_hms(note.at)} {who} {note.type}{detail}")
    if len(run.server_notes) > 30:
        out.append(f"- ... and {len(run.server_notes) - 30} more")
    out.append("")
    return out


def render(report: Report, fmt: str) -> str:
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        from pilot.report.html import render_html

        return render_html(report)
    raise ValueError(f"unknown report format {fmt!r}; use md or html")
