"""The run tool: exit codes, scrubbed env, timeouts that kill whole process groups, huge
output kept as an artifact, and the bwrap sandbox."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tools import sandbox
from tools.base import ToolContext, ToolResult
from tools.registry import default_registry
from tools.sandbox import SandboxStatus, bwrap_status
from tools.shell import run_command
from tools.workspace import Workspace

REGISTRY = default_registry()
BWRAP = bwrap_status()
needs_bwrap = pytest.mark.skipif(
    not BWRAP.available and not os.environ.get("MARATHON_REQUIRE_SANDBOX"),
    reason=f"no working bwrap: {BWRAP.reason}",
)
"""Skipped without bubblewrap, unless CI found it working (``.ci/services``): then required."""


def make_ctx(tmp_path: Path, mode: str = "none", **run_settings: object) -> ToolContext:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    return ToolContext(
        workspace=Workspace(root),
        artifacts_dir=tmp_path / "artifacts",
        settings={"run": dict(run_settings)},
        sandbox=mode,  # type: ignore[arg-type]
        call_id="call_1",
    )


def run(ctx: ToolContext, command: str, **args: object) -> ToolResult:
    return REGISTRY.invoke("run", {"command": command, **args}, ctx)


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return any(ln.startswith("State:") and "Z" in ln for ln in fh)
    except FileNotFoundError:
        return True


def wait_gone(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_exit_code_is_the_first_line_and_stderr_is_interleaved(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    res = run(ctx, "echo out; echo err >&2; pwd; exit 3")
    assert not res.is_error
    assert res.output.splitlines() == ["exit code: 3", "out", "err", str(ctx.workspace.root)]
    assert run(ctx, "true").output == "exit code: 0\n(no output)"


def test_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    monkeypatch.setenv("PROJECT_FLAG", "visible")
    ctx = make_ctx(tmp_path)
    ctx.env_allowlist = ["PROJECT_FLAG"]
    out = run(ctx, "env").output
    assert "sk-should-not-leak" not in out and "AWS_SECRET" not in out
    assert "PROJECT_FLAG=visible" in out and "TERM=dumb" in out
    home = next(ln.split("=", 1)[1] for ln in out.splitlines() if ln.startswith("HOME="))
    assert home != os.environ.get("HOME") and not Path(home).exists()  # private, removed


def test_timeout_kills_the_whole_group_including_children_ignoring_sigterm(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, kill_grace=0.5)
    command = (
        "bash -c 'trap \"\" TERM; echo $$ > stubborn.pid; while true; do sleep 0.1; done' & "
        "sleep 1000 & echo $! > sleeper.pid; echo started; wait"
    )
    start = time.monotonic()
    res = run(ctx, command, timeout=1)
    elapsed = time.monotonic() - start
    assert res.is_error and res.output.startswith("Error: the command timed out after 1 s")
    assert "child processes were killed" in res.output and "started" in res.output
    assert elapsed < 1 + 0.5 + 3  # timeout + grace + slack
    root = ctx.workspace.root
    pids = [int((root / n).read_text()) for n in ("stubborn.pid", "sleeper.pid")]
    assert wait_gone(pids), pids


def test_background_processes_do_not_outlive_the_call(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    res = run(ctx, "sleep 1000 & echo $! > bg.pid; echo done")
    assert res.output.startswith("exit code: 0")
    assert wait_gone([int((ctx.workspace.root / "bg.pid").read_text())])


def test_timeout_is_capped_by_max_timeout(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, max_timeout=5)
    res = run(ctx, "echo ok", timeout=99999)
    assert res.output.startswith("exit code: 0 (timeout capped at 5 s)")
    assert run(ctx, "echo", timeout=0).is_error  # schema: timeout >= 1


def test_huge_output_is_tail_truncated_and_kept_as_an_artifact(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    res = run(
        ctx, "echo FIRST; head -c 20000000 /dev/zero | tr '\\0' 'a' | fold -w 99; echo; echo LAST"
    )
    assert not res.is_error and res.truncated
    lines = res.output.splitlines()
    assert lines[0] == "exit code: 0" and lines[1] == "FIRST" and lines[-1] == "LAST"
    assert len(res.output) < 40_000
    assert "lines not shown" in res.output and "run-call_1.log" in res.output
    [artifact] = res.artifacts
    assert artifact.name == "run-call_1.log" and Path(artifact.path).is_absolute()
    expected = len("FIRST\n") + 20_000_000 + 20_000_000 // 99 + 1 + len("LAST\n")
    assert artifact.size == expected == Path(artifact.path).stat().st_size


def test_many_short_lines_keep_head_and_tail(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    res = run(ctx, "seq 1 5000")
    lines = res.output.splitlines()
    assert lines[1:21] == [str(i) for i in range(1, 21)]
    assert lines[-200:] == [str(i) for i in range(4801, 5001)]
    assert "4,780 lines not shown" in res.output
    assert res.artifacts and Path(res.artifacts[0].path).read_text().count("\n") == 5000


def test_small_output_keeps_no_artifact_and_terminal_noise_is_cleaned(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    res = run(ctx, r"printf '\033[31mred\033[0m\n'; printf 'progress 10%%\rprogress 100%%\n'")
    assert res.output.splitlines()[1:] == ["red", "progress 100%"]
    assert res.artifacts == [] and not (tmp_path / "artifacts").exists()


def test_unicode_and_invalid_bytes_in_output(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    res = run(ctx, r"printf 'héllo 世界\n\xff\xfe\n'")
    assert "héllo 世界" in res.output and "\ufffd" in res.output


def test_empty_command_and_bwrap_required_but_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = make_ctx(tmp_path)
    assert "command is empty" in run(ctx, "   ").output
    monkeypatch.setattr(
        sandbox, "bwrap_status", lambda: SandboxStatus(False, "bwrap is not installed")
    )
    res = run(make_ctx(tmp_path, "bwrap"), "echo hi")
    assert res.is_error and "sandbox is set to 'bwrap'" in res.output
    # auto falls back to running directly
    assert run(make_ctx(tmp_path, "auto"), "echo hi").output == "exit code: 0\nhi"


@needs_bwrap
def test_bwrap_sandbox_confines_writes_to_the_workspace(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    ctx = make_ctx(tmp_path, "bwrap")
    res = run(
        ctx,
        f"echo inside > in.txt && cat in.txt; echo x > {outside}; "
        "touch /usr/marathon-probe; echo rc=$?; echo t > /tmp/private.txt && ls /tmp",
    )
    assert res.output.startswith("exit code: 0"), res.output
    assert "inside" in res.output and "Read-only file system" in res.output and "rc=1" in res.output
    assert (ctx.workspace.root / "in.txt").read_text() == "inside\n"
    assert not outside.exists()  # /tmp is private: the write landed in the sandbox's tmpfs
    assert not Path("/usr/marathon-probe").exists()
    assert "private.txt" in res.output and not Path("/tmp/private.txt").exists()


@needs_bwrap
def test_bwrap_sandbox_has_no_network(tmp_path: Path) -> None:
    res = run(make_ctx(tmp_path, "bwrap"), "tail -n +3 /proc/net/dev | cut -d: -f1")
    assert [ln.strip() for ln in res.output.splitlines()[1:]] == ["lo"], res.output


@needs_bwrap
def test_bwrap_timeout_kills_everything_inside(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, "bwrap", kill_grace=0.5)
    start = time.monotonic()
    res = run(ctx, "trap '' TERM; (trap '' TERM; sleep 1000) & sleep 1000", timeout=1)
    assert res.is_error and "timed out" in res.output
    assert time.monotonic() - start < 1 + 0.5 + 3


@needs_bwrap
def test_auto_mode_uses_bwrap_when_it_works(tmp_path: Path) -> None:
    res = run(make_ctx(tmp_path, "auto"), f"touch {tmp_path}/escape; echo $?")
    assert not (tmp_path / "escape").exists(), res.output


@needs_bwrap
def test_git_commit_in_a_linked_worktree_works_inside_the_sandbox(tmp_path: Path) -> None:
    """A run's workspace is a linked worktree whose git directories are outside it; the
    sandboxed command can still commit (they are writable), and sees its MARATHON_CALL_ID."""
    import subprocess

    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    main = tmp_path / "main"
    main.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=main, env=env, check=True, capture_output=True)
    work = tmp_path / "work"
    subprocess.run(
        ["git", "worktree", "add", "-q", "-b", "w", str(work)], cwd=main, check=True, env=env
    )
    ctx = ToolContext(
        workspace=Workspace(work),
        artifacts_dir=tmp_path / "artifacts",
        sandbox="bwrap",
        call_id="call-1",
        run_id="r1",
    )
    result = run_command(
        'echo "$MARATHON_CALL_ID" > f.txt && git add f.txt && '
        "git -c user.name=t -c user.email=t@x commit -qm sandboxed",
        ctx,
        timeout=60,
    )
    assert result.sandboxed and result.returncode == 0, result.output
    log = subprocess.run(["git", "log", "--format=%s", "w"], cwd=main, capture_output=True)
    assert log.stdout.decode().split() == ["sandboxed", "init"]
    assert (work / "f.txt").read_text() == "r1:call-1\n"
