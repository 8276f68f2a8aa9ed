"""The bad-input matrix: every wrong flag, URL, environment or file a user can give `pilot` and
`brain` ends in a short message that says what is wrong and how to fix it, never a traceback.

Each case runs the real command line in a subprocess (its own MARATHON_HOME) and checks the exit
code, that no "Traceback" is printed, and that the words naming the fix are there. Cases that
need a fixture (a busy port, a PostgreSQL server) are tests of their own below the matrix.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pilot_harness import make_repo

from pilot.store.event_store import EventStore

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


WORKFLOW = """\
name: bad-inputs
params:
  repo: {type: path, required: true}
model: {endpoint: "http://127.0.0.1:9/v1", name: auto, server_wait: 1}
workspace: {path: "{{ params.repo }}"}
tools: [read_file, finish]
phases:
  - name: a
    prompt: "hi"
"""

FILES = {
    "wf.yaml": WORKFLOW,
    "typo.yaml": WORKFLOW.replace("phases:", "phaces:"),
    "divide.yaml": WORKFLOW.replace(
        "repo: {type: path, required: true}",
        "repo: {type: path, required: true}\n  n: {type: integer, required: true}",
    ).replace('prompt: "hi"', 'prompt: "{{ params.n / 0 }}"'),
    "sandbox.yaml": WORKFLOW.replace('prompt: "hi"', 'prompt: "{{ params.repo.__class__ }}"'),
    "endpoint.yaml": WORKFLOW.replace(
        "repo: {type: path, required: true}",
        "repo: {type: path, required: true}\n  port: {type: integer, default: 8000}",
    ).replace("127.0.0.1:9/v1", "127.0.0.1:{{ params.port }}/v1"),
    "huge.yaml": WORKFLOW.replace('prompt: "hi"', "prompt: \"{{ 'x' * 10**9 }}\""),
    "loops.yaml": WORKFLOW.replace(
        'prompt: "hi"',
        'prompt: "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}'
        '{% endfor %}{% endfor %}"',
    ),
    "empty_matrix.yaml": "[]\n",
    "notyaml.yaml": "name: [unclosed\n",
    "bad_script.yaml": "conversations: [\n",
    "not_a_script.yaml": "conversations: 3\n",
    "sim_config.yaml": "port: [\n",
    "home_file": "I am a file, not a folder\n",
    "params.yaml": "- not\n- a mapping\n",
    "rows.yaml": "- {repo: repo}\n- {repo: plain}\n",
}


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    expect: list[str]
    """Words the message must hold (what is wrong and the fix), case-insensitive."""
    code: int = 2
    env: dict[str, str] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    """Paths (relative to the test's folder) that must not exist afterwards."""
    process: bool = False
    """Run the console script in a process of its own (else typer's runner, in this one)."""


P, B = "pilot", "brain"
CLI_MODULES = {P: "pilot.front.cli", B: "brain.cli"}
CASES = [
    # -- the store's URL and environment
    Case("db-unknown-dialect", [P, "runs", "--db", "notadb://x"], ["notadb", "sqlite:///"]),
    Case("db-malformed", [P, "runs", "--db", "://nonsense"], ["not a database url"]),
    Case(
        "db-env-malformed",
        [P, "runs"],
        ["MARATHON_DB", "not a database url"],
        env={"MARATHON_DB": "::"},
    ),
    Case(
        "db-postgres-unreachable",
        [P, "runs", "--db", f"postgresql+psycopg://u:secret@127.0.0.1:{closed_port()}/x"],
        ["cannot connect", "postgresql running"],
        process=True,
    ),
    Case(
        "db-plain-postgres-unreachable",
        [P, "runs", "--db", f"postgresql://u@127.0.0.1:{closed_port()}/x"],
        ["cannot connect"],
    ),
    Case(
        "db-psycopg2-missing",
        [P, "runs", "--db", "postgresql+psycopg2://u@127.0.0.1/x"],
        ["marathon[postgres]"],
    ),
    Case(
        "db-psycopg-missing",
        [P, "runs", "--db", "postgresql://u@127.0.0.1/x"],
        ["marathon[postgres]", "psycopg"],
        env={"PYTHONPATH": "{tmp}/no_psycopg"},
    ),
    Case(
        "db-missing-sqlite-folder",
        [P, "runs", "--db", "sqlite:///{tmp}/nowhere/x.db"],
        ["no database at", "--db"],
        absent=["nowhere"],
    ),
    Case(
        "db-missing-for-show",
        [P, "show", "abc", "--db", "sqlite:///{tmp}/none.db"],
        ["no database at"],
        absent=["none.db"],
    ),
    Case(
        "db-unknown-dialect-run",
        [P, "run", "wf.yaml", "-p", "repo=repo", "--db", "x://y"],
        ["no database driver"],
    ),
    Case(
        "durability-bogus",
        [P, "run", "wf.yaml", "-p", "repo=repo", "--durability", "bogus"],
        ["normal", "full"],
    ),
    Case(
        "home-is-a-file-runs",
        [P, "runs"],
        ["is a file", "MARATHON_HOME"],
        env={"MARATHON_HOME": "{tmp}/home_file"},
    ),
    Case(
        "home-is-a-file-run",
        [P, "run", "wf.yaml", "-p", "repo=repo"],
        ["is a file", "MARATHON_HOME"],
        env={"MARATHON_HOME": "{tmp}/home_file"},
        process=True,
    ),
    Case(
        "home-is-a-file-queue",
        [P, "queue", "ls"],
        ["is a file"],
        env={"MARATHON_HOME": "{tmp}/home_file"},
    ),
    # -- flags
    Case(
        "parallel-zero",
        [P, "run", "wf.yaml", "-p", "repo=repo", "--parallel", "0"],
        ["--parallel", "1"],
    ),
    Case("worker-parallel-zero", [P, "worker", "-j", "0"], ["--parallel"]),
    Case("worker-endpoint-ftp", [P, "worker", "--endpoint", "ftp://x"], ["--endpoint", "http"]),
    Case(
        "run-endpoint-ftp",
        [P, "run", "wf.yaml", "-p", "repo=repo", "--endpoint", "ftp://x"],
        ["--endpoint", "http"],
    ),
    Case(
        "run-endpoint-bad-port",
        [P, "run", "wf.yaml", "-p", "repo=repo", "--endpoint", "http://h:port/v1"],
        ["port", "not a number"],
    ),
    Case("report-format-bogus", [P, "report", "--format", "bogus"], ["md", "html"], process=True),
    Case("report-no-run", [P, "report"], ["--since"]),
    Case("report-since-bogus", [P, "report", "--since", "yesterday-ish"], ["12h"]),
    Case("gc-age-bogus", [P, "gc", "--older-than", "soon"], ["30d"]),
    Case(
        "param-unknown",
        [P, "run", "wf.yaml", "-p", "repo=repo", "-p", "nope=1"],
        ["unknown param", "nope"],
    ),
    Case("param-no-equals", [P, "run", "wf.yaml", "-p", "repo"], ["NAME=VALUE"]),
    Case("params-file-missing", [P, "run", "wf.yaml", "--params-file", "nope.yaml"], ["nope.yaml"]),
    Case(
        "params-file-not-mapping",
        [P, "run", "wf.yaml", "--params-file", "params.yaml"],
        ["params.yaml"],
    ),
    # -- workflow files
    Case("workflow-missing", [P, "run", "missing.yaml"], ["no such file"]),
    Case("workflow-not-yaml", [P, "validate", "notyaml.yaml"], ["notyaml.yaml:"]),
    Case(
        "workflow-typo-dry-run",
        [P, "run", "typo.yaml", "--dry-run"],
        ["phaces"],
        absent=["home/dry-runs", "home/marathon.db"],
        process=True,
    ),
    Case("validate-divide-by-zero", [P, "validate", "divide.yaml"], ["division by zero"]),
    Case("validate-sandbox", [P, "validate", "sandbox.yaml"], ["sandbox forbids"]),
    Case(
        "validate-endpoint-template",
        [P, "validate", "endpoint.yaml"],
        ["not a template", "--endpoint"],
    ),
    # -- runs that cannot start: refused before any record is written
    Case(
        "workspace-missing",
        [P, "run", "wf.yaml", "-p", "repo=nothere"],
        ["does not exist", "--param repo"],
    ),
    Case("workspace-not-git", [P, "run", "wf.yaml", "-p", "repo=plain"], ["git init"]),
    Case("run-id-unknown", [P, "show", "ffff"], ["ffff"], env={"MARATHON_HOME": "{tmp}/seeded"}),
    Case("resume-unknown", [P, "resume", "ffff"], ["ffff"], env={"MARATHON_HOME": "{tmp}/seeded"}),
    Case(
        "matrix-row-cannot-start",
        [P, "run", "wf.yaml", "--matrix", "rows.yaml"],
        ["matrix row 2", "git init"],
        env={"MARATHON_HOME": "{tmp}/seeded"},
    ),
    Case("matrix-missing", [P, "run", "wf.yaml", "--matrix", "nope.yaml"], ["nope.yaml"]),
    Case("matrix-not-a-list", [P, "run", "wf.yaml", "--matrix", "params.yaml"], ["list"]),
    Case("matrix-empty", [P, "run", "wf.yaml", "--matrix", "empty_matrix.yaml"], ["no runs"]),
    # templates bounded in size and time: refused, never a hang
    Case("validate-huge-template", [P, "validate", "huge.yaml"], ["template refused", "'*'"]),
    Case("validate-endless-template", [P, "validate", "loops.yaml"], ["template refused"]),
    Case("run-huge-template", [P, "run", "huge.yaml", "-p", "repo=repo"], ["template refused"]),
    Case("db-is-a-folder", [P, "runs", "--db", "sqlite:///{tmp}/plain"], ["folder", "marathon.db"]),
    Case("queue-add-missing", [P, "queue", "add", "missing.yaml"], ["no such file"]),
    Case("worker-db-bad", [P, "worker", "--db", "notadb://x"], ["no database driver"]),
    Case("params-file-folder", [P, "validate", "plain"], ["is a directory"]),
    Case("runs-limit-negative", [P, "runs", "--limit", "-5"], ["--limit"]),
    Case(
        "gc-missing-db",
        [P, "gc", "--older-than", "1d", "--db", "sqlite:///{tmp}/none.db"],
        ["no database at"],
        absent=["none.db"],
    ),
    # -- brain
    Case("brain-up-unknown-profile", [B, "up", "nosuch"], ["gemma4-e4b-mtp"], code=2),
    Case("brain-up-bad-set", [B, "up", "sim", "--set", "port=abc"], ["port", "integer"], code=2),
    # values vLLM refuses, refused before launch with vLLM's own words (brain/vllm_refusals.py)
    Case(
        "brain-up-max-model-len-0",
        [B, "up", "sim", "--dry-run", "--set", "max_model_len=0"],
        ["max_model_len must be a positive integer, got int: 0", "auto"],
        code=2,
    ),
    Case(
        "brain-up-batched-below-seqs",
        [
            B,
            "up",
            "sim",
            "--dry-run",
            "--set",
            "max_num_seqs=16",
            "--set",
            "max_num_batched_tokens=10",
        ],
        ["max_num_batched_tokens (10) must be greater than or equal to max_num_seqs (16)"],
        code=2,
    ),
    Case(
        "brain-up-load-format-bogus",
        [B, "up", "sim", "--dry-run", "--set", "load_format=bogus"],
        ["Load format `bogus` is not supported", "unset load_format"],
        code=2,
    ),
    Case("brain-status-unknown", [B, "status", "nosuch"], ["nosuch"], code=1),
    Case("sim-port-out-of-range", [B, "sim", "--port", "99999"], ["65535"]),
    # -- brain sim
    Case(
        "sim-script-missing",
        [B, "sim", "--policy", "script:nope.yaml"],
        ["cannot read", "nope.yaml"],
    ),
    Case(
        "sim-script-not-yaml",
        [B, "sim", "--policy", "script:bad_script.yaml"],
        ["not valid yaml", "line"],
    ),
    Case(
        "sim-script-invalid",
        [B, "sim", "--policy", "script:not_a_script.yaml"],
        ["not a script", "conversations"],
    ),
    Case(
        "sim-policy-unknown",
        [B, "sim", "--policy", "bogus"],
        ["unknown policy", "demo"],
        process=True,
    ),
    Case("sim-config-not-yaml", [B, "sim", "--config", "sim_config.yaml"], ["not valid yaml"]),
    Case("sim-config-missing", [B, "sim", "--config", "nope.yaml"], ["does not exist"]),
    # -- help
    Case("pilot-h", [P, "-h"], ["usage"], code=0, process=True),
    Case("pilot-run-h", [P, "run", "-h"], ["--dry-run"], code=0),
    Case("brain-h", [B, "-h"], ["usage"], code=0, process=True),
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    make_repo(tmp_path / "repo")
    (tmp_path / "plain").mkdir()
    # A psycopg that cannot be imported, as on a machine without the postgres extra.
    blocker = tmp_path / "no_psycopg" / "psycopg"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    EventStore(f"sqlite:///{tmp_path / 'seeded' / 'marathon.db'}").close()
    return tmp_path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_case(case: Case, folder: Path) -> Result:
    """The command's exit code and output: in a subprocess when the case asks (the console
    script itself, or an environment only a new process sees), else through typer's runner,
    where an escaping exception (a traceback for the user) is reported as one."""
    if case.process or "PYTHONPATH" in case.env:
        proc = run_process(case, folder)
        return Result(proc.returncode, proc.stdout, proc.stderr)
    import importlib

    from typer.testing import CliRunner

    env = {"MARATHON_HOME": str(folder / "home"), "MARATHON_DB": None, "COLUMNS": "200"}
    env.update({k: v.replace("{tmp}", str(folder)) for k, v in case.env.items()})
    app = importlib.import_module(CLI_MODULES[case.argv[0]]).app
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(
            app, [a.replace("{tmp}", str(folder)) for a in case.argv[1:]], env=env
        )
    finally:
        os.chdir(here)
    error = result.exception
    if error is not None and not isinstance(error, SystemExit):
        trace = "".join(__import__("traceback").format_exception(error))
        return Result(1, result.stdout, f"Traceback (escaped the CLI):\n{trace}")
    return Result(result.exit_code, result.stdout, result.stderr)


def run_process(case: Case, folder: Path) -> subprocess.CompletedProcess[str]:
    def fill(text: str) -> str:
        return text.replace("{tmp}", str(folder))

    script = Path(sys.executable).with_name(case.argv[0])
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", f"from {CLI_MODULES[case.argv[0]]} import app; app()"]
    )
    env = {**os.environ, "MARATHON_HOME": str(folder / "home"), "COLUMNS": "200"}
    env.pop("MARATHON_DB", None)
    env.update({k: fill(v) for k, v in case.env.items()})
    if "PYTHONPATH" in case.env:
        env["PYTHONPATH"] = f"{env['PYTHONPATH']}{os.pathsep}{REPO}"
    return subprocess.run(
        [*command, *(fill(a) for a in case.argv[1:])],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, folder: Path) -> None:
    proc = run_case(case, folder)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == case.code, out
    for words in case.expect:
        assert words.lower() in out.lower(), f"{words!r} not in:\n{out}"
    assert "secret" not in out, out  # a password in a URL is never printed
    for path in case.absent:
        assert not (folder / path).exists(), f"{path} was created for a command that failed"


def test_runs_that_cannot_start_leave_no_record(folder: Path) -> None:
    """Missing workspace, not a repository, workspace in use: exit 2 and no run in the store."""
    db = folder / "home" / "marathon.db"
    for repo in ("nothere", "plain"):
        proc = run_case(Case("x", [P, "run", "wf.yaml", "-p", f"repo={repo}"], []), folder)
        assert proc.returncode == 2, proc.stderr
    assert EventStore(f"sqlite:///{db}").list_runs() == []
    store = EventStore(f"sqlite:///{db}")
    busy = store.create_run(
        workflow_name="other",
        workflow_path="other.yaml",
        workflow_text="",
        params={},
        workspace=str((folder / "repo").resolve()),
        owner="someone",
    )
    store.set_workspace(busy, str((folder / "repo").resolve()))
    proc = run_case(Case("x", [P, "run", "wf.yaml", "-p", "repo=repo"], []), folder)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"pilot cancel {busy}" in proc.stderr
    assert [r.id for r in store.list_runs()] == [busy]


def test_a_matrix_with_a_row_that_cannot_start_records_no_run(folder: Path) -> None:
    proc = run_case(Case("x", [P, "run", "wf.yaml", "--matrix", "rows.yaml"], []), folder)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "matrix row 2" in proc.stderr
    assert EventStore(f"sqlite:///{folder / 'home' / 'marathon.db'}").list_runs() == []


def test_sim_port_in_use_names_the_holder(folder: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = run_case(Case("x", [B, "sim", "--port", str(port)], []), folder)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"127.0.0.1:{port} is already in use by pid {os.getpid()}" in proc.stderr
    assert "--port" in proc.stderr


def test_postgres_database_missing(folder: Path) -> None:
    url = os.environ.get("MARATHON_TEST_PG_URL")
    url_file = REPO / ".ci" / "build" / "postgres.url"
    if not url and url_file.exists():
        url = url_file.read_text().strip()
    if not url:
        pytest.skip("no PostgreSQL: run `.ci/services start` or set MARATHON_TEST_PG_URL")
    missing = url.rsplit("/", 1)[0] + "/marathon_no_such_database"
    proc = run_case(Case("x", [P, "runs", "--db", missing], []), folder)
    if "cannot connect" in proc.stderr:
        pytest.skip(f"PostgreSQL at {url} is not reachable")
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr and "createdb" in proc.stderr


def test_matrix_size() -> None:
    """The closing note counts these; keep it honest."""
    assert len(CASES) + 3 >= 45
