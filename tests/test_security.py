"""What SECURITY.md promises about a run's record: no code from the workspace on resume, no
secret at rest in clear, a private state directory. Real runs against the simulated server."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from pilot_harness import _closing, call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.launch import load_for_run, start_run
from pilot.run.runner import Runner
from pilot.store import checkpoint
from pilot.store.event_store import EventStore

SECRETS = {
    "openai": "sk-proj-" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
    "aws_id": "AKIA" + "IOSFODNN7EXAMPLE",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "aws_secret": "wJalrXUtnFEMI" + "K7MDENGbPxRfiCYEXAMPLEKEY",
}
SECRET_FILE = (
    f"OPENAI_API_KEY={SECRETS['openai']}\n"
    f"AWS_ACCESS_KEY_ID={SECRETS['aws_id']}\n"
    f"aws_secret_access_key={SECRETS['aws_secret']}\n"
    f"GH={SECRETS['github']}\n"
)


def _paused_run_with_secrets(tmp_path: Path) -> tuple[Path, Path, str]:
    """A run that reads and prints planted secrets (also in a long output kept as an artifact
    and as a page in the workspace), then pauses. Returns (state dir, workspace, run id)."""
    home = tmp_path / "home"
    repo = make_repo(tmp_path / "repo", {"config.env": SECRET_FILE, "app.py": "VALUE = 1\n"})
    long_output = 'c=$(cat config.env); for i in $(seq 2500); do echo "$c"; done'
    script = write_script(
        tmp_path / "s.yaml",
        "secrets-at-rest",
        [
            {"tool_calls": [call("read_file", path="config.env")]},
            {"tool_calls": [call("run", command="cat config.env")]},
            {"tool_calls": [call("run", command=long_output)]},
            {
                "content": f"I saw {SECRETS['github']}",
                "tool_calls": [call("read_file", path="app.py")],
            },
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    stop = asyncio.Event()
    finished_tools = []

    def pause_after_four_tools(_run: str, _seq: int, event: ev.Event, _state: object) -> None:
        if isinstance(event, ev.ToolFinished):
            finished_tools.append(event)
            if len(finished_tools) == 4:
                stop.set()

    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="secrets-at-rest",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        store = EventStore(f"sqlite:///{home / 'marathon.db'}")
        runner = Runner(store, stop=stop, observers=[pause_after_four_tools], checkpoint_every=4)
        loaded = load_for_run(workflow, [f"repo={repo}"])
        outcome = asyncio.run(_closing(runner, start_run(runner, loaded)))
    assert outcome.status == "paused", outcome.reason
    assert any(e.truncated for e in finished_tools), "the long output was kept as an artifact"
    assert checkpoint.checkpoint_path(runner.checkpoint_dir(outcome.run_id)).exists()
    return home, repo, outcome.run_id  # the store stays open: its -wal and -shm are checked


def test_a_paused_run_leaves_no_secret_in_clear_and_its_state_directory_private(
    tmp_path: Path,
) -> None:
    home, _repo, run_id = _paused_run_with_secrets(tmp_path)
    # The run's worktree (home/worktrees/<id>) is the user's repository checked out: its files
    # are the user's, kept as git wrote them; only its folder is the state directory's.
    worktrees = home / "worktrees"
    ours = [p for p in home.rglob("*") if worktrees not in p.parents]
    files = [p for p in ours if p.is_file()]
    names = {p.name for p in files}
    assert {"marathon.db", "marathon.db-wal", "state.json"} <= names, names
    assert any(p.name.startswith("run-") for p in files), "the long output's artifact"
    pages = list((worktrees / run_id / ".marathon").rglob("*.txt"))
    for path in [*files, *pages]:
        data = path.read_bytes()
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, f"{name} in clear in {path}"
    # The redacted record still says what happened.
    assert any(b"[REDACTED:" in p.read_bytes() for p in files if p.name.startswith("marathon.db"))
    # Private: every folder 0700, every file 0600, whatever the umask.
    for path in [home, *ours]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} is {oct(mode)}"


ATTACK = r"""
import json, os, pickle, sqlite3, sys
from pathlib import Path

home, marker, once, code = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
run_id, workspace = sqlite3.connect(home / "marathon.db").execute(
    "select id, workspace from runs").fetchone()


class Boom:
    def __reduce__(self):
        return (os.system, (f"touch {marker}",))


bomb = pickle.dumps(Boom())
# The old checkpoint files beside the artifacts, and pickle in the new ones' place.
for folder in (home / "artifacts" / run_id, home / "checkpoints" / run_id):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("state.checkpoint", "state.messages", "state.json", "messages.jsonl"):
        (folder / name).write_bytes(bomb)
# A JSON checkpoint that passes every check against the store but names a class of its own.
db = sqlite3.connect(home / "marathon.db")
seq, payload = db.execute(
    "select seq, payload from events where run_id = ? order by seq desc limit 1", (run_id,)
).fetchone()
import hashlib
header = {
    "format": 5, "code": code, "run": run_id, "workspace": workspace, "seq": seq,
    "event": hashlib.sha256(payload.encode()).hexdigest(), "messages": [],
    "state": {"__t": "data", "c": "Popen", "v": {"args": f"touch {marker}"}},
}
blob = json.dumps(header).encode()  # sealed as the pilot seals its own
(home / "checkpoints" / run_id / "state.json").write_bytes(
    blob + b"\n" + hashlib.sha256(blob).hexdigest().encode()
)
if not once.exists():
    once.write_text("killed")
    os.kill(os.getppid(), 9)
"""


def test_a_planted_checkpoint_is_never_executed_and_the_resume_still_works(
    tmp_path: Path,
) -> None:
    """The agent's own `run` command plants pickles and a forged JSON checkpoint where the
    pilot keeps (and used to keep) its checkpoints, then kills the pilot: the resume runs
    none of it and finishes the run from the events."""
    home = tmp_path / "home"
    repo = make_repo(tmp_path / "repo")
    attack = tmp_path / "attack.py"
    attack.write_text(ATTACK)
    marker, once = tmp_path / "EXECUTED", tmp_path / "killed-once"
    command = f"{sys.executable} {attack} {home} {marker} {once} {checkpoint.code_digest()}"
    script = write_script(
        tmp_path / "s.yaml",
        "planted",
        [
            {"tool_calls": [call("write_file", path="a.txt", content="a\n")]},
            {"tool_calls": [call("run", command=command)]},
            {"tool_calls": [call("write_file", path="b.txt", content="b\n")]},
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    env = {
        **os.environ,
        "MARATHON_HOME": str(home),
        "MARATHON_FAILPOINT": "checkpoint_every=1",
    }
    env.pop("MARATHON_DB", None)
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="planted",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        first = subprocess.run(
            [*pilot_cmd(), "run", str(workflow), "-p", f"repo={repo}", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert first.returncode == -9, first.stderr[-2000:]
        run_id = json.loads(first.stdout.splitlines()[0])["run_id"]
        resumed = subprocess.run(
            [*pilot_cmd(), "resume", run_id, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert not marker.exists(), "a planted checkpoint ran code in pilot resume"
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    events = EventStore(f"sqlite:///{home / 'marathon.db'}").load_events(run_id)
    resumes = [e for e in events if isinstance(e, ev.RunResumed)]
    assert resumes and resumes[0].from_checkpoint is None, "the forged checkpoint was not used"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].status == "succeeded"
    assert (Path(events[0].workspace) / "b.txt").read_text() == "b\n"


PROTECTED = r"""
import json, os, sys
from pathlib import Path
from pilot.environ import protect_environment, db_option
from pilot.environ import default_db_url
from tools.base import ToolContext
from tools.shell import run_command
from tools.workspace import Workspace

protect_environment()
ctx = ToolContext(workspace=Workspace(sys.argv[1]), artifacts_dir=Path(sys.argv[2]), sandbox="none")
seen = run_command("tr '\\0' '\\n' < /proc/$PPID/environ", ctx, timeout=30)
print(json.dumps({
    "command_saw": seen.output,
    "own": Path("/proc/self/environ").read_bytes().decode(errors="replace"),
    "db_in_environ": "MARATHON_DB" in os.environ,
    "api_key": os.environ.get("OPENAI_API_KEY"),
    "default_db": default_db_url(),
    "db_option": db_option(default_db_url()),
}))
"""


def test_secrets_in_the_pilots_environment_are_not_readable_through_proc(tmp_path: Path) -> None:
    """Without the sandbox a command can read /proc/$PPID/environ: after
    protect_environment it finds neither the database password nor an API key there, while
    the pilot still has them (the key in os.environ, the URL as its store's)."""
    url = "postgresql+psycopg://app:DbPassw0rdXyz@db.example:5432/marathon"
    key = SECRETS["openai"]
    env = {**os.environ, "MARATHON_DB": url, "OPENAI_API_KEY": key, "DB_PASS": "s3cretPassXyz"}
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", PROTECTED, str(workspace), str(tmp_path / "artifacts")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    for secret in ("DbPassw0rdXyz", key, "s3cretPassXyz"):
        assert secret not in seen["command_saw"], secret
        assert secret not in seen["own"], secret
    assert "OPENAI_API_KEY=" in seen["command_saw"], "the name stays, its value is gone"
    assert seen["api_key"] == key and not seen["db_in_environ"]
    assert seen["default_db"] == url
    assert seen["db_option"] == "", "a URL from MARATHON_DB is not printed at all"


def test_a_printed_database_url_never_shows_its_password(tmp_path: Path) -> None:
    from rich.console import Console

    from pilot.agent.state import RunState
    from pilot.environ import db_option
    from pilot.front.outcome import print_outcome
    from pilot.run.outcomes import RunOutcome

    url = "postgresql+psycopg://u:SECRET@db.example:5432/marathon"
    assert db_option(url) == " --db postgresql+psycopg://u:***@db.example:5432/marathon"
    store = EventStore(f"sqlite:///{tmp_path / 'other.db'}")
    store.url = url  # what a PostgreSQL store's summary prints, without a server
    console = Console(record=True, width=200)
    print_outcome(console, store, RunOutcome("r1", "paused", "stop requested", RunState()))
    text = console.export_text()
    assert "pilot resume r1 --db postgresql+psycopg://u:***@db.example" in text
    assert "SECRET" not in text


def test_inside_the_sandbox_a_command_reaches_neither_the_pilot_nor_the_state_directory(
    tmp_path: Path,
) -> None:
    """With bwrap a command has its own PID namespace (no /proc/$PPID of the pilot) and a
    read-only file system but the workspace: it cannot plant a checkpoint."""
    import pytest

    from tools.base import ToolContext
    from tools.sandbox import bwrap_status
    from tools.shell import run_command
    from tools.workspace import Workspace

    if not bwrap_status().available and not os.environ.get("MARATHON_REQUIRE_SANDBOX"):
        pytest.skip(f"no working bwrap: {bwrap_status().reason}")
    state = tmp_path / "home" / "checkpoints" / "r1"
    state.mkdir(parents=True)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = ToolContext(
        workspace=Workspace(workspace), artifacts_dir=tmp_path / "artifacts", sandbox="bwrap"
    )
    pilot_environ = Path(f"/proc/{os.getpid()}/environ")
    script = (
        f"touch {state}/state.json; echo touch=$?; "
        f"cat {pilot_environ} > /dev/null 2>&1; echo read=$?; "
        "touch inside.txt; echo workspace=$?"
    )
    result = run_command(script, ctx, timeout=30)
    assert result.sandboxed
    assert "touch=1" in result.output and "read=1" in result.output, result.output
    assert "workspace=0" in result.output and (workspace / "inside.txt").exists()
    assert not (state / "state.json").exists()


def test_grep_and_view_image_judge_a_huge_file_by_its_size(tmp_path: Path) -> None:
    """The other file tools check sizes before reading: grep skips a file over its limit and
    says so; view_image refuses one without reading it."""
    from tools.base import ToolContext
    from tools.registry import default_registry
    from tools.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    (root / "big.txt").write_text("needle\n" * 400)
    png = root / "huge.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    os.truncate(png, 2 * 1024**3)  # sparse
    ctx = ToolContext(
        workspace=Workspace(root),
        artifacts_dir=tmp_path / "artifacts",
        settings={"grep": {"max_file_bytes": 1000}},
        sandbox="none",
    )
    registry = default_registry()
    found = registry.invoke("grep", {"pattern": "needle"}, ctx)
    assert "larger than 1,000 bytes" in found.output, found.output
    image = registry.invoke("view_image", {"path": "huge.png"}, ctx)
    assert image.is_error and "over the" in image.output and "limit for images" in image.output


def test_a_report_prints_the_database_url_masked(tmp_path: Path) -> None:
    from pilot.report.build import build_report

    store = EventStore(f"sqlite:///{tmp_path / 'r.db'}")
    run_id = store.create_run(
        workflow_name="w",
        workflow_path="w.yaml",
        workflow_text="",
        params={},
        workspace="/x",
        owner=None,
    )
    store.url = "postgresql+psycopg://u:SECRET@db.example/marathon"
    report = build_report(store, [run_id])
    assert report.db_option == " --db postgresql+psycopg://u:***@db.example/marathon"


def test_a_background_run_gets_its_database_url_through_the_environment() -> None:
    """`pilot run --detach --db URL` starts a child whose command line every user can read
    (ps): the URL goes to it as MARATHON_DB instead."""
    from pilot.front.cli_run import _db_to_environment

    url = "postgresql+psycopg://u:SECRET@db/x"
    for argv in (["run", "w.yaml", "--db", url, "-p", "a=1"], ["run", "w.yaml", f"--db={url}"]):
        args, env = _db_to_environment(argv)
        assert all("SECRET" not in a for a in args) and args[:2] == ["run", "w.yaml"]
        assert env["MARATHON_DB"] == url


def test_pages_kept_for_the_model_never_follow_a_link_the_agent_planted(tmp_path: Path) -> None:
    """The agent's (sandboxed) commands can write the workspace and its .git; the pilot, which
    keeps long results there for paging, must not write through their links to files
    outside (a ~/.bashrc overwritten with a tool's output would be an escape)."""
    from pilot.workspace.executor import RegistryExecutor
    from tools.registry import default_registry

    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "bashrc"
    victim.write_text("original\n")

    def executor() -> RegistryExecutor:
        return RegistryExecutor(
            registry=default_registry(),
            workspace_root=repo,
            artifacts_dir=tmp_path / "artifacts",
            settings={},
            env_allowlist=[],
            sandbox="none",
            work_branch=None,
        )

    text = f"long output with {SECRETS['github']}"
    pages = repo / ".marathon" / "outputs"
    pages.mkdir(parents=True)
    (pages / "c1.txt").symlink_to(victim)
    assert executor().keep_full_output("c1", text) is None
    (pages / "c1.txt").unlink()
    pages.rmdir()
    (repo / ".marathon").rmdir()
    (repo / ".marathon").symlink_to(outside)
    assert executor().keep_full_output("c1", text) is None
    (repo / ".marathon").unlink()
    ignore = repo / ".marathon" / ".gitignore"  # what makes git ignore the pages
    ignore.parent.mkdir()
    ignore.symlink_to(victim)
    assert executor().keep_full_output("c1", text) is None
    assert victim.read_text() == "original\n" and sorted(p.name for p in outside.iterdir()) == [
        "bashrc"
    ]
    ignore.unlink()
    kept = executor().keep_full_output("c1", text)
    assert kept == ".marathon/outputs/c1.txt"
    assert SECRETS["github"] not in (repo / kept).read_text(), "a page is redacted"
