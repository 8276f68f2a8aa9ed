"""The morning report, checked against runs with known events in a real SQLite file and git repo."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pilot_harness import make_repo
from sqlalchemy import insert

from brain.events import server_events
from pilot import events as ev
from pilot.front.report_cli import parse_age, parse_since
from pilot.report.build import build_report, is_test_command
from pilot.report.html import render_html
from pilot.report.markdown import render_markdown
from pilot.store.event_store import EventStore
from pilot.store.queries import stored_events
from pilot.store.schema import events as EventRow
from pilot.workspace.snapshot import GitRepo, start_work_branch, take_snapshot

T0 = datetime(2025, 6, 1, 22, 0, 0, tzinfo=UTC)
CHROMIUM = Path("/usr/bin/chromium")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=U", "-c", "user.email=u@x", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


class RunWriter:
    """Writes a run's events straight through the EventStore, with chosen timestamps."""

    def __init__(self, store: EventStore, run_id: str | None = None, owner: str | None = None):
        self.store = store
        self.run_id = store.create_run(
            workflow_name="refactor",
            workflow_path="wf.yaml",
            workflow_text="name: refactor",
            params={"repo": "x"},
            workspace="",
            owner=owner,
            run_id=run_id,
        )
        self.seq = 0

    def add(self, seconds: float, event: ev.Event, **totals: object) -> None:
        self.seq += 1
        stamped = event.model_copy(update={"at": at(seconds)})
        self.store.append(self.run_id, self.seq, stamped, totals=dict(totals))

    def raw(self, seconds: float, type_: str, payload: dict) -> None:
        """An event of a type this version does not know (as a newer pilot would write it)."""
        self.seq += 1
        body = json.dumps({"type": type_, "at": at(seconds).isoformat(), **payload})
        with self.store.engine.begin() as conn:
            conn.execute(
                insert(EventRow).values(
                    run_id=self.run_id, seq=self.seq, type=type_, at=at(seconds), payload=body
                )
            )


def call(call_id: str, name: str, **arguments: object) -> ev.ToolCall:
    return ev.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def message(step: int, *calls: ev.ToolCall, tokens: tuple[int, int] = (100, 10), repairs=()):
    return ev.AssistantMessage(
        step=step,
        tool_calls=list(calls),
        usage=ev.Usage(prompt_tokens=tokens[0], completion_tokens=tokens[1]),
        repairs=list(repairs),
    )


def finished(call_id: str, name: str, output: str, **extra: object) -> ev.ToolFinished:
    return ev.ToolFinished(call_id=call_id, name=name, output=output, **extra)


def one_phase_start(workspace: GitRepo, branch: str, owner: str) -> ev.RunStarted:
    return ev.RunStarted(
        workflow="refactor",
        workspace=str(workspace.root),
        branch=branch,
        endpoint="e",
        system="",
        phases=["p"],
        owner=owner,
    )


def server_event(store: EventStore, seconds: float, type_: str, **payload: object) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            insert(server_events).values(
                server="gemma", at=at(seconds), type=type_, payload=json.dumps(payload)
            )
        )


@pytest.fixture
def store(tmp_path: Path) -> EventStore:
    return EventStore(f"sqlite:///{tmp_path / 'db' / 'marathon-test.db'}")


@pytest.fixture
def workspace(tmp_path: Path) -> GitRepo:
    return GitRepo(make_repo(tmp_path / "ws", {"a.py": "def f():\n    return 1\n"}))


def write_failed_run(store: EventStore, repo: GitRepo) -> RunWriter:
    """Two phases; a test failure, a repaired call, a server outage the brain restarted through,
    a failed then passed check, a compaction and a question (types unknown to this version), a
    pause and a resume, and a final failure."""
    w = RunWriter(store, run_id="aaaa1111")
    base_head = start_work_branch(repo, "marathon/aaaa1111")
    base = take_snapshot(repo, w.run_id, "run start")
    w.add(
        0,
        ev.RunStarted(
            workflow="refactor",
            workspace=str(repo.root),
            branch="marathon/aaaa1111",
            base_head=base_head,
            base_snapshot=base,
            endpoint="http://127.0.0.1:8000/v1",
            system="sys",
            phases=["implement", "verify"],
            owner="host:1:a",
        ),
        status="running",
    )
    w.add(1, ev.ModelResolved(model="gemma", max_model_len=8192))
    w.add(2, ev.PhaseStarted(index=0, name="implement", prompt="go"), phase="implement")
    w.add(5, message(1, call("c1", "run", command="pytest -q tests")))
    w.add(6, ev.ToolStarted(call_id="c1", name="run", mutates=True))
    w.add(8, finished("c1", "run", "exit code: 1\nFAILED tests/test_a.py::test_f"))
    (repo.root / "a.py").write_text("def f():\n    return 2\n")
    git(repo.root, "commit", "-qam", "Return 2 from f")
    snap1 = take_snapshot(repo, w.run_id, "after edit")
    head1 = repo.head()
    w.add(
        10,
        message(2, call("c2", "edit_file", path="a.py"), tokens=(200, 20), repairs=["trailing ,"]),
    )
    w.add(11, finished("c2", "edit_file", "edited a.py", snapshot=snap1, head=head1))
    w.add(12, ev.ServerAway(error="connection refused", attempt=1))
    w.add(20, ev.ServerAway(error="connection refused", attempt=2))
    w.add(72, ev.ServerBack(waited_s=60.0, attempts=3))
    w.add(75, message(3, call("c3", "finish", summary="done"), tokens=(300, 30)))
    w.add(76, finished("c3", "finish", "ok"))
    w.add(77, ev.CheckStarted(phase=0, attempt=1, command="make test"))
    w.add(
        80,
        ev.CheckFinished(
            phase=0,
            attempt=1,
            command="make test",
            exit_code=2,
            passed=False,
            output="E   assert 1 == 2\nE   + where 1 = f()\n",
            duration_s=3.0,
        ),
    )
    w.add(90, message(4, call("c4", "run", command="python -m pytest -q")))
    w.add(92, finished("c4", "run", "exit code: 0\n1 passed"))
    w.add(93, message(5, call("c5", "finish", summary="done")))
    w.add(94, finished("c5", "finish", "ok"))
    w.add(
        96,
        ev.CheckFinished(
            phase=0,
            attempt=2,
            command="make test",
            exit_code=0,
            passed=True,
            output="ok",
            duration_s=2.5,
        ),
    )
    w.add(
        97,
        ev.PhaseFinished(index=0, name="implement", outcome="succeeded", summary="f returns 2"),
    )
    w.add(98, ev.PhaseStarted(index=1, name="verify", prompt="check"), phase="verify")
    w.raw(100, "compaction", {"before_tokens": 9000, "after_tokens": 2000})
    w.raw(101, "question", {"question": "Should I delete the legacy module?"})
    w.add(102, message(6, call("c6", "read_file", path="gone.py")))
    w.add(103, finished("c6", "read_file", "no such file: gone.py", is_error=True))
    w.add(110, ev.RunPaused(reason="stop requested (signal); resume to continue"), status="paused")
    w.add(1000, ev.RunResumed(owner="host:2:b"), status="running")
    w.add(1010, message(7))
    w.add(1020, ev.RunFinished(status="failed", reason="phase verify: no progress"))
    # The brain: one death and restart inside the run, one event before and one after it.
    server_event(store, -86400, "ready")
    server_event(store, 11, "died", summary="process exited with code 137")
    server_event(store, 12, "restarting", delay_s=1.0)
    server_event(store, 13, "starting", attempt=2)
    server_event(store, 70, "ready", attempt=2)
    server_event(store, 5000, "died", summary="after the run")
    return w


def test_report_of_a_failed_run_counts_exactly_what_was_recorded(
    store: EventStore, workspace: GitRepo
) -> None:
    write_failed_run(store, workspace)
    report = build_report(store, ["aaaa"])
    (run,) = report.runs
    assert (run.run_id, run.status, run.reason) == (
        "aaaa1111",
        "failed",
        "phase verify: no progress",
    )
    assert [
        (p.name, p.outcome, p.steps, p.check_attempts, p.checks_passed) for p in run.phases
    ] == [
        ("implement", "succeeded", 5, 2, 1),
        ("verify", "unfinished (run failed)", 2, 0, 0),
    ]
    assert [(c.attempt, c.passed, c.exit_code, c.output_head) for c in run.checks] == [
        (1, False, 2, ["E   assert 1 == 2", "E   + where 1 = f()"]),
        (2, True, 0, ["ok"]),
    ]
    assert [(t.source, t.command, t.exit_code, t.passed, t.step) for t in run.tests] == [
        ("tool", "pytest -q tests", 1, False, 1),
        ("check", "make test", 2, False, None),
        ("tool", "python -m pytest -q", 0, True, 4),
        ("check", "make test", 0, True, None),
    ]
    assert [(t.name, t.calls, t.errors) for t in run.tools] == [
        ("finish", 2, 0),
        ("run", 2, 0),
        ("edit_file", 1, 0),
        ("read_file", 1, 1),
    ]
    assert [(f.step, f.name, f.first_line) for f in run.tool_failures] == [
        (6, "read_file", "no such file: gone.py")
    ]
    assert run.repairs == [(2, "trailing ,")]
    assert (run.compactions, run.loops_caught) == (1, 0)
    assert [q.detail for q in run.questions] == ["Should I delete the legacy module?"]
    assert (run.steps, run.prompt_tokens, run.completion_tokens) == (7, 1000, 100)
    # Time: 1020 s wall; driven 110 + 20 s; waiting from the first server_unavailable to back.
    assert (run.wall_s, run.active_s, run.waiting_s, run.working_s) == (1020, 130, 60, 70)
    assert [(p.start, p.end) for p in run.pauses] == [(at(110), at(1000))]
    # The brain's rows inside the window only: died at 11, ready again at 70.
    assert (run.server_deaths, run.server_restarts, run.downtime_s) == (1, 1, 59)
    assert [(n.source, n.type) for n in run.server_notes] == [
        ("gemma", "died"),
        ("run", "server_unavailable"),
        ("gemma", "restarting"),
        ("gemma", "starting"),
        ("run", "server_unavailable"),
        ("gemma", "ready"),
        ("run", "server_back"),
    ]
    git = run.git
    assert git is not None and git.note == ""
    assert [c.subject for c in git.commits] == ["Return 2 from f"]
    assert (git.files_changed, git.insertions, git.deletions) == (1, 1, 1)
    assert "a.py | 2 +-" in git.stat
    db = f" --db {store.url}"
    assert run.next_commands == [f"pilot show aaaa1111{db}", f"pilot diff aaaa1111{db}"]


def test_markdown_report_states_the_facts(store: EventStore, workspace: GitRepo) -> None:
    write_failed_run(store, workspace)
    text = render_markdown(build_report(store, ["aaaa1111"]))
    assert "## Run aaaa1111: refactor: failed" in text
    assert "**Outcome:** failed: phase verify: no progress" in text
    assert "| 1 | implement | succeeded | 5 | 2 (1 passed) | f returns 2 |" in text
    assert "- implement attempt 1: `make test` failed (exit 2, 3.0s)" in text
    assert "      E   assert 1 == 2" in text
    assert "| model (step 1) | `pytest -q tests` | FAIL (exit 1) |" in text
    assert "| model (step 4) | `python -m pytest -q` | pass (exit 0) |" in text
    assert "| read_file | 1 | 1 | 0 |" in text
    assert "- step 6 `read_file` failed: no such file: gone.py" in text
    assert (
        "- Wall 17m00s; driven 2m10s (working 1m10s, waiting on the server 1m00s); "
        "not running 14m50s"
    ) in text
    assert "- Steps 7; tokens 1000 in / 100 out; model gemma" in text
    assert (
        "- Repairs of malformed tool calls: 1; compactions: 1; loops caught: 0; questions: 1; "
        "workspace restores: 0"
    ) in text
    assert ": Should I delete the legacy module?" in text
    assert (
        "Waited on the server 1m00s over 1 outage(s); the brain recorded 1 death(s), "
        "1 restart(s), downtime 59s."
    ) in text
    assert "brain `gemma` died: process exited with code 137" in text
    assert "1 commit(s) on `marathon/aaaa1111`" in text
    assert "Diff of the workspace, first to last snapshot: 1 file, +1 -1" in text
    assert f"- `pilot diff aaaa1111 --db {store.url}`" in text


def test_unknown_event_types_do_not_break_loading(store: EventStore, workspace: GitRepo) -> None:
    write_failed_run(store, workspace)
    with pytest.raises(Exception, match="compaction"):
        store.load_events("aaaa1111")
    rows = stored_events(store, "aaaa1111")
    unknown = [(r.seq, r.type, r.payload.get("before_tokens")) for r in rows if r.event is None]
    assert unknown[0] == (23, "compaction", 9000)
    assert [r.type for r in rows if r.event is None] == ["compaction", "question"]


def test_paused_run_while_waiting_counts_the_wait_until_the_pause_and_says_how_to_resume(
    store: EventStore,
) -> None:
    w = RunWriter(store, run_id="bbbb2222")
    w.add(0, ev.PhaseStarted(index=0, name="only", prompt="go"))
    w.add(10, message(1, tokens=(50, 5)))
    w.add(20, ev.ServerAway(error="503", attempt=1))
    w.add(320, ev.RunPaused(reason="model server unavailable: gave up"), status="paused")
    (run,) = build_report(store, ["bbbb"]).runs
    assert (run.status, run.reason) == ("paused", "model server unavailable: gave up")
    assert (run.waiting_s, run.active_s, run.working_s) == (300, 320, 20)
    db = f" --db {store.url}"
    assert run.next_commands == [f"pilot resume bbbb2222{db}", f"pilot show bbbb2222{db}"]


def test_crashed_run_is_reported_as_interrupted_with_the_resume_command(
    store: EventStore, workspace: GitRepo
) -> None:
    w = RunWriter(store, run_id="cccc3333", owner="otherhost:99:x")
    w.add(
        0,
        one_phase_start(workspace, "marathon/cccc3333", "otherhost:99:x"),
        status="running",
        lease_expires_at=at(60),
    )
    w.add(30, message(1))
    (run,) = build_report(store, ["cccc3333"]).runs
    assert run.status == "interrupted"
    assert run.reason.startswith("the process driving it stopped without pausing")
    assert run.active_s == 30
    assert run.next_commands[0] == f"pilot resume cccc3333 --db {store.url}"


def test_deleted_workspace_is_reported_not_fatal(store: EventStore, workspace: GitRepo) -> None:
    write_failed_run(store, workspace)
    shutil.rmtree(workspace.root)
    (run,) = build_report(store, ["aaaa1111"]).runs
    assert run.git is not None and run.git.commits == []
    assert run.git.note == (
        f"workspace {workspace.root} no longer exists; commits and diff are not available"
    )
    text = render_markdown(build_report(store, ["aaaa1111"]))
    assert f"_workspace {workspace.root} no longer exists" in text


def test_since_report_has_a_summary_table_of_every_run_active_in_the_window(
    store: EventStore, workspace: GitRepo
) -> None:
    write_failed_run(store, workspace)
    w = RunWriter(store, run_id="dddd4444")
    w.add(0, ev.PhaseStarted(index=0, name="only", prompt="go"))
    w.add(5, ev.RunFinished(status="succeeded"))
    old = RunWriter(store, run_id="eeee5555")
    old.add(-7200, ev.RunFinished(status="succeeded"))
    report = build_report(store, since=at(-60), now=at(2000))
    assert [r.run_id for r in report.runs] == ["aaaa1111", "dddd4444"]
    text = render_markdown(report)
    assert "1 failed, 1 succeeded" in text
    assert (
        "| aaaa1111 | refactor | failed | 1/2 | 7 | 2 passed, 2 failed | 1 | 1 file +1 -1 | "
        f"1000 / 100 | 17m00s | 1m00s | pilot show aaaa1111 --db {store.url} |"
    ) in text
    assert "| dddd4444 | refactor | succeeded | 0/1 | 0 | - | - | - | 0 / 0 | 5s | 0s |  |" in text


def test_the_overview_counts_test_runs_not_tests(store: EventStore, workspace: GitRepo) -> None:
    """Four runs of test commands (two by the model, two phase checks), each holding tests of
    its own: the cell counts the runs, under a header that says so ("tests 2 ok" read as two
    tests)."""
    write_failed_run(store, workspace)
    report = build_report(store, since=at(-60), now=at(2000))
    (run,) = report.runs
    assert [t.passed for t in run.tests] == [False, False, True, True]
    text = render_markdown(report)
    assert "| run | workflow | outcome | phases ok | steps | test runs | commits |" in text
    assert "| 2 passed, 2 failed |" in text and " ok / " not in text
    assert "<th>test runs</th>" in render_html(report)


@pytest.mark.parametrize(
    ("command", "is_test"),
    [
        ("pytest -q", True),
        ("cd pkg && python3 -m pytest tests/", True),
        (".venv/bin/pytest -x", True),
        ("python -m unittest discover", True),
        ("npm test", True),
        ("npm run test -- --watch=false", True),
        ("cargo test --all", True),
        ("go test ./...", True),
        ("make test", True),
        ("make -C sub test", True),
        ("cat pytest.ini", False),
        ("git log", False),
        ("ls tests", False),
        ("make build", False),
        ("FOO=1 uv run pytest -k x", True),
        ("timeout 60 go test ./... 2>&1 | tail", True),
        ("grep -r pytest .", False),
    ],
)
def test_test_commands_are_recognised(command: str, is_test: bool) -> None:
    assert is_test_command(command) is is_test


def test_durations_and_since() -> None:
    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("1d12h") == timedelta(hours=36)
    assert parse_since("12h", now=T0) == T0 - timedelta(hours=12)
    assert parse_since("2025-06-01T20:00:00+00:00") == at(-7200)
    with pytest.raises(ValueError, match="12h"):
        parse_since("yesterday")


def test_html_report_is_self_contained_with_a_timeline(
    store: EventStore, workspace: GitRepo
) -> None:
    write_failed_run(store, workspace)
    page = render_html(build_report(store, ["aaaa1111"]))
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "<script" not in page and "<link" not in page
    assert 'data-run="aaaa1111" data-steps="7"' in page
    assert page.count('class="waiting"') == 1
    assert page.count('class="downtime"') == 1
    assert page.count('class="paused"') == 1
    assert page.count('class="phase"') == 2
    assert "Should I delete the legacy module?" in page


def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")
def test_html_report_renders_in_headless_chromium(
    store: EventStore, workspace: GitRepo, tmp_path: Path
) -> None:
    write_failed_run(store, workspace)
    page = tmp_path / "report.html"
    page.write_text(render_html(build_report(store, since=at(-60), now=at(2000))))
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<svg class="timeline"' in dom.stdout
    assert 'data-steps="7"' in dom.stdout
    assert "<polyline" in dom.stdout and 'class="downtime"' in dom.stdout
    assert "Run aaaa1111: refactor" in dom.stdout
    shot = tmp_path / "report.png"
    result = _chromium([f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri()], tmp_path)
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    image = pytest.importorskip("PIL.Image").open(shot).convert("RGB")
    colors = {color for _count, color in image.getcolors(maxcolors=1 << 20)}
    # The step line's blue and the phase markers' purple were painted somewhere on the page.
    assert (9, 105, 218) in colors
    assert (130, 80, 223) in colors


def test_pilot_report_command_writes_markdown_and_html(
    store: EventStore, workspace: GitRepo, tmp_path: Path
) -> None:
    import typer
    from typer.testing import CliRunner

    from pilot.front.report_cli import register

    app = typer.Typer()
    register(app)
    write_failed_run(store, workspace)
    result = CliRunner().invoke(app, ["report", "aaaa", "--db", store.url])
    assert result.exit_code == 0, result.output
    assert "## Run aaaa1111: refactor: failed" in result.output
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        app, ["report", "--since", "100000d", "--format", "html", "-o", str(out), "--db", store.url]
    )
    assert result.exit_code == 0, result.output
    assert 'data-run="aaaa1111"' in out.read_text()
    result = CliRunner().invoke(app, ["report", "--db", store.url])
    assert result.exit_code == 2
    assert "give either a RUN id or --since" in result.output


def test_server_events_are_matched_to_the_runs_own_endpoint(
    store: EventStore, workspace: GitRepo
) -> None:
    """A server on another port (another fleet's) dying during the run is not this run's
    trouble: no death, no red band, no note; the run's own server (port 8000) still counts."""
    write_failed_run(store, workspace)
    with store.engine.begin() as conn:
        for seconds, type_, payload in (
            (-5000, "starting", {"port": 8001}),
            (-4990, "ready", {}),
            (300, "died", {"summary": "exit 137"}),
        ):
            conn.execute(
                insert(server_events).values(
                    server="other-fleet-r0", at=at(seconds), type=type_, payload=json.dumps(payload)
                )
            )
        conn.execute(
            insert(server_events).values(
                server="gemma", at=at(-90000), type="starting", payload=json.dumps({"port": 8000})
            )
        )
    (run,) = build_report(store, ["aaaa"]).runs
    assert (run.server_deaths, run.server_restarts, run.downtime_s) == (1, 1, 59)
    assert all(n.source != "other-fleet-r0" for n in run.server_notes)
    html = render_html(build_report(store, ["aaaa"]))
    assert "other-fleet-r0" not in html


def test_phase_labels_started_close_together_get_their_own_rows() -> None:
    from pilot.report.html import label_rows

    marks = [(at(0), "implement"), (at(1), "verify"), (at(2), "docs"), (at(500), "late")]
    rows = label_rows(marks, lambda t: (t - at(0)).total_seconds())
    assert rows == [0, 1, 2, 0]


def test_one_file_is_one_file() -> None:
    from pilot.report.facts import plural

    assert (plural(1, "file"), plural(2, "file"), plural(0, "file")) == (
        "1 file",
        "2 files",
        "0 files",
    )


def test_the_report_reads_its_counts_from_the_state_fold(
    store: EventStore, workspace: GitRepo
) -> None:
    """One fold: the report's steps, tokens, phase counts and driven time are the state's
    (``pilot.agent.state.fold``, what a resume continues from), not counted a second time."""
    import ast

    from pilot.agent.state import fold

    w = RunWriter(store, run_id="abab1212")
    w.add(0, one_phase_start(workspace, "b", "h:1:a"))
    w.add(1, ev.PhaseStarted(index=0, name="p", prompt="go"))
    w.add(5, message(1, call("c1", "run", command="pytest"), tokens=(120, 12)))
    w.add(6, ev.RunPaused(reason="signal"))
    w.add(100, ev.RunResumed(owner="h:2:b"))
    w.add(104, message(2, tokens=(300, 30)))
    w.add(107, ev.RunFinished(status="failed", reason="limit"))
    state = fold(store.load_events("abab1212"))
    (run,) = build_report(store, ["abab1212"]).runs
    assert (
        (run.steps, run.prompt_tokens, run.completion_tokens)
        == (state.steps, state.prompt_tokens, state.completion_tokens)
        == (2, 420, 42)
    )
    assert run.active_s == state.active_seconds == 13
    assert (run.phases[0].steps, run.phases[0].tokens) == (2, 462)
    assert [(p.start, p.end) for p in run.pauses] == [(at(6), at(100))]
    assert run.phases[0].outcome == "unfinished (run failed)"
    # The renderings read the facts only (no import loop back into the building).
    package = Path(__file__).resolve().parent.parent / "pilot" / "report"
    for name in ("html.py", "markdown.py"):
        tree = ast.parse((package / name).read_text(encoding="utf-8"))
        wings = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pilot.report")
        }
        assert wings == {"pilot.report.facts"}, name


def test_a_replica_the_run_never_asked_is_not_its_server(store: EventStore) -> None:
    """A routed run given two replicas asked only the one on port 8000: the other replica's
    death during the run draws no red band and no note; its own replica's would."""
    w = RunWriter(store, run_id="f1ee7000")
    w.add(
        0,
        ev.RunStarted(
            workflow="refactor",
            workspace="/nowhere",
            branch="b",
            endpoint="http://127.0.0.1:8000/v1",
            endpoints=["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"],
            system="",
            phases=["p"],
            owner="o",
        ),
    )
    for step in range(1, 4):
        answer = message(step).model_copy(update={"endpoint": "http://127.0.0.1:8000/v1"})
        w.add(step * 100, answer)
    with store.engine.begin() as conn:
        for server, port, died in (("fleet-r0", 8000, None), ("fleet-r1", 8001, 150)):
            rows = [(-500, "starting", {"port": port}), (-490, "ready", {})]
            if died is not None:
                rows += [(died, "died", {"summary": "exit 137"}), (died + 60, "ready", {})]
            for seconds, type_, payload in rows:
                conn.execute(
                    insert(server_events).values(
                        server=server, at=at(seconds), type=type_, payload=json.dumps(payload)
                    )
                )
    (run,) = build_report(store, ["f1ee7000"]).runs
    assert (run.server_deaths, run.downtime_s) == (0, 0)
    assert all(n.source != "fleet-r1" for n in run.server_notes)
    with store.engine.begin() as conn:
        conn.execute(
            insert(server_events).values(
                server="fleet-r0", at=at(200), type="died", payload=json.dumps({"summary": "x"})
            )
        )
    (run,) = build_report(store, ["f1ee7000"]).runs
    assert run.server_deaths == 1 and run.downtime_s == 100
