"""Wait until a starting vLLM server is really ready, or fail fast with the reason.

vLLM binds its port late: while it loads weights, profiles memory and captures graphs, the
port refuses connections (or the request times out), so that means "still loading", bounded by
the load timeout. ``/health`` 200 then ``/v1/models`` and ``/version`` means ready. A 503, or
the process/container exiting, means dead. Meanwhile the logs are followed in a thread: a
fatal line (``brain.diagnose.is_fatal_line``) ends the wait at once with a diagnosis instead of
a timeout many minutes later, and the startup timeline is built from the same lines.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from brain.diagnose import diagnose, is_fatal_line
from brain.errors import LaunchError, NotReady
from brain.launchers.base import ServerStatus
from brain.spec import ServerSpec
from brain.timeline import StartupTimeline, TimelineParser
from brain.urls import server_root

# After a fatal line vLLM usually prints the rest of the traceback; give it this long so the
# diagnosis sees the whole story, not half a line.
_FATAL_GRACE_S = 0.3
_TAIL_LINES = 400


@dataclass
class ReadyInfo:
    """What the ready server reports about itself, and how its startup went."""

    served_names: list[str]
    max_model_len: int | None
    version: str | None
    load_s: float
    timeline: StartupTimeline = field(default_factory=StartupTimeline)

    def summary(self) -> dict[str, Any]:
        """The ``ready`` server event payload: load time, KV cache, graphs, speculation."""
        t = self.timeline
        return {
            "served_names": self.served_names,
            "max_model_len": self.max_model_len,
            "version": self.version,
            "load_s": round(self.load_s, 3),
            "weights_load_s": t.weights_load_s,
            "weights_from_cache_tensors": t.weights_from_cache_tensors,
            "weight_cache_fallback": t.weight_cache_fallback,
            "kv_cache_gib": t.available_kv_cache_gib,
            "kv_cache_tokens": t.kv_cache_tokens,
            "max_concurrency": t.max_concurrency,
            "graph_capture_s": t.graph_capture_s,
            "torch_compile_s": t.torch_compile_s,
            "speculative": t.speculative_enabled,
            "speculative_config": t.speculative.model_dump() if t.speculative else None,
            "timeline": t.model_dump(exclude_none=True),
        }


class LogWatcher:
    """Follows a log iterator in a daemon thread: keeps the tail, the timeline, the first fatal
    line. ``stop()`` tells a well-behaved follower (one that honours a stop event) to end."""

    def __init__(
        self,
        lines: Iterator[str] | None,
        stop: threading.Event | None = None,
        started_at: float | None = None,
    ) -> None:
        self.tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self.parser = TimelineParser(started_at)
        self.fatal = threading.Event()
        self.fatal_line: str | None = None
        self.stop_event = stop or threading.Event()
        self.finished = threading.Event()
        self._last_line_at = time.monotonic()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if lines is not None:
            self._thread = threading.Thread(
                target=self._run, args=(lines,), name="log-watcher", daemon=True
            )
            self._thread.start()
        else:
            self.finished.set()

    def _run(self, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                with self._lock:
                    self.tail.append(line)
                    self._last_line_at = time.monotonic()
                    self.parser.feed(line, at=time.monotonic())
                if self.fatal_line is None and is_fatal_line(line):
                    self.fatal_line = line
                    self.fatal.set()
                if self.stop_event.is_set():
                    break
        except Exception:  # a vanished container ends its log stream with an error
            pass
        finally:
            self.finished.set()

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.tail)

    def settle(self, quiet_s: float = 0.2, limit_s: float = 2.0) -> None:
        """Wait until the follower has caught up: finished, or no new line for ``quiet_s``,
        counted from this call at the earliest. Lines written just before the call may not
        have been read yet (a file follower polls): after a long load delay the last line
        *read* is old, and quiet since then said nothing about the ready lines still in the
        file."""
        called = time.monotonic()
        deadline = called + limit_s
        while time.monotonic() < deadline and not self.finished.is_set():
            if time.monotonic() - max(self._last_line_at, called) >= quiet_s:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        self.stop_event.set()


def _last_lines(text: str, n: int = 15) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()][-n:]
    return "\n".join("  | " + ln for ln in lines) if lines else "  (no output)"


def _status_of(is_alive: Callable[[], bool | ServerStatus] | None) -> ServerStatus:
    if is_alive is None:
        return ServerStatus("running")
    value = is_alive()
    if isinstance(value, ServerStatus):
        return value
    return ServerStatus("running") if value else ServerStatus("exited")


def _get_json(client: httpx.Client, url: str, headers: dict[str, str]) -> Any:
    try:
        resp = client.get(url, headers=headers)
        if resp.status_code == 200:
            return resp.json()
        if resp.status_code == 401:
            return 401
    except (httpx.HTTPError, ValueError):
        pass
    return None


def wait_until_ready(
    base_url: str,
    *,
    log_lines: Iterator[str] | None = None,
    is_alive: Callable[[], bool | ServerStatus] | None = None,
    load_timeout: float = 1800.0,
    api_key: str | None = None,
    spec: ServerSpec | None = None,
    poll_interval: float = 0.25,
    stop_logs: threading.Event | None = None,
    started_at: float | None = None,
) -> ReadyInfo:
    """Block until the server at ``base_url`` is ready; return what it reports.

    ``log_lines``: the server's output, followed (give an iterator that keeps yielding, e.g.
    ``launcher.logs(handle, follow=True, stop=stop_logs)``). ``is_alive``: returns a bool or
    a ``ServerStatus`` (which also carries the exit code and OOM kill for the diagnosis).
    ``started_at``: ``time.monotonic()`` at the spawn; load time and the timeline count from
    it (else from this call).
    Raises LaunchError (with a Diagnosis when one is recognised) on a fatal line, on exit, on
    503; NotReady when ``load_timeout`` passes with none of those.
    """
    root = server_root(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = started_at if started_at is not None else time.monotonic()
    watcher = LogWatcher(log_lines, stop_logs, started)
    deadline = started + load_timeout
    try:
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0)) as client:
            while True:
                if watcher.fatal.is_set():
                    time.sleep(_FATAL_GRACE_S)
                    text = watcher.text()
                    status = _status_of(is_alive)
                    diag = diagnose(
                        text,
                        exit_code=status.exit_code,
                        oom_killed=status.oom_killed,
                        spec=spec,
                    )
                    gone = "" if status.alive else f" (and {status.describe()})"
                    raise LaunchError(
                        f"the server reported a fatal error while starting{gone}"
                        + ("" if diag else f":\n  > {watcher.fatal_line}"),
                        diag,
                    )
                status = _status_of(is_alive)
                if not status.alive:
                    watcher.settle(limit_s=3.0)
                    text = watcher.text()
                    diag = diagnose(
                        text,
                        exit_code=status.exit_code,
                        oom_killed=status.oom_killed,
                        spec=spec,
                    )
                    raise LaunchError(
                        f"the server {status.describe()} before it was ready"
                        + ("" if diag else f"; last output:\n{_last_lines(text)}"),
                        diag,
                    )
                try:
                    health = client.get(f"{root}/health")
                except (httpx.TransportError, httpx.TimeoutException):
                    health = None  # refused or timed out: still loading
                if health is not None and health.status_code == 200:
                    models = _get_json(client, f"{root}/v1/models", headers)
                    if models == 401:
                        raise LaunchError(
                            "the server is up but rejects the API key on /v1/models (401): "
                            "pass the key the server was started with (spec api_key)"
                        )
                    if isinstance(models, dict):
                        version = _get_json(client, f"{root}/version", headers) or {}
                        watcher.settle()
                        data = models.get("data") or []
                        return ReadyInfo(
                            served_names=[m.get("id") for m in data if m.get("id")],
                            max_model_len=(data[0].get("max_model_len") if data else None),
                            version=version.get("version"),
                            load_s=time.monotonic() - started,
                            timeline=watcher.parser.timeline.model_copy(deep=True),
                        )
                elif health is not None and health.status_code == 503:
                    watcher.settle()
                    text = watcher.text()
                    diag = diagnose(text, exit_code=None, oom_killed=False, spec=spec)
                    raise LaunchError(
                        "the server answers /health with 503: its engine is dead", diag
                    )
                if time.monotonic() >= deadline:
                    raise NotReady(
                        f"not ready after {load_timeout:g} s (no fatal line seen; it may still "
                        "be loading: raise timeouts.load_timeout_s). Last output:\n"
                        + _last_lines(watcher.text())
                    )
                watcher.fatal.wait(poll_interval)
    finally:
        watcher.stop()
