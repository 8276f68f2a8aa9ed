"""Run ``vllm serve`` as a local process: its own process group, output to a log file.

The log file (``<state>/logs/<name>.log``, the previous start kept as ``<name>.prev.log``) is
what ``brain logs`` and readiness read, also from another ``brain`` invocation. Stop is SIGTERM
to the whole group (vLLM's engine cores are child processes), then SIGKILL after the grace.

``MARATHON_VLLM_EXECUTABLE`` (or ``executable=``) replaces the ``vllm`` word, e.g.
``python -m brain.sim.vllm_entry``, so this launcher is exercised for real without vLLM.

Before a start it asks the executable for its version (``vllm --version``) and checks the spec
against that release (``brain.vllm_versions``): a setting the release cannot honour is refused
with the fix, one it does not know but can do without is left out of the argv, and it says so.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from brain.command import process_command, process_environment
from brain.diagnose import Diagnosis
from brain.errors import LaunchError
from brain.launchers.base import ServerHandle, ServerStatus, poll_wait
from brain.launchers.ports import ensure_port_free
from brain.spec import ServerSpec
from brain.vllm_versions import (
    VersionIssue,
    adapt_argv,
    check_spec,
    facts_for,
    installed_version,
    refusal_message,
)


def _start_ticks(pid: int) -> str | None:
    """The process start time in clock ticks (field 22 of /proc/pid/stat): tells a reused pid
    from the process we started."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def process_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int | None) -> bool:
    """A live process (a zombie waiting for its parent to reap it counts as gone)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def _exit_code(returncode: int) -> tuple[int, str]:
    """Popen's ``-N`` for "killed by signal N" becomes the shell/Docker form ``128 + N``."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return 128 + sig, f"killed by {name}"
    return returncode, ""


class ProcessLauncher:
    """Local ``vllm serve`` (or anything that takes its argv) as a child process."""

    kind = "process"

    def __init__(
        self,
        *,
        executable: Sequence[str] | None = None,
        logs_dir: Path | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self._executable = list(executable) if executable else None
        self._logs_dir = logs_dir
        self._say = say or (lambda msg: print(f"brain: {msg}", file=sys.stderr, flush=True))
        self._version: tuple[str | None] | None = None
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    # --- what to run ------------------------------------------------------------------------

    def executable(self) -> list[str]:
        if self._executable:
            return self._executable
        override = os.environ.get("MARATHON_VLLM_EXECUTABLE", "").strip()
        return shlex.split(override) if override else ["vllm"]

    def command(self, spec: ServerSpec) -> list[str]:
        """``vllm serve MODEL ...`` with ``vllm`` replaced by the configured executable."""
        return [*self.executable(), *process_command(spec)[1:]]

    def vllm_version(self) -> str | None:
        """The installed vLLM's version (``<executable> --version``), asked once; None when it
        does not say (then the default release's facts apply)."""
        if self._version is None:
            cmd = self.executable()
            found = installed_version(cmd) if shutil.which(cmd[0]) else None
            self._version = (found,)
        return self._version[0]

    def version_issues(self, spec: ServerSpec) -> list[VersionIssue]:
        """What in ``spec`` the installed vLLM does not accept (see brain.vllm_versions)."""
        return check_spec(spec, facts_for(self.vllm_version()))

    def check_version(self, spec: ServerSpec) -> list[VersionIssue]:
        """Raise LaunchError for what the installed vLLM cannot do; return the rest (what
        ``start`` leaves out). Called before the other pre-launch checks too, whose advice
        (start a preload daemon, say) would be wrong for a release without the feature."""
        issues = self.version_issues(spec)
        refused = refusal_message(issues)
        if refused:
            version = self.vllm_version() or "of unknown version"
            raise LaunchError(
                f"the installed vLLM {version} cannot start this spec:\n{refused}",
                Diagnosis(
                    "vllm_version_mismatch",
                    f"the spec asks for what vLLM {version} does not have",
                    [f"vllm --version: {version}"],
                    refused,
                ),
            )
        return issues

    def environment(self, spec: ServerSpec) -> dict[str, str]:
        """The caller's environment plus the spec's GPUs (CUDA_VISIBLE_DEVICES) and env."""
        return {**os.environ, **process_environment(spec)}

    def log_name(self, spec: ServerSpec) -> str:
        return spec.name

    def listen_address(self, spec: ServerSpec) -> tuple[str, int] | None:
        """The address that must be free before starting (None: nothing to check)."""
        return spec.host, spec.port

    def logs_dir(self) -> Path:
        if self._logs_dir is not None:
            return self._logs_dir
        from brain.state import logs_dir

        return logs_dir()

    # --- protocol ---------------------------------------------------------------------------

    def start(self, spec: ServerSpec) -> ServerHandle:
        address = self.listen_address(spec)
        if address is not None:
            ensure_port_free(*address)
        cmd = self.command(spec)
        if shutil.which(cmd[0]) is not None:
            issues = self.check_version(spec)
            for issue in issues:
                self._say(issue.message)
            cmd = adapt_argv(cmd, issues)
        if shutil.which(cmd[0]) is None:
            raise LaunchError(
                f"cannot start {cmd[0]!r}: not found on PATH",
                Diagnosis(
                    "vllm_not_installed",
                    f"the {cmd[0]!r} command is not installed here",
                    [f"{cmd[0]}: command not found"],
                    "install vLLM in this environment (pip install vllm), use --backend docker, "
                    "or set MARATHON_VLLM_EXECUTABLE to the command that runs it",
                ),
            )
        log_dir = self.logs_dir()
        log_dir.mkdir(parents=True, exist_ok=True)
        name = self.log_name(spec)
        log_path = log_dir / f"{name}.log"
        if log_path.exists():
            os.replace(log_path, log_dir / f"{name}.prev.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.environment(spec),
            )
        with self._lock:
            self._children[proc.pid] = proc
        host, port = address or (spec.host, 0)
        return ServerHandle(
            name=spec.name,
            backend=self.kind,
            ref=str(proc.pid),
            host=host,
            port=port,
            log_path=str(log_path),
            extra={"pgid": proc.pid, "start_ticks": _start_ticks(proc.pid)},
        )

    def _child(self, handle: ServerHandle) -> subprocess.Popen[bytes] | None:
        with self._lock:
            return self._children.get(int(handle.ref))

    def _is_ours(self, handle: ServerHandle) -> bool:
        """The pid still names the process we started (not a reused pid), and it is not a zombie."""
        pid = int(handle.ref)
        ticks = _start_ticks(pid)
        if ticks is None or ticks != handle.extra.get("start_ticks"):
            return False
        return process_state(pid) not in (None, "Z", "X")

    def status(self, handle: ServerHandle) -> ServerStatus:
        child = self._child(handle)
        if child is not None:
            rc = child.poll()
            if rc is None:
                return ServerStatus("running")
            code, detail = _exit_code(rc)
            return ServerStatus("exited", code, detail)
        if self._is_ours(handle):
            return ServerStatus("running")
        return ServerStatus("exited", None, "not a child of this command; exit code unknown")

    def wait(self, handle: ServerHandle, timeout: float | None = None) -> ServerStatus:
        child = self._child(handle)
        if child is not None:
            try:
                child.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            return self.status(handle)
        return poll_wait(self, handle, timeout)

    def _signal_group(self, handle: ServerHandle, sig: int) -> None:
        pgid = int(handle.extra.get("pgid") or handle.ref)
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self, handle: ServerHandle) -> bool:
        return bool(group_members(int(handle.extra.get("pgid") or handle.ref)))

    def stop(self, handle: ServerHandle, timeout: float = 30.0) -> None:
        child = self._child(handle)
        if child is None and not self._is_ours(handle):
            return  # already gone (or the pid now belongs to someone else: never signal it)
        self._signal_group(handle, signal.SIGTERM)
        status = self.wait(handle, timeout)
        if status.alive:
            self._signal_group(handle, signal.SIGKILL)
            self.wait(handle, 5.0)
        # Engine workers left behind by a dead API process get a short grace, then SIGKILL.
        deadline = time.monotonic() + min(timeout, 3.0)
        while self._group_alive(handle) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._group_alive(handle):
            self._signal_group(handle, signal.SIGKILL)

    def logs(
        self, handle: ServerHandle, follow: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        if not handle.log_path:
            return
        try:
            f = open(handle.log_path, encoding="utf-8", errors="replace")  # noqa: SIM115
        except FileNotFoundError:
            return
        with f:
            partial = ""
            while True:
                chunk = f.readline()
                if chunk:
                    if chunk.endswith("\n"):
                        yield (partial + chunk).rstrip("\n")
                        partial = ""
                    else:
                        partial += chunk
                    continue
                if not follow or (stop is not None and stop.is_set()):
                    break
                if not self.status(handle).alive:
                    yield from (partial + f.read()).splitlines()
                    return
                time.sleep(0.05)
            if partial:
                yield partial
