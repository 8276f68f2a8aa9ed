"""Process and sim launchers, for real over loopback: start, logs, status, stop, busy ports."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from brain.errors import LaunchError, PortInUse
from brain.launchers import make_launcher
from brain.launchers.ports import free_port, port_holder
from brain.launchers.process import ProcessLauncher, group_members
from brain.launchers.sim import SimLauncher
from brain.readiness import wait_until_ready
from brain.spec import ServerSpec
from brain.state import Registry, ServerRecord

pytestmark = pytest.mark.usefixtures("marathon_home")

SIM_EXE = f"{sys.executable} -m brain.sim.vllm_entry"
FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.26"


def sim_spec(backend: str = "sim", **env: str) -> ServerSpec:
    return ServerSpec(
        name=f"t{os.getpid()}-{free_port()}",
        backend=backend,
        model="sim/test-model",
        served_model_name="testm",
        port=free_port(),
        max_model_len=4096,
        env=dict(env),
        timeouts={"load_timeout_s": 20, "stop_timeout_s": 5},
    )


def _ready(launcher, handle, spec):
    return wait_until_ready(
        handle.base_url,
        log_lines=launcher.logs(handle, follow=True),
        is_alive=lambda: launcher.status(handle),
        load_timeout=20,
        spec=spec,
    )


def test_process_launcher_runs_vllm_argv_through_the_configured_executable(monkeypatch):
    monkeypatch.setenv("MARATHON_VLLM_EXECUTABLE", SIM_EXE)
    spec = sim_spec("process")
    launcher = ProcessLauncher()
    assert launcher.command(spec)[:4] == [sys.executable, "-m", "brain.sim.vllm_entry", "serve"]
    handle = launcher.start(spec)
    try:
        info = _ready(launcher, handle, spec)
        assert info.served_names == ["testm"]
        assert info.max_model_len == 4096
        assert launcher.status(handle).alive
        lines = list(launcher.logs(handle))
        assert any("Application startup complete" in ln for ln in lines)
    finally:
        launcher.stop(handle, timeout=5)
    st = launcher.status(handle)
    assert not st.alive
    assert not launcher.status(handle).alive
    launcher.stop(handle, timeout=5)  # idempotent


def test_stop_kills_the_whole_process_group_after_the_grace(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal,time;"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('up', flush=True); time.sleep(60)\n"
    )
    launcher = ProcessLauncher(executable=[sys.executable, str(script)])
    spec = sim_spec("process")
    handle = launcher.start(spec)
    deadline = time.monotonic() + 10
    while not any("up" in ln for ln in launcher.logs(handle)) and time.monotonic() < deadline:
        time.sleep(0.05)
    launcher.stop(handle, timeout=0.5)
    st = launcher.status(handle)
    assert st.state == "exited" and st.exit_code == 128 + signal.SIGKILL
    assert group_members(int(handle.ref)) == []  # the grandchild went too


def test_a_second_launcher_instance_finds_and_stops_the_server_from_its_handle():
    spec = sim_spec()
    first = SimLauncher()
    handle = first.start(spec)
    try:
        _ready(first, handle, spec)
        other = make_launcher("sim")  # another `brain` invocation: no Popen object
        assert other.status(handle).alive
        other.stop(handle, timeout=5)
        assert not other.status(handle).alive
    finally:
        first.stop(handle, timeout=5)


def test_status_reports_the_exit_code_of_a_killed_server():
    spec = sim_spec()
    launcher = SimLauncher()
    handle = launcher.start(spec)
    _ready(launcher, handle, spec)
    os.kill(int(handle.ref), signal.SIGKILL)
    st = launcher.wait(handle, timeout=10)
    assert st.state == "exited" and st.exit_code == 137
    assert "SIGKILL" in st.detail


def test_starting_on_a_busy_port_is_refused_naming_the_holder():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec = sim_spec().model_copy(update={"port": port})
        with pytest.raises(PortInUse) as exc:
            SimLauncher().start(spec)
        assert f"pid {os.getpid()}" in str(exc.value)
        assert str(port) in str(exc.value)


def test_busy_port_held_by_a_brain_server_names_that_server():
    spec = sim_spec()
    launcher = SimLauncher()
    handle = launcher.start(spec)
    try:
        _ready(launcher, handle, spec)
        Registry().put(
            ServerRecord(
                name=spec.name,
                backend="sim",
                spec=spec.model_dump(mode="json"),
                handle=handle.to_dict(),
            )
        )
        holder = port_holder(spec.port)
        assert spec.name in holder and "brain down" in holder
        with pytest.raises(PortInUse):
            SimLauncher().start(spec.model_copy(update={"name": "other"}))
    finally:
        launcher.stop(handle, timeout=5)


def test_missing_executable_is_a_launch_error_with_a_remedy():
    launcher = ProcessLauncher(executable=["definitely-not-vllm-here"])
    with pytest.raises(LaunchError) as exc:
        launcher.start(sim_spec("process"))
    assert exc.value.diagnosis.cause == "vllm_not_installed"
    assert "MARATHON_VLLM_EXECUTABLE" in exc.value.diagnosis.remedy


def test_logs_follow_ends_when_the_server_exits():
    spec = sim_spec()
    launcher = SimLauncher()
    handle = launcher.start(spec)
    _ready(launcher, handle, spec)
    httpx.get(f"{handle.base_url}/health")
    os.kill(int(handle.ref), signal.SIGTERM)
    lines = list(launcher.logs(handle, follow=True))  # returns once the process is gone
    assert any("Application startup complete" in ln for ln in lines)
    assert not launcher.status(handle).alive


def test_a_failed_start_is_killed_soon_not_after_the_whole_stop_grace(tmp_path):
    # vLLM 0.26 on the H200 printed its fatal line and did not exit on SIGTERM: brain up waited
    # the full 30 s grace. The supervisor kills a server that reported a fatal error after a
    # short grace (FAILED_START_GRACE_S), whatever timeouts.stop_timeout_s says.
    from brain.supervisor import FAILED_START_GRACE_S, launch

    fatal = (FIXTURES / "logs" / "brain-up-kvsmall.log").read_text().splitlines()
    line = next(ln for ln in fatal if "KV cache is needed" in ln)
    script = tmp_path / "stubborn_fatal.py"
    script.write_text(
        "import signal, sys, time\n"
        "if sys.argv[1:] == ['--version']: print('0.26.0'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"print({line!r}, flush=True); time.sleep(120)\n"
    )
    launcher = ProcessLauncher(executable=[sys.executable, str(script)])
    spec = ServerSpec.model_validate(
        {
            **sim_spec("process").model_dump(),
            "timeouts": {"load_timeout_s": 60, "stop_timeout_s": 90},
        }
    )
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as err:
        launch(spec, launcher)
    took = time.monotonic() - t0
    assert err.value.diagnosis.cause == "kv_cache_too_small"
    assert took < FAILED_START_GRACE_S + 30 < spec.timeouts.stop_timeout_s
    (proc,) = launcher._children.values()
    assert proc.poll() == -signal.SIGKILL
