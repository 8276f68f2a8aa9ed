"""The server commands end to end with the sim backend: up, ps, status, logs, down, restart,
preload, doctor, and `up --watch` stopped by `down` from another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

from brain.cli import app
from brain.events import ServerEventWriter
from brain.launchers.ports import free_port
from brain.state import Registry

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("marathon_home")


def brain(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def sim_args(name: str, port: int) -> list[str]:
    return ["sim", "--set", f"name={name}", "--set", f"port={port}"]


@pytest.mark.parametrize("profile", ["gemma4-e4b-mtp", "qwen2.5-1.5b-smoke", "sim"])
def test_dry_run_prints_the_command_and_starts_nothing(profile):
    r = brain("up", profile, "--dry-run")
    assert r.exit_code == 0, r.output
    if profile == "sim":
        assert "vllm serve sim/marathon-demo" in r.output
    else:
        assert "docker run -d --name marathon-" in r.output and "--ipc=host" in r.output
    assert Registry().servers() == []


def test_no_gpu_drops_the_gpu_request_from_the_docker_line():
    r = brain("up", "qwen2.5-1.5b-smoke", "--dry-run", "--no-gpu")
    assert r.exit_code == 0 and "--gpus" not in r.output


@pytest.mark.parametrize("command", ["up", "doctor", "preload start"])
def test_help_names_the_default_profile(command):
    # Square brackets in a help text are rich markup to typer: "[gemma4-e4b-mtp]" vanished.
    r = runner.invoke(app, [*command.split(), "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "default: gemma4-e4b-mtp" in r.output


def test_the_fleet_cli_uses_no_private_name_of_the_server_cli():
    # What both CLIs need lives in brain.cli_common; reaching into the other's underscores
    # couples them to each other's internals.
    import ast
    from pathlib import Path

    import brain

    root = Path(brain.__file__).parent
    private = [
        f"{path.relative_to(root)}: from {node.module} import {alias.name}"
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and node.module in ("brain.cli_server", "brain.fleet.cli", "brain.cli_common")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private == []


def test_a_bad_override_is_a_spec_error_without_traceback():
    r = runner.invoke(app, ["up", "sim", "--set", "max_num_seqs=lots"])
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "max_num_seqs" in r.output


def test_up_ps_status_logs_down_with_the_sim(marathon_home):
    name, port = "clisim", free_port()
    r = brain("up", *sim_args(name, port))
    assert r.exit_code == 0, r.output
    assert f"ready {name}: http://127.0.0.1:{port}/v1" in r.output
    try:
        r = brain("ps")
        assert name in r.output and "running" in r.output and str(port) in r.output
        listed = [__import__("json").loads(ln) for ln in brain("ps", "--json").output.splitlines()]
        assert [(s["name"], s["state"], s["url"]) for s in listed] == [
            (name, "running", f"http://127.0.0.1:{port}/v1")
        ]

        again = brain("up", *sim_args(name, port))
        assert again.exit_code == 1 and "already running" in again.output

        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                httpx.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={
                        "model": "sim",
                        "messages": [{"role": "user", "content": "go"}],
                        "max_tokens": 32,
                    },
                    timeout=10,
                )

        t = threading.Thread(target=load, daemon=True)
        t.start()
        try:
            r = brain("status", name, "--interval", "1")
        finally:
            stop.set()
            t.join(10)
        assert r.exit_code == 0, r.output
        assert "ok (200)" in r.output and "max_model_len 32768" in r.output
        assert "KV cache use" in r.output and "speculative" in r.output
        r = brain("status", name, "--json", "--interval", "0.1")
        assert r.exit_code == 0, r.output
        facts = json.loads(r.output)  # one JSON object, nothing else on stdout
        assert facts["server"] == name and facts["started_by_brain"] and facts["alive"]
        assert facts["url"] == f"http://127.0.0.1:{port}/v1" and facts["health"] == "ok"
        assert [m["max_model_len"] for m in facts["models"]] == [32768]
        assert facts["kv_cache_usage"] is not None and facts["requests_waiting"] == 0

        r = brain("logs", name, "--tail", "5")
        assert r.exit_code == 0 and r.output.strip()
    finally:
        r = brain("down", name)
    assert r.exit_code == 0 and f"stopped {name}" in r.output
    assert "no servers" in brain("ps").output
    events = ServerEventWriter(f"sqlite:///{marathon_home / 'marathon.db'}").read(name)
    assert [e.type for e in events] == ["starting", "ready", "stopped"]


def test_up_refuses_a_busy_port_saying_who_holds_it():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = runner.invoke(app, ["up", *sim_args("busy", s.getsockname()[1])])
    assert r.exit_code == 1
    assert "already in use by pid" in r.output and "Traceback" not in r.output


def test_a_fatal_start_prints_the_diagnosis_and_leaves_nothing_running():
    fatal = (
        "ValueError: Free memory on device cuda:0 (3.2/23.5 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 21.2 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes."
    )
    r = runner.invoke(
        app, ["up", *sim_args("fatal", free_port()), "--set", f"env.BRAIN_SIM_FATAL_LOG={fatal}"]
    )
    assert r.exit_code == 1, r.output
    assert "gpu_memory_in_use" in r.output and "fix:" in r.output
    assert Registry().servers() == []


def test_restart_with_a_live_daemon_loads_from_it_and_a_mismatch_is_refused(tmp_path):
    name, port = "rs", free_port()
    hp = free_port()
    sock = str(tmp_path / "sock")
    common = ["--set", f"preload.socket_dir={sock}", "--set", f"preload.health_port={hp}"]
    r = brain("preload", "start", "sim", "--set", f"name={name}", *common)
    assert r.exit_code == 0, r.output
    assert "weight-cache daemon ready" in r.output
    try:
        assert "running" in brain("preload", "status", name).output
        r = brain("up", *sim_args(name, port))
        assert r.exit_code == 0, r.output
        r = brain("restart", name)
        assert r.exit_code == 0, r.output
        assert Registry().get(name).server_spec().preload.enabled  # reused the daemon
        brain("down", name)
        r = runner.invoke(
            app,
            [
                "up",
                *sim_args(name, port),
                *common,
                "--set",
                "preload.enabled=true",
                "--set",
                "tensor_parallel_size=2",
                "--set",
                "gpus=[0,1]",
            ],
        )
        assert r.exit_code == 1, r.output
        assert "WeightCacheKey mismatch on fields" in r.output and "tp_size" in r.output
    finally:
        brain("down", name)
        r = brain("preload", "stop", name)
    assert r.exit_code == 0
    assert "no weight-cache daemon" in brain("preload", "status").output


def test_doctor_passes_for_the_sim_and_names_what_to_fix_otherwise(tmp_path):
    r = brain("doctor", "sim", "--set", f"port={free_port()}")
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "doctor",
            "sim",
            "--backend",
            "process",
            "--set",
            f"model={tmp_path / 'nope'}",
            "--set",
            f"port={free_port()}",
        ],
    )
    assert r.exit_code == 1
    assert "does not exist" in r.output


def test_profiles_lists_each_profile_on_one_line():
    r = brain("profiles")
    assert r.exit_code == 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("  gemma4-e4b-mtp ")]
    assert len(lines) == 1 and "docker" in lines[0]
    assert any(ln.startswith("  gemma4-e4b-mtp-tp2 ") for ln in r.output.splitlines())


def test_up_watch_in_the_foreground_is_stopped_by_down_from_another_command(marathon_home):
    name, port = "watched", free_port()
    env = {**os.environ, "MARATHON_HOME": str(marathon_home)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from brain.cli import app; app()",
            "up",
            *sim_args(name, port),
            "--watch",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rec = Registry().get(name)
            if rec and rec.supervisor_pid == proc.pid:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        else:
            raise AssertionError("the watched server did not come up")
        assert f"pid {proc.pid}" in brain("ps").output
        r = brain("down", name)
        assert r.exit_code == 0, r.output
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    events = [
        e.type for e in ServerEventWriter(f"sqlite:///{marathon_home / 'marathon.db'}").read(name)
    ]
    assert events[:2] == ["starting", "ready"] and "stopped" in events


def test_status_of_a_server_by_url_shows_acceptance_since_start_after_traffic_ended():
    # A server the brain did not start (no registry record), whose traffic ended before the
    # sampling window: the counters since its start still give the acceptance.
    from brain.launchers.sim import SimLauncher
    from brain.readiness import wait_until_ready
    from brain.spec import ServerSpec

    port = free_port()
    spec = ServerSpec(
        name="byurl",
        backend="sim",
        model="sim/test-model",
        served_model_name="testm",
        port=port,
        max_model_len=4096,
        speculative={"method": "ngram", "num_speculative_tokens": 2},
    )
    launcher = SimLauncher()
    handle = launcher.start(spec)
    try:
        wait_until_ready(handle.base_url, is_alive=lambda: launcher.status(handle), spec=spec)
        for _ in range(3):
            httpx.post(
                f"{handle.base_url}/v1/chat/completions",
                json={"model": "testm", "messages": [{"role": "user", "content": "go"}]},
                timeout=10,
            ).raise_for_status()
        r = brain("status", f"{handle.base_url}/v1", "--interval", "0.2")
        as_json = brain("status", f"{handle.base_url}/v1", "--interval", "0.2", "--json")
    finally:
        launcher.stop(handle, timeout=5)
    assert r.exit_code == 0, r.output
    assert "not started by the brain" in r.output and "max_model_len 4096" in r.output
    assert "no drafts in the last 0.2 s; since start: acceptance rate" in r.output
    facts = json.loads(as_json.output)
    assert facts["started_by_brain"] is False and facts["server"] is None
    assert facts["speculative"] is True and facts["speculative_window"] is None
    assert 0 < facts["speculative_since_start"]["acceptance_rate"] <= 1
    assert facts["speculative_since_start"]["drafts"] > 0


@pytest.fixture
def plain_http_server(tmp_path):
    from plain_http import plain_web_server

    with plain_web_server(tmp_path) as url:
        yield url


def test_status_of_a_url_where_nothing_listens_exits_1_with_one_line():
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r = brain("status", f"http://127.0.0.1:{port}/v1", "--interval", "0.1")
    assert r.exit_code == 1, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: nothing answers at http://127.0.0.1:") and "refused" in line


def test_status_of_a_url_that_is_not_vllm_exits_1_with_one_line(plain_http_server):
    r = brain("status", f"{plain_http_server}/v1", "--interval", "0.1")
    assert r.exit_code == 1, r.output
    (line,) = r.output.strip().splitlines()
    assert f"no vLLM server at {plain_http_server}" in line
    assert "HTTP 404 (text/html)" in line
    as_json = brain("status", plain_http_server, "--interval", "0.1", "--json")
    assert as_json.exit_code == 1
    facts = json.loads(as_json.stdout)
    assert facts["health"] == "http_error" and facts["health_status"] == 404
