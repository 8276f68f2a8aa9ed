"""``brain sim`` as a process of its own, for tests and benchmarks that must kill a server.

An in-process sim (``running_sim``) shares the caller's interpreter, so it cannot die by
SIGKILL nor be measured apart; this one can, and it can come back on the same port.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["SimProcess"]

_READY = re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on http://[\d.]+:(\d+)")


class SimProcess:
    """One ``brain sim`` process; ``port=0`` asks the OS and learns the port from its log."""

    def __init__(
        self, args: list[str], log: Path, *, port: int = 0, env: dict[str, str] | None = None
    ) -> None:
        self.args = args
        self.log = log
        self.port = port
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SimProcess:
        self.log.write_text("")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from brain.cli import app; app()", "sim",
                 "--port", str(self.port), *self.args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = 60) -> SimProcess:
        """Until the server logs vLLM's ready lines; raises with the log when it exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            found = _READY.search(text)
            if found and "Application startup complete." in text:
                self.port = int(found.group(1))
                return self
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the simulated server exited:\n{text}")
            time.sleep(0.05)
        raise RuntimeError(f"the simulated server did not start:\n{self.log.read_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown, connections cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
