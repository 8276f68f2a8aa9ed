"""The run tool: a shell command in the workspace, bounded in time and in output.

The command runs as ``bash -c`` in its own process group (and, when available, in the bwrap
sandbox) with a scrubbed environment. Output is streamed: to a small head/tail buffer for the
model and, once it grows, to an artifact file, so a 100 MB output never sits in memory. On
timeout the whole group gets SIGTERM, then SIGKILL after a short grace; processes left behind
when the command exits (background jobs) are killed too, so nothing outlives a call.
Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from tools.base import Artifact, ToolArgs, ToolContext, ToolError, ToolResult
from tools.sandbox import SANDBOX_HOME, SandboxUnavailable, wrap
from tools.workspace import command_env

DEFAULT_TIMEOUT = 120
DEFAULT_MAX_TIMEOUT = 1800
DEFAULT_KILL_GRACE = 2.0
DRAIN_AFTER_EXIT = 1.0  # how long to keep reading a pipe held open by an escaped process

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_SANDBOX_HINTS = (
    "Read-only file system",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Could not resolve host",
    "Name or service not known",
    "getaddrinfo",
)


@dataclass
class OutputCapture:
    """Keeps the head and tail of a stream in memory and spills the whole of it to a file.

    ``open_spill`` is called once, when the output outgrows ``memory_limit``; until then
    everything is kept in memory (the usual small output never touches the disk).
    """

    open_spill: Callable[[], Path]
    head_limit: int = 4096
    tail_limit: int = 32768
    memory_limit: int = 65536
    max_file_bytes: int = 256 * 1024 * 1024
    total: int = 0
    lines: int = 0
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    memory: bytearray | None = field(default_factory=bytearray)
    spill_path: Path | None = None
    spilled_bytes: int = 0
    spill_error: str | None = None
    _fh: object = None

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.lines += chunk.count(b"\n")
        if len(self.head) < self.head_limit:
            self.head += chunk[: self.head_limit - len(self.head)]
        self.tail += chunk
        if len(self.tail) > 2 * self.tail_limit:
            del self.tail[: -self.tail_limit]
        if self.memory is not None:
            self.memory += chunk
            if len(self.memory) > self.memory_limit:
                self._spill(bytes(self.memory))
                self.memory = None
        else:
            self._write(chunk)

    def _spill(self, data: bytes) -> None:
        try:
            self.spill_path = self.open_spill()
            # 0600: the full output of a command may hold whatever it printed.
            fd = os.open(self.spill_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            self._fh = os.fdopen(fd, "wb")
        except OSError as exc:
            self.spill_error = str(exc)
            return
        self._write(data)

    def _write(self, data: bytes) -> None:
        if self._fh is None:
            return
        room = self.max_file_bytes - self.spilled_bytes
        if room <= 0:
            return
        data = data[:room]
        try:
            self._fh.write(data)  # type: ignore[attr-defined]
            self.spilled_bytes += len(data)
        except OSError as exc:
            self.spill_error = str(exc)
            self.close()
            self._fh = None

    def keep(self) -> None:
        """Make sure the full output is on disk (called when the model sees only part)."""
        if self.memory is not None and self.spill_path is None:
            self._spill(bytes(self.memory))

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()  # type: ignore[attr-defined]
            except OSError:
                pass

    @property
    def complete_line_count(self) -> int:
        ends_open = bool(self.tail) and not self.tail.endswith(b"\n")
        return self.lines + (1 if ends_open else 0)


@dataclass
class Outcome:
    returncode: int | None
    timed_out: bool
    elapsed: float


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` has exited, without reaping it (so its group id stays ours)."""
    if hasattr(os, "waitid"):
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return proc.poll() is not None
        return info is not None
    return proc.poll() is not None


def die_with_parent_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL``: the command dies with the process that started it.

    When the pilot is SIGKILLed mid-command, a surviving command could go on changing the
    workspace after the resume restored it; with this it is killed at once instead.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def run_streaming(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    capture: OutputCapture,
    kill_grace: float = DEFAULT_KILL_GRACE,
) -> Outcome:
    """Run ``argv`` in a new session, feeding stdout+stderr to ``capture`` as it comes.

    On timeout the process group gets SIGTERM, then SIGKILL after ``kill_grace`` seconds.
    When the leader exits, whatever is left of its group is killed.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        [*die_with_parent_prefix(), *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pgid = proc.pid
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    deadline = start + timeout
    timed_out = False
    term_at: float | None = None
    killed = False
    exited_at: float | None = None
    eof = False
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and _exited(proc):
                exited_at = now
                _killpg(pgid, signal.SIGKILL)  # background jobs do not outlive the call
            if exited_at is not None and (eof or now - exited_at > DRAIN_AFTER_EXIT):
                break
            if not timed_out and now >= deadline:
                timed_out = True
                term_at = now
                _killpg(pgid, signal.SIGTERM)
            if term_at is not None and not killed and now - term_at >= kill_grace:
                killed = True
                _killpg(pgid, signal.SIGKILL)
            if eof:
                time.sleep(0.02)
                continue
            for _key, _ in sel.select(timeout=0.05):
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    eof = True
                    sel.unregister(fd)
                    break
                capture.feed(data)
    finally:
        sel.close()
        if proc.poll() is None:
            _killpg(pgid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        capture.close()
    return Outcome(None if timed_out else proc.returncode, timed_out, time.monotonic() - start)


def clean_output(text: str) -> str:
    """Terminal noise removed: ANSI escapes, and progress bars redrawn with carriage returns."""
    text = _ANSI.sub("", text)
    if "\r" in text:
        text = "\n".join(
            line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")
        )
    return text


def _mb(n: int) -> str:
    return f"{n:,} bytes" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MB"


def render_output(
    capture: OutputCapture, *, max_lines: int, max_bytes: int, head_lines: int
) -> tuple[str, bool]:
    """The output as the model sees it: all of it, or head + tail with a note between."""
    if capture.total == 0:
        return "(no output)", False
    if capture.memory is not None:
        text = clean_output(capture.memory.decode("utf-8", errors="replace"))
        if len(text) <= max_bytes and text.count("\n") <= max_lines + head_lines:
            return text.rstrip("\n"), False
    capture.keep()
    head_raw = bytes(capture.head)
    if len(head_raw) >= capture.head_limit and not head_raw.endswith(b"\n"):
        head_raw = head_raw[: head_raw.rfind(b"\n") + 1]  # drop a line cut by the buffer's end
    head = clean_output(head_raw.decode("utf-8", errors="replace")).rstrip("\n").split("\n")
    head = head[:head_lines]
    head_text = "\n".join(head)[: max_bytes // 8]
    tail_bytes = bytes(capture.tail[-max_bytes:])
    if len(capture.tail) > max_bytes or capture.total > len(capture.tail):
        nl = tail_bytes.find(b"\n")
        tail_bytes = tail_bytes[nl + 1 :] if 0 <= nl < len(tail_bytes) - 1 else tail_bytes
    tail_lines = clean_output(tail_bytes.decode("utf-8", errors="replace")).rstrip("\n").split("\n")
    tail_lines = tail_lines[-max_lines:]
    shown = len(head) + len(tail_lines)
    omitted = max(capture.complete_line_count - shown, 0)
    if capture.spill_path is not None and capture.spill_error is None:
        cut = capture.spilled_bytes < capture.total
        kept = (
            f"the full output ({_mb(capture.total)}) was kept as artifact "
            f"{capture.spill_path.name}" + (f" (first {_mb(capture.spilled_bytes)})" if cut else "")
        )
    else:
        kept = f"the full output could not be kept ({capture.spill_error or 'no artifact'})"
    note = (
        f"... [{omitted:,} lines not shown; {kept}. To see a part, re-run with e.g. "
        "`... 2>&1 | grep PATTERN`, `| tail -n 50` or `> out.txt` and read_file.]"
    )
    return f"{head_text}\n{note}\n" + "\n".join(tail_lines), True


class RunArgs(ToolArgs):
    command: str = Field(description="The shell command (bash) to run in the workspace root.")
    timeout: int | None = Field(
        default=None, ge=1, description="Seconds before it is killed (default 120)."
    )


class Run:
    """A shell command in the workspace root."""

    name = "run"
    description = (
        "Run a bash command in the workspace root (e.g. tests, builds, git log); answers with "
        "the exit code and the output (long output keeps its first and last lines). Default "
        "timeout 120 s; no network inside the sandbox; background processes are killed when "
        "the command ends. Prefer read_file, grep and edit_file for reading and editing files."
    )
    args_model = RunArgs
    mutates = True

    def run(self, args: RunArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        settings = ctx.tool_settings(self.name)
        if not args.command.strip():
            raise ToolError("command is empty; give a bash command such as `ls -la`.")
        max_timeout = float(settings.get("max_timeout", DEFAULT_MAX_TIMEOUT))
        timeout = float(args.timeout or settings.get("timeout", DEFAULT_TIMEOUT))
        capped_note = ""
        if timeout > max_timeout:
            capped_note = f" (timeout capped at {max_timeout:.0f} s)"
            timeout = max_timeout
        if ctx.time_left is not None and ctx.time_left < timeout:
            capped_note = " (the run's wall-time limit leaves no longer)"
            timeout = max(1.0, ctx.time_left)
        result = run_command(args.command, ctx, timeout=timeout, settings=settings)
        text, truncated, artifacts = result.output, result.truncated, result.artifacts
        if result.timed_out:
            return ToolResult.error(
                f"the command timed out after {timeout:.0f} s{capped_note}; it and all its "
                f"child processes were killed. Raise `timeout` (up to {max_timeout:.0f} s) or "
                f"make it finish sooner (e.g. run fewer tests).\nOutput before the kill:\n{text}",
                truncated=truncated,
                artifacts=artifacts,
            )
        code = result.returncode
        status = f"exit code: {code}"
        if code is not None and code < 0:
            try:
                status += f" (killed by {signal.Signals(-code).name})"
            except ValueError:
                pass
        out = f"{status}{capped_note}\n{text}"
        if result.sandboxed and code and any(h in text for h in _SANDBOX_HINTS):
            out += (
                "\nNote: commands run in a sandbox: no network, and only the workspace and "
                "/tmp are writable."
            )
        return ToolResult.ok(out, truncated=truncated, artifacts=artifacts)


@dataclass
class CommandResult:
    """A finished command as the harness sees it (the phase check uses this directly)."""

    returncode: int | None
    timed_out: bool
    output: str
    truncated: bool
    artifacts: list[Artifact]
    sandboxed: bool


def linked_git_dirs(root: Path) -> list[Path]:
    """A linked worktree's git directories, outside it (``.git`` is a file naming them): git
    commands the agent runs in the sandbox write objects and refs there."""
    dot_git = root / ".git"
    if not dot_git.is_file():
        return []
    text = dot_git.read_text(errors="replace").strip()
    if not text.startswith("gitdir:"):
        return []
    git_dir = (root / text.removeprefix("gitdir:").strip()).resolve()
    dirs = [git_dir]
    try:
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    except OSError:
        return dirs
    return [*dirs, common] if common != git_dir else dirs


def call_env(ctx: ToolContext) -> dict[str, str]:
    """The call's identity for the command: ``MARATHON_CALL_ID`` is the same when a call
    interrupted by a crash is run again after the resume, so a command can make its effects
    outside the workspace idempotent with it (``<run id>:<call id>``, unique across runs)."""
    env: dict[str, str] = {}
    if ctx.run_id:
        env["MARATHON_RUN_ID"] = ctx.run_id
    if ctx.call_id:
        env["MARATHON_CALL_ID"] = f"{ctx.run_id}:{ctx.call_id}" if ctx.run_id else ctx.call_id
    return env


def run_command(
    command: str, ctx: ToolContext, *, timeout: float, settings: dict | None = None
) -> CommandResult:
    """Run ``command`` with bash in the workspace, confined like the ``run`` tool.

    Raises ``ToolError`` when the sandbox is required and unavailable.
    """
    settings = settings if settings is not None else ctx.tool_settings("run")
    root = ctx.workspace.root
    bash = shutil.which("bash") or "/bin/bash"
    private_tmp = Path(tempfile.mkdtemp(prefix="marathon-run-"))
    try:
        try:
            argv, sandboxed = wrap(
                [bash, "-c", command],
                mode=ctx.sandbox,
                writable=[root, *linked_git_dirs(root)],
                cwd=root,
                network=bool(settings.get("network", False)),
                hidden=ctx.hidden,
            )
        except SandboxUnavailable as exc:
            raise ToolError(str(exc)) from None
        home = SANDBOX_HOME if sandboxed else str(private_tmp)
        env = command_env(ctx.env_allowlist, home=home, tmpdir=home)
        env.update(call_env(ctx))
        capture = OutputCapture(
            open_spill=lambda: ctx.artifact_path("run"),
            max_file_bytes=int(settings.get("max_artifact_bytes", 256 * 1024 * 1024)),
        )
        outcome = run_streaming(
            argv,
            cwd=root,
            env=env,
            timeout=timeout,
            capture=capture,
            kill_grace=float(settings.get("kill_grace", DEFAULT_KILL_GRACE)),
        )
    finally:
        shutil.rmtree(private_tmp, ignore_errors=True)
    text, truncated = render_output(
        capture,
        max_lines=int(settings.get("max_output_lines", 200)),
        max_bytes=int(settings.get("max_output_bytes", 16384)),
        head_lines=int(settings.get("head_lines", 20)),
    )
    artifacts: list[Artifact] = []
    if truncated and capture.spill_path is not None and capture.spill_error is None:
        artifacts.append(
            Artifact(
                name=capture.spill_path.name,
                path=str(capture.spill_path.resolve()),
                size=capture.spilled_bytes,
            )
        )
    return CommandResult(
        returncode=outcome.returncode,
        timed_out=outcome.timed_out,
        output=text,
        truncated=truncated,
        artifacts=artifacts,
        sandboxed=sandboxed,
    )
