"""wait_until_ready against the sim over loopback: waits through loading, fails fast with a
diagnosis on a fatal line, on exit and on 503, times out with the last output otherwise."""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from brain.errors import LaunchError, NotReady
from brain.launchers.base import ServerStatus
from brain.launchers.ports import free_port
from brain.launchers.process import ProcessLauncher
from brain.launchers.sim import SimLauncher
from brain.readiness import LogWatcher, wait_until_ready
from brain.spec import ServerSpec

KV_FATAL = (
    "ValueError: To serve at least one request with the model's max seq len (4096), "
    "(4.00 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(2.50 GiB). Based on the available memory, the estimated maximum model length is 2560. "
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
    "the engine."
)

pytestmark = pytest.mark.usefixtures("marathon_home")


def sim_spec(**env: str) -> ServerSpec:
    return ServerSpec(
        name=f"r{free_port()}",
        backend="sim",
        model="sim/test-model",
        port=free_port(),
        max_model_len=4096,
        env=dict(env),
    )


def _wait(launcher, handle, spec, load_timeout=30.0, api_key=None):
    stop = threading.Event()
    return wait_until_ready(
        handle.base_url,
        api_key=api_key,
        log_lines=launcher.logs(handle, follow=True, stop=stop),
        is_alive=lambda: launcher.status(handle),
        load_timeout=load_timeout,
        spec=spec,
        stop_logs=stop,
        poll_interval=0.1,
    )


@pytest.fixture
def launched():
    launcher = SimLauncher()
    handles = []

    def start(spec):
        handle = launcher.start(spec)
        handles.append(handle)
        return launcher, handle

    yield start
    for h in handles:
        launcher.stop(h, timeout=5)


def test_refused_connections_during_a_load_delay_mean_still_loading(launched):
    spec = sim_spec(BRAIN_SIM_LOAD_DELAY="1.5")
    launcher, handle = launched(spec)
    t0 = time.monotonic()
    info = _wait(launcher, handle, spec)
    assert time.monotonic() - t0 >= 1.0
    assert info.served_names == ["sim/test-model"]
    assert info.max_model_len == 4096
    assert info.version and "sim" in info.version
    assert info.timeline.kv_cache_tokens and info.timeline.speculative_enabled is False
    assert info.summary()["load_s"] >= 1.0


def test_the_sims_fatal_startup_line_is_diagnosed(launched):
    spec = sim_spec(BRAIN_SIM_FATAL_LOG=KV_FATAL, BRAIN_SIM_LOAD_DELAY="0.5")
    launcher, handle = launched(spec)
    with pytest.raises(LaunchError) as exc:
        _wait(launcher, handle, spec, load_timeout=60)
    diag = exc.value.diagnosis
    assert diag is not None and diag.cause == "kv_cache_too_small"
    assert "2560" in diag.remedy


def test_a_fatal_line_ends_the_wait_while_the_process_is_still_alive(tmp_path):
    # vLLM prints the error, then spends a while shutting down its workers: the wait must not
    # sit through that (nor through the 60 s load timeout).
    script = tmp_path / "slow_death.py"
    script.write_text(f"import time\nprint({KV_FATAL!r}, flush=True)\ntime.sleep(60)\n")
    launcher = ProcessLauncher(executable=[sys.executable, str(script)])
    spec = sim_spec().model_copy(update={"backend": "process"})
    handle = launcher.start(spec)
    try:
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as exc:
            _wait(launcher, handle, spec, load_timeout=60)
        assert time.monotonic() - t0 < 20
        assert launcher.status(handle).alive
        assert exc.value.diagnosis.cause == "kv_cache_too_small"
    finally:
        launcher.stop(handle, timeout=2)


def test_process_exit_before_ready_is_diagnosed_from_the_log_tail(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(
        "import sys\n"
        "print(\"KeyError: 'invalid tool call parser: nope (chose from { hermes })'\")\n"
        "sys.exit(1)\n"
    )
    launcher = ProcessLauncher(executable=[sys.executable, str(script)])
    spec = sim_spec().model_copy(update={"backend": "process"})
    handle = launcher.start(spec)
    with pytest.raises(LaunchError) as exc:
        _wait(launcher, handle, spec)
    assert "exited (code 1)" in str(exc.value)  # whether the line or the exit was seen first
    assert exc.value.diagnosis is not None
    assert exc.value.diagnosis.cause == "unknown_tool_parser"


def test_exit_without_a_known_cause_shows_the_last_output(tmp_path):
    script = tmp_path / "odd.py"
    script.write_text("print('something unusual happened'); raise SystemExit(3)\n")
    launcher = ProcessLauncher(executable=[sys.executable, str(script)])
    spec = sim_spec().model_copy(update={"backend": "process"})
    handle = launcher.start(spec)
    with pytest.raises(LaunchError) as exc:
        _wait(launcher, handle, spec)
    assert "code 3" in str(exc.value)
    assert "something unusual happened" in str(exc.value)


def test_oom_killed_status_is_diagnosed_without_any_log_line():
    port = free_port()
    with pytest.raises(LaunchError) as exc:
        wait_until_ready(
            f"http://127.0.0.1:{port}",
            is_alive=lambda: ServerStatus("oom_killed", 137),
            load_timeout=5,
        )
    assert exc.value.diagnosis.cause == "container_oom_killed"


def test_load_timeout_without_a_fatal_line_is_not_ready():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(NotReady) as exc:
        wait_until_ready(
            f"http://127.0.0.1:{port}",
            is_alive=lambda: True,
            load_timeout=0.8,
            poll_interval=0.1,
        )
    assert time.monotonic() - t0 < 10
    assert "load_timeout_s" in str(exc.value)


class _Dead(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        return None


def test_health_503_means_the_engine_is_dead():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dead)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(LaunchError) as exc:
            wait_until_ready(
                f"http://127.0.0.1:{server.server_address[1]}/v1",
                log_lines=iter(["INFO 11-29 10:00:00 [api_server.py:1] starting"]),
                load_timeout=10,
            )
        assert "503" in str(exc.value)
    finally:
        server.shutdown()


def test_the_api_key_is_sent_to_v1_models_and_a_wrong_one_fails_fast(launched):
    spec = sim_spec().model_copy(update={"api_key": "sekret"})
    launcher, handle = launched(spec)
    info = _wait(launcher, handle, spec, api_key="sekret")
    assert info.served_names == ["sim/test-model"]
    with pytest.raises(LaunchError, match="401"):
        _wait(launcher, handle, spec, api_key="wrong")


def test_settle_waits_for_lines_written_just_before_it_after_a_long_quiet():
    """After a load delay the last line read is old; the ready lines written a moment before
    ``settle`` may still be unread by a polling follower, and must be waited for."""
    release = threading.Event()

    def follower():
        yield "engine config"
        release.wait(5)
        time.sleep(0.1)  # the follower's poll interval, and more
        yield "GPU KV cache size: 4,096 tokens"

    watcher = LogWatcher(follower())
    time.sleep(0.5)  # the load delay: nothing new for longer than the quiet window
    release.set()
    watcher.settle()
    assert "GPU KV cache size: 4,096 tokens" in watcher.text()
