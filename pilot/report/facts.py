"""The morning report's facts: plain data, and the table cells both renderings show.

``pilot.report.build`` fills these from the store and git; ``pilot.report.markdown`` and
``pilot.report.html`` only read them. Nothing here reads the store, runs git or formats a page.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pilot.front.lines import format_duration, short_endpoint

FINISHED_STATUSES = ("succeeded", "failed", "cancelled", "limit")

# Event types another engineer may add; until then they are read as plain dicts.
COMPACTION, LOOP_DETECTED, QUESTION = "compaction", "loop_detected", "question"


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
    evidence: str = ""
    """What the phase's end was judged on (its last ``phase_evidence``)."""


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
    sandbox: str = ""
    """How the agent's commands were confined (``run_started.sandbox``; empty: not recorded)."""
    call_modes: list[str] = field(default_factory=list)
    """Per model: how its calls travelled and its answers by how their calls came."""
    call_choices: list[str] = field(default_factory=list)
    """Each call mode chosen (``call_mode_chosen``), with who chose it and why."""
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


# -- what both renderings show -------------------------------------------------------------------


def hms(value: datetime) -> str:
    """A time of day in the reader's zone."""
    return value.astimezone().strftime("%H:%M:%S")


def stamp(value: datetime) -> str:
    """A date and minute in the reader's zone."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M")


def plural(count: int, noun: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 10_000 else str(count)


def tests_text(run: RunReport) -> str:
    """The "test runs" cell: ``3 passed, 1 failed`` counts runs of test commands (the model's
    and the phase checks), not the tests inside them; "-" when there were none."""
    if not run.tests:
        return "-"
    passed = sum(1 for t in run.tests if t.passed)
    failed = len(run.tests) - passed
    return f"{passed} passed, {failed} failed" if failed else f"{passed} passed"


def change_text(run: RunReport) -> str:
    """``3 files +40 -12`` from the run's diff stat ("-" without git, "unknown" without a stat)."""
    git = run.git
    if git is None:
        return "-"
    if git.note and not git.stat:
        return "unknown"
    return f"{plural(git.files_changed, 'file')} +{git.insertions} -{git.deletions}"


def endpoint_text(run: RunReport) -> str:
    """``requests per endpoint: a:8000 12, b:8001 3`` for a routed run (or one whose requests
    went to more than one server); empty otherwise."""
    if not run.endpoint_requests or (not run.routed and len(run.endpoint_requests) < 2):
        return ""
    parts = [f"{short_endpoint(url)} {n}" for url, n in run.endpoint_requests.most_common()]
    return "requests per endpoint: " + ", ".join(parts)


def overview_rows(report: Report) -> list[list[str]]:
    """One row per run under ``OVERVIEW_COLUMNS``: the table at the top of the report."""
    rows = []
    for run in report.runs:
        rows.append(
            [
                run.run_id,
                run.workflow,
                run.status,
                f"{run.phases_succeeded}/{len(run.phases)}",
                str(run.steps),
                tests_text(run),
                str(len(run.git.commits)) if run.git else "-",
                change_text(run),
                f"{_tokens(run.prompt_tokens)} / {_tokens(run.completion_tokens)}",
                format_duration(run.wall_s),
                format_duration(run.waiting_s),
                run.next_commands[0] if run.status != "succeeded" and run.next_commands else "",
            ]
        )
    return rows


OVERVIEW_COLUMNS = [
    "run",
    "workflow",
    "outcome",
    "phases ok",
    "steps",
    "test runs",
    "commits",
    "changes",
    "tokens in / out",
    "wall",
    "waiting",
    "next",
]
