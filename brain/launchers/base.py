"""The Launcher protocol every backend implements, and the plain data it trades in.

A launcher starts one server from a ServerSpec and can later find it again from a
``ServerHandle`` alone (the handle is stored in the brain's registry as JSON), so a second
``brain`` command can stop, inspect or tail a server the first one started. Launchers do not
wait for readiness (``brain.readiness``) nor restart anything (``brain.supervisor``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from brain.spec import ServerSpec

State = Literal["running", "exited", "oom_killed", "missing"]


@dataclass(frozen=True)
class ServerStatus:
    """What a server is doing now. ``missing``: the container or process no longer exists."""

    state: State
    exit_code: int | None = None
    detail: str = ""

    @property
    def alive(self) -> bool:
        return self.state == "running"

    @property
    def oom_killed(self) -> bool:
        return self.state == "oom_killed"

    def describe(self) -> str:
        if self.state == "running":
            return "running"
        if self.state == "oom_killed":
            return f"OOM-killed (exit {self.exit_code})"
        if self.state == "missing":
            return "gone" + (f" ({self.detail})" if self.detail else "")
        code = "unknown code" if self.exit_code is None else f"code {self.exit_code}"
        return f"exited ({code})"


@dataclass
class ServerHandle:
    """How to find a started server again: ``ref`` is a container id or a process id."""

    name: str
    backend: str
    ref: str
    host: str
    port: int
    log_path: str | None = None
    started_at: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerHandle:
        return cls(**data)


@runtime_checkable
class Launcher(Protocol):
    """Start, stop, inspect and read one kind of server (docker, process, sim)."""

    kind: str

    def start(self, spec: ServerSpec) -> ServerHandle:
        """Start the server and return at once (readiness is the caller's business).

        Raises PortInUse when the spec's port is taken, LaunchError when it cannot start.
        """
        ...

    def stop(self, handle: ServerHandle, timeout: float = 30.0) -> None:
        """Ask it to stop, kill it after ``timeout`` seconds, and clean up. Idempotent."""
        ...

    def status(self, handle: ServerHandle) -> ServerStatus: ...

    def logs(
        self, handle: ServerHandle, follow: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        """The server's output lines (stdout and stderr). With ``follow``, keep yielding new
        lines until the server exits and its output is drained, or until ``stop`` is set."""
        ...

    def wait(self, handle: ServerHandle, timeout: float | None = None) -> ServerStatus:
        """Block until the server is no longer running (or ``timeout``); return its status."""
        ...


def poll_wait(
    launcher: Launcher, handle: ServerHandle, timeout: float | None, interval: float = 0.2
) -> ServerStatus:
    """``wait`` for launchers that can only poll: status every ``interval`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = launcher.status(handle)
        if not status.alive:
            return status
        if deadline is not None and time.monotonic() >= deadline:
            return status
        time.sleep(interval)


def log_tail(launcher: Launcher, handle: ServerHandle, lines: int = 200) -> str:
    """The last ``lines`` lines of a server's output, as one text (for diagnosis)."""
    from collections import deque

    try:
        return "\n".join(deque(launcher.logs(handle, follow=False), maxlen=lines))
    except Exception:  # a vanished container has no logs; diagnosis then works without them
        return ""
