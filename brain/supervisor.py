"""Start a server, wait until it is ready, keep it alive, and record every step as an event.

``launch`` is one start: preflight (GPU memory, preload fingerprint), ``Launcher.start``,
``wait_until_ready`` with the logs followed; a failed start is stopped and raised with its
diagnosis. ``Supervisor`` loops on it: it watches the server (status and ``/health`` every few
seconds), records a ``died`` event with the diagnosis of the log tail, restarts with
exponential backoff, and gives up past ``max_restarts`` within ``window_s`` with a final
``gave_up`` event. SIGTERM/SIGINT stop the server cleanly. ``brain up --watch`` runs it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from brain.diagnose import Diagnosis, diagnose
from brain.errors import BrainError, LaunchError, NoNvidiaGpu, NotReady
from brain.events import EventsWriter, NullEvents
from brain.launchers.base import Launcher, ServerHandle, ServerStatus, log_tail
from brain.readiness import ReadyInfo, wait_until_ready
from brain.spec import ServerSpec
from brain.state import Registry, ServerRecord

FAILED_START_GRACE_S = 3.0
"""SIGTERM to SIGKILL after a failed start (vLLM 0.26 did not exit on SIGTERM after its fatal
line, so the full stop grace was spent waiting for nothing)."""

Preflight = Callable[[ServerSpec], None]
Say = Callable[[str], None]


@dataclass(frozen=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts within any ``window_s``; waits double from
    ``backoff_initial_s`` up to ``backoff_max_s`` while deaths keep coming."""

    max_restarts: int = 5
    window_s: float = 600.0
    backoff_initial_s: float = 2.0
    backoff_max_s: float = 60.0

    def delay(self, recent_restarts: int) -> float:
        return min(self.backoff_max_s, self.backoff_initial_s * 2 ** max(0, recent_restarts))


# --------------------------------------------------------------------------- GPU preflight


class GpuGuard:
    """Before a start: is there room on the GPU? After a stop: wait until VRAM is released.

    Skipped for the sim and for containers without a GPU request; where no NVIDIA GPU exists
    it says so once and lets the start go on (vLLM itself will then explain what it needs).
    """

    def __init__(self, say: Say | None = None, *, release_timeout_s: float = 60.0) -> None:
        self._say = say or (lambda _m: None)
        self._no_gpu_noted = False
        self.release_timeout_s = release_timeout_s

    @staticmethod
    def applies(spec: ServerSpec) -> bool:
        if spec.backend == "sim":
            return False
        return not (spec.backend == "docker" and not spec.docker.request_gpus)

    def _gpus(self) -> list[Any] | None:
        from brain.gpu import query_gpus

        try:
            return query_gpus(timeout=10.0)
        except NoNvidiaGpu as exc:
            if not self._no_gpu_noted:
                self._say(f"no NVIDIA GPU visible ({exc}); skipping the GPU memory check")
                self._no_gpu_noted = True
            return None

    def before_start(self, spec: ServerSpec) -> None:
        if not self.applies(spec):
            return
        from brain.gpu import check_free_memory

        gpus = self._gpus()
        if gpus is None:
            return
        problems = check_free_memory(spec, gpus)
        if problems:
            raise LaunchError(
                "not enough free GPU memory for this server",
                Diagnosis(
                    "gpu_memory_in_use",
                    "free GPU memory is below the requested utilization",
                    problems,
                    "stop what holds the GPU (nvidia-smi lists it) or lower "
                    "gpu_memory_utilization as suggested above",
                ),
            )

    def after_stop(self, spec: ServerSpec) -> None:
        if not self.applies(spec):
            return
        from brain.gpu import wait_memory_released

        if self._gpus() is None:
            return
        left = wait_memory_released(spec, timeout_s=self.release_timeout_s)
        for problem in left:
            self._say(f"GPU memory not released after {self.release_timeout_s:g} s: {problem}")


# --------------------------------------------------------------------------- one start


def launch(
    spec: ServerSpec,
    launcher: Launcher,
    *,
    preflight: Preflight | None = None,
    registry: Registry | None = None,
    supervisor_pid: int | None = None,
    load_timeout: float | None = None,
    fleet: str | None = None,
    replica: int | None = None,
) -> tuple[ServerHandle, ReadyInfo]:
    """Start ``spec`` and wait until it is ready. A failed start is stopped (it would hold the
    port and GPU) and its LaunchError/NotReady raised, with the diagnosis attached.
    ``fleet``/``replica`` are recorded so ``brain ps`` and ``fleet_endpoints`` can group it."""
    check_version = getattr(launcher, "check_version", None)
    if check_version is not None and spec.backend == "process":
        check_version(spec)  # first: the other checks' advice assumes the release has it all
    if preflight is not None:
        preflight(spec)
    spawned = time.monotonic()
    handle = launcher.start(spec)
    if registry is not None:
        registry.put(
            ServerRecord(
                name=spec.name,
                backend=launcher.kind,
                spec=spec.model_dump(mode="json"),
                handle=handle.to_dict(),
                supervisor_pid=supervisor_pid,
                preload=spec.preload.enabled,
                fleet=fleet,
                replica=replica,
            )
        )
    stop_logs = threading.Event()
    try:
        info = wait_until_ready(
            handle.base_url,
            log_lines=launcher.logs(handle, follow=True, stop=stop_logs),
            is_alive=lambda: launcher.status(handle),
            load_timeout=load_timeout or spec.timeouts.load_timeout_s,
            api_key=spec.api_key,
            spec=spec,
            stop_logs=stop_logs,
            started_at=spawned,
        )
    except BaseException as exc:
        # A server that reported a fatal error serves nothing: no requests to drain, and vLLM
        # may not exit on SIGTERM after its fatal line. Kill it soon instead of after the grace.
        failed = isinstance(exc, LaunchError)
        grace = min(spec.timeouts.stop_timeout_s, FAILED_START_GRACE_S) if failed else None
        launcher.stop(handle, timeout=grace or spec.timeouts.stop_timeout_s)
        if registry is not None:
            registry.remove(spec.name)
        raise
    return handle, info


def diagnosis_payload(diag: Diagnosis | None) -> dict[str, Any]:
    if diag is None:
        return {"cause": "unknown", "summary": "no known failure in the log tail"}
    return {
        "cause": diag.cause,
        "summary": diag.summary,
        "evidence": diag.evidence,
        "remedy": diag.remedy,
    }


# --------------------------------------------------------------------------- supervision


class Supervisor:
    """Keeps one server alive; every start, ready, death, restart and give-up is an event."""

    def __init__(
        self,
        spec: ServerSpec,
        launcher: Launcher,
        events: EventsWriter | None = None,
        *,
        policy: RestartPolicy | None = None,
        registry: Registry | None = None,
        preflight: Preflight | None = None,
        after_stop: Preflight | None = None,
        poll_interval_s: float = 3.0,
        health_failures: int = 3,
        say: Say | None = None,
        fleet: str | None = None,
        replica: int | None = None,
    ) -> None:
        self.spec = spec
        self.fleet = fleet
        self.replica = replica
        self.launcher = launcher
        self.events = events or NullEvents()
        self.policy = policy or RestartPolicy()
        self.registry = registry
        self.preflight = preflight
        self.after_stop = after_stop
        self.poll_interval_s = poll_interval_s
        self.health_failures = health_failures
        self.say = say or (lambda _m: None)
        self.handle: ServerHandle | None = None
        self.ready: ReadyInfo | None = None
        self.starts = 0
        self.gave_up = False
        self._restarts: deque[float] = deque()
        self._stop = threading.Event()
        self._restart_requested = threading.Event()
        self._wake = threading.Event()
        self._supervising = False

    # --- control ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask ``run`` to stop the server and return (safe from signal handlers and threads)."""
        self._stop.set()
        self._wake.set()

    def request_restart(self) -> None:
        """Restart the server now (``brain restart`` sends SIGHUP); not counted as a death."""
        self._restart_requested.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the server cleanly, SIGHUP restarts it (main thread only)."""

        def stop(_signum: int, _frame: object) -> None:
            self.request_stop()

        def restart(_signum: int, _frame: object) -> None:
            self.request_restart()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, restart)

    def _record(self, type_: str, payload: dict[str, Any]) -> None:
        try:
            self.events.record(self.spec.name, type_, payload)
        except Exception as exc:  # the server matters more than its diary
            self.say(f"could not record the {type_} event: {exc}")

    # --- the loop ---------------------------------------------------------------------------

    def start_once(self) -> ReadyInfo:
        """One start (with events); raises LaunchError/NotReady after recording the death."""
        self.starts += 1
        self._record(
            "starting",
            {
                "attempt": self.starts,
                "backend": self.launcher.kind,
                "model": self.spec.model,
                "port": self.spec.port,
                "image": self.spec.image_ref if self.spec.backend == "docker" else None,
                "preload": self.spec.preload.enabled,
            },
        )
        try:
            handle, info = launch(
                self.spec,
                self.launcher,
                preflight=self.preflight,
                registry=self.registry,
                supervisor_pid=os.getpid() if self._supervising else None,
                fleet=self.fleet,
                replica=self.replica,
            )
        except (LaunchError, NotReady) as exc:
            diag = getattr(exc, "diagnosis", None)
            self._record(
                "died",
                {"phase": "startup", "attempt": self.starts, "error": str(exc).splitlines()[0]}
                | diagnosis_payload(diag),
            )
            raise
        self.handle, self.ready = handle, info
        self._record("ready", {"attempt": self.starts, "ref": handle.ref} | info.summary())
        self.say(
            f"{self.spec.name} ready on {handle.base_url}/v1 in {info.load_s:.1f} s "
            f"(model {', '.join(info.served_names)}, max_model_len {info.max_model_len})"
        )
        return info

    def run(self) -> int:
        """Start, watch, restart until stopped (0) or the restart cap is reached (1).

        A failure of the very first start is raised (the user is there to read it); later
        failures count as deaths and are retried within the cap.
        """
        self._supervising = True
        try:
            self.start_once()
            while not self._stop.is_set():
                death = self._watch()
                if death is None:
                    break
                if death.get("requested"):
                    self._discard_handle()
                    self._record("restarting", {"reason": "requested (brain restart)"})
                    try:
                        self.start_once()
                        continue
                    except (LaunchError, NotReady) as exc:
                        self.say(f"restart failed: {str(exc).splitlines()[0]}")
                        if not self._restart_with_backoff():
                            break
                        continue
                self._record("died", death)
                self.say(f"{self.spec.name} died: {death.get('summary')} ({death['reason']})")
                self._discard_handle()
                if not self._restart_with_backoff():
                    break
            return 1 if self.gave_up else 0
        finally:
            self._shutdown()

    def _restart_with_backoff(self) -> bool:
        """Wait the backoff and start again, until one start succeeds; False when giving up or
        stopping."""
        while not self._stop.is_set():
            now = time.monotonic()
            while self._restarts and now - self._restarts[0] > self.policy.window_s:
                self._restarts.popleft()
            if len(self._restarts) >= self.policy.max_restarts:
                self.gave_up = True
                self._record(
                    "gave_up",
                    {
                        "restarts": len(self._restarts),
                        "window_s": self.policy.window_s,
                        "reason": f"{len(self._restarts)} restarts within "
                        f"{self.policy.window_s:g} s; not restarting again",
                    },
                )
                self.say(
                    f"{self.spec.name}: giving up after {len(self._restarts)} restarts within "
                    f"{self.policy.window_s:g} s"
                )
                return False
            delay = self.policy.delay(len(self._restarts))
            self._restarts.append(now)
            self._record(
                "restarting",
                {"restarts_in_window": len(self._restarts), "delay_s": round(delay, 3)},
            )
            self.say(f"restarting {self.spec.name} in {delay:g} s")
            if self._stop.wait(delay):
                return False
            try:
                self.start_once()
                return True
            except (LaunchError, NotReady) as exc:
                self.say(f"restart failed: {str(exc).splitlines()[0]}")
        return False

    def _health(self, client: httpx.Client) -> int | None:
        assert self.handle is not None
        try:
            return client.get(f"{self.handle.base_url}/health").status_code
        except httpx.HTTPError:
            return None

    def _watch(self) -> dict[str, Any] | None:
        """Poll until the server dies (return the death payload) or a stop is requested."""
        handle = self.handle
        assert handle is not None
        failures = 0
        with httpx.Client(timeout=5.0) as client:
            while True:
                self._wake.wait(self.poll_interval_s)
                self._wake.clear()
                if self._stop.is_set():
                    return None
                if self._restart_requested.is_set():
                    self._restart_requested.clear()
                    return {"requested": True}
                status = self.launcher.status(handle)
                if not status.alive:
                    return self._death(handle, status, "exited")
                code = self._health(client)
                if code == 200:
                    failures = 0
                    continue
                if code == 503:
                    return self._death(handle, status, "engine dead (/health 503)")
                failures += 1
                if failures >= self.health_failures:
                    return self._death(
                        handle, status, f"unresponsive ({failures} failed /health checks)"
                    )

    def _death(self, handle: ServerHandle, status: ServerStatus, reason: str) -> dict[str, Any]:
        text = log_tail(self.launcher, handle)
        diag = diagnose(
            text, exit_code=status.exit_code, oom_killed=status.oom_killed, spec=self.spec
        )
        return {
            "phase": "running",
            "reason": reason,
            "state": status.state,
            "exit_code": status.exit_code,
            "oom_killed": status.oom_killed,
            "uptime_s": round(time.time() - handle.started_at, 3),
        } | diagnosis_payload(diag)

    def _discard_handle(self) -> None:
        """Stop what is left of a dead server (a hung process, an exited container)."""
        if self.handle is not None:
            self.launcher.stop(self.handle, timeout=self.spec.timeouts.stop_timeout_s)
            self.handle = None
            if self.after_stop is not None:
                self.after_stop(self.spec)

    def _shutdown(self) -> None:
        handle = self.handle
        if handle is not None:
            self.launcher.stop(handle, timeout=self.spec.timeouts.stop_timeout_s)
            self.handle = None
            self._record("stopped", {"reason": "supervisor stopped", "ref": handle.ref})
            if self.after_stop is not None:
                try:
                    self.after_stop(self.spec)
                except BrainError:
                    pass
        if self.registry is not None:
            self.registry.remove(self.spec.name)
