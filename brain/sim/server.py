"""Running the sim on a real port: load delay, vLLM log lines, connection faults, clean stops.

``SimServer.serve()`` is the whole life of one server on the current event loop, in the order
vLLM goes through it: print the engine config, "load" for ``load_delay`` seconds with the port
closed (clients get ECONNREFUSED, as while vLLM loads weights), optionally die with the
configured fatal log line, bind, print the ready lines, then serve with uvicorn until stopped.

It also implements the app's ``SimControl``: dropping one connection (a cut stream), closing
and later re-opening the listening socket (real refused connections), and exiting (``os._exit``
when it owns the process, a hard stop of the server when it runs in a thread).

``running_sim(config)`` runs all this in a background thread for tests and embedding.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, Literal, TypeVar

import httpx
import uvicorn

from brain.sim.app import create_app
from brain.sim.config import SimConfig
from brain.sim.logs import (
    LogFn,
    engine_config_lines,
    listening_line,
    ready_lines,
    silent_log,
    uvicorn_line,
    vllm_line,
)
from brain.sim.policy import Policy

ExitMode = Literal["process", "server"]
T = TypeVar("T")


def new_server_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed, as vLLM's API server runs (``uvloop.run(run_server(args))``
    in ``vllm/entrypoints/cli/serve.py``; uvicorn then picks the httptools parser, which
    ``fastapi[standard]`` installs with vLLM). The sim serves on the same stack, so a client
    meets the same kind of server, and at a hundred streams the sim's own CPU stays small
    beside the client's (the pure-Python h11 parser on asyncio's loop cost it about a fifth
    more). asyncio's loop where uvloop is missing (Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_on_server_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on :func:`new_server_loop`'s loop."""
    with asyncio.Runner(loop_factory=new_server_loop) as runner:
        return runner.run(main)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _client_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handling (the owner decides) and with a startup callback."""

    def __init__(self, config: uvicorn.Config, on_started: Any):
        super().__init__(config)
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()

    def protocol_factory(self) -> Any:
        """What ``startup`` gives ``create_server``, to listen again after an outage (the
        loop's server object does not expose it on uvloop)."""
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )

        return create_protocol


class SimServer:
    """One simulated vLLM server; ``serve()`` runs it on the current loop until stopped."""

    def __init__(
        self,
        config: SimConfig,
        *,
        policy: Policy | None = None,
        log: LogFn = silent_log,
        exit_mode: ExitMode = "server",
    ):
        self.config = config
        self.log = log
        self.exit_mode = exit_mode
        self.host = config.host
        self._sock: socket.socket | None = None
        if config.port == 0 and config.timing.load_delay == 0:
            self._sock = _bind(config.host, 0)  # keep it: no window for another process to take it
            self.port = int(self._sock.getsockname()[1])
        else:
            self.port = config.port or _free_port(config.host)
        self.app = create_app(config, policy=policy, control=self, log=log)
        self.exit_code: int | None = None
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._uv: _Uvicorn | None = None
        self._refusing = False

    @property
    def base_url(self) -> str:
        host = _client_host(self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    # ------------------------------------------------------------------ life

    async def serve(self) -> int:
        """Load, bind, serve; returns the exit code (0 stopped, 1 fatal log, else an exit fault)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        started = time.monotonic()
        for line in engine_config_lines(self.config):
            self.log(line)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=self.config.timing.load_delay)
        if self._stop.is_set():
            self._close_presocket()
            return 0
        if self.config.fatal_log:
            for line in self.config.fatal_log.splitlines():
                self.log(vllm_line(line, "core.py:709", "ERROR"))
            self._close_presocket()
            return 1
        for line in ready_lines(self.config, time.monotonic() - started):
            self.log(line)
        sock = self._sock or _bind(self.host, self.port)
        self._sock = None
        self.log(listening_line(self.config, self.host, self.port))
        uv_config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=5,
        )
        self._uv = _Uvicorn(uv_config, self._announce_started)
        if self._stop.is_set():
            self._uv.should_exit = True
        await self._uv.serve(sockets=[sock])
        with contextlib.suppress(OSError):
            sock.close()
        return self.exit_code if self.exit_code is not None else 0

    def _announce_started(self) -> None:
        self.log(uvicorn_line(f"Started server process [{os.getpid()}]"))
        self.log(uvicorn_line("Waiting for application startup."))
        self.log(uvicorn_line("Application startup complete."))
        self.ready.set()

    def _close_presocket(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def request_stop(self, force: bool = False) -> None:
        """Ask the server to stop; safe from any thread and from signal handlers."""
        self._stop_requested = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._stop_now, force)

    def _stop_now(self, force: bool) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._uv is not None:
            if self._uv.should_exit and not force:
                force = True  # a second request hurries the first
            self._uv.should_exit = True
            if force:
                self._uv.force_exit = True
                self._abort_connections()

    # ---------------------------------------------------------- SimControl

    def _connections(self) -> list[Any]:
        if self._uv is None:
            return []
        return list(self._uv.server_state.connections)

    def open_clients(self) -> list[tuple[str, int]]:
        """The (host, port) of each client connection open now: a client that reuses its
        connection shows one port however many requests it made."""
        return [
            tuple(client)  # type: ignore[misc]
            for connection in self._connections()
            if (client := getattr(connection, "client", None))
        ]

    def _abort_connections(self) -> None:
        for connection in self._connections():
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()

    def drop_connection(self, client: tuple[str, int] | None) -> bool:
        if client is None:
            return False
        for connection in self._connections():
            if tuple(getattr(connection, "client", None) or ()) == tuple(client):
                connection.transport.close()  # flushes what was written, then closes
                return True
        return False

    def refuse_connections(self, seconds: float) -> None:
        """Close the listening socket now and every open connection; re-open after ``seconds``."""
        if self._uv is None or self._refusing:
            return
        self._refusing = True
        factory = self._uv.protocol_factory()
        for server in list(self._uv.servers):
            server.close()
        self._abort_connections()
        self.log(
            vllm_line(f"Simulated outage: refusing connections for {seconds:g} s", level="WARNING")
        )
        asyncio.get_running_loop().create_task(self._reopen(seconds, factory))

    async def _reopen(self, seconds: float, factory: Any) -> None:
        await asyncio.sleep(seconds)
        if self._uv is None or self._uv.should_exit:
            return
        sock = _bind(self.host, self.port)
        server = await asyncio.get_running_loop().create_server(factory, sock=sock, backlog=128)
        self._uv.servers = [server]
        self._refusing = False
        self.log(vllm_line("Simulated outage over: accepting connections again"))

    def exit_process(self, code: int) -> None:
        if self.exit_mode == "process":
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        self.exit_code = code
        if self._uv is not None:
            for server in self._uv.servers:
                server.close()
        self._stop_now(force=True)


class RunningSim:
    """A SimServer in a background thread, with the URLs a client needs."""

    def __init__(self, config: SimConfig, *, policy: Policy | None = None, log: LogFn = silent_log):
        self.config = config
        self.server = SimServer(config, policy=policy, log=log, exit_mode="server")
        self._thread = threading.Thread(
            target=self._run, name=f"brain-sim-{self.port}", daemon=True
        )
        self._error: BaseException | None = None
        self.exit_code: int | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def state(self) -> Any:
        """The app's shared state (engine, policy, fault plan), for tests that look inside."""
        return self.server.app.state.sim

    def _run(self) -> None:
        try:
            self.exit_code = run_on_server_loop(self.server.serve())
        except BaseException as exc:  # reported by wait_ready / stop
            self._error = exc

    def start(self, wait: bool = True, timeout: float = 30.0) -> RunningSim:
        self._thread.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until /health answers; raise if the server died (fatal log, crash) or timed out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise RuntimeError(
                    f"simulated server ended before it was ready (exit code {self.exit_code})"
                ) from self._error
            if self.server.ready.is_set():
                try:
                    httpx.get(self.base_url + "/health", timeout=1.0)
                    return
                except httpx.TransportError:
                    pass
            time.sleep(0.01)
        raise TimeoutError(f"simulated server on {self.base_url} not ready after {timeout} s")

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (fast: open connections are aborted) and join its thread."""
        self.server.request_stop(force=True)
        self._thread.join(timeout)


@contextlib.contextmanager
def running_sim(
    config: SimConfig | None = None,
    *,
    policy: Policy | None = None,
    wait: bool = True,
    timeout: float = 30.0,
    log: LogFn = silent_log,
) -> Iterator[RunningSim]:
    """Serve ``config`` in a background thread: ``with running_sim(cfg) as sim: sim.base_url``.

    Returns once /health answers (after the load delay), unless ``wait=False``.
    """
    sim = RunningSim(config or SimConfig(), policy=policy, log=log)
    sim.start(wait=wait, timeout=timeout)
    try:
        yield sim
    finally:
        sim.stop()
