"""The supervisor over real sim processes: deaths are diagnosed, recorded in a real SQLite
file the pilot can read, restarted with backoff, and given up on past the cap."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from brain.errors import LaunchError
from brain.events import ServerEventWriter
from brain.launchers.ports import free_port
from brain.launchers.sim import SimLauncher
from brain.spec import ServerSpec
from brain.state import Registry
from brain.supervisor import RestartPolicy, Supervisor

FATAL = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 23.55 GiB"
)

pytestmark = pytest.mark.usefixtures("marathon_home")
FAST = RestartPolicy(max_restarts=3, window_s=600, backoff_initial_s=0.05, backoff_max_s=0.2)


@pytest.fixture
def events(tmp_path):
    writer = ServerEventWriter(f"sqlite:///{tmp_path / 'marathon.db'}")
    yield writer
    writer.close()


def sim_spec(**env: str) -> ServerSpec:
    return ServerSpec(
        name=f"s{free_port()}",
        backend="sim",
        model="sim/test-model",
        port=free_port(),
        max_model_len=4096,
        env=dict(env),
        timeouts={"load_timeout_s": 20, "stop_timeout_s": 5},
    )


def wait_for(pred, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_in_thread(sup: Supervisor) -> tuple[threading.Thread, list]:
    result: list = []
    t = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    t.start()
    return t, result


def types(events, name):
    return [e.type for e in events.read(name)]


def test_a_killed_server_is_restarted_and_every_step_is_recorded(events, tmp_path):
    spec = sim_spec()
    launcher = SimLauncher()
    sup = Supervisor(spec, launcher, events, policy=FAST, registry=Registry(), poll_interval_s=0.1)
    thread, result = run_in_thread(sup)
    wait_for(lambda: sup.ready is not None and sup.handle is not None, what="first ready")
    first = sup.handle
    assert Registry().get(spec.name).supervisor_pid == os.getpid()
    os.kill(int(first.ref), signal.SIGKILL)
    wait_for(
        lambda: (
            sup.handle is not None
            and sup.handle.ref != first.ref
            and sup.starts == 2
            and "ready" in types(events, spec.name)[3:]
        ),
        what="restart",
    )
    assert httpx.get(f"{sup.handle.base_url}/health").status_code == 200
    second = sup.handle
    sup.request_stop()
    thread.join(20)
    assert result == [0]
    assert not launcher.status(second).alive
    assert Registry().get(spec.name) is None

    seen = types(events, spec.name)
    assert seen == ["starting", "ready", "died", "restarting", "starting", "ready", "stopped"]
    recorded = events.read(spec.name)
    died = recorded[2].payload
    assert died["exit_code"] == 137 and died["reason"] == "exited"
    assert died["cause"] == "killed"  # SIGKILL without a fatal line
    ready = recorded[1].payload
    assert ready["load_s"] > 0 and ready["kv_cache_tokens"] and ready["speculative"] is False
    assert "timeline" in ready

    # The pilot reads the same table through its own store.
    from pilot.store.event_store import EventStore

    store = EventStore(f"sqlite:///{tmp_path / 'marathon.db'}")
    pilot_view = [(s, t) for _at, s, t, _p in store.server_events()]
    assert (spec.name, "died") in pilot_view


class FailsAfterFirstStart(SimLauncher):
    """Every start after the first prints a fatal CUDA OOM line: a crash loop."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    def environment(self, spec):
        env = super().environment(spec)
        self.started += 1
        if self.started > 1:
            env["BRAIN_SIM_FATAL_LOG"] = FATAL
        return env


def test_a_crash_loop_stops_at_the_restart_cap_with_a_final_event(events):
    spec = sim_spec()
    launcher = FailsAfterFirstStart()
    policy = RestartPolicy(max_restarts=2, window_s=600, backoff_initial_s=0.05, backoff_max_s=0.1)
    sup = Supervisor(spec, launcher, events, policy=policy, poll_interval_s=0.1)
    thread, result = run_in_thread(sup)
    wait_for(lambda: sup.ready is not None, what="ready")
    os.kill(int(sup.handle.ref), signal.SIGKILL)
    thread.join(60)
    assert result == [1] and sup.gave_up
    seen = types(events, spec.name)
    assert seen[-1] == "gave_up"
    assert seen.count("restarting") == 2
    startup_deaths = [e.payload for e in events.read(spec.name) if e.type == "died"][1:]
    assert startup_deaths and all(d["phase"] == "startup" for d in startup_deaths)
    assert all(d["cause"] == "cuda_oom" for d in startup_deaths)
    gave_up = events.read(spec.name)[-1].payload
    assert gave_up["restarts"] == 2 and "not restarting again" in gave_up["reason"]


def test_a_failed_first_start_is_raised_with_its_diagnosis_and_recorded(events):
    spec = sim_spec(BRAIN_SIM_FATAL_LOG=FATAL)
    sup = Supervisor(spec, SimLauncher(), events, policy=FAST, poll_interval_s=0.1)
    with pytest.raises(LaunchError) as exc:
        sup.run()
    assert exc.value.diagnosis.cause == "cuda_oom"
    assert types(events, spec.name) == ["starting", "died"]
    assert events.read(spec.name)[1].payload["remedy"]


def test_an_engine_that_answers_503_is_treated_as_dead_and_replaced(events):
    spec = sim_spec(BRAIN_SIM_FAULTS="engine_dead@1")
    launcher = SimLauncher()
    sup = Supervisor(spec, launcher, events, policy=FAST, poll_interval_s=0.1)
    thread, _ = run_in_thread(sup)
    wait_for(lambda: sup.ready is not None, what="ready")
    first = sup.handle
    httpx.post(
        f"{first.base_url}/v1/chat/completions",
        json={"model": "sim/test-model", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    wait_for(lambda: sup.handle is not None and sup.handle.ref != first.ref, what="replacement")
    sup.request_stop()
    thread.join(20)
    died = [e.payload for e in events.read(spec.name) if e.type == "died"]
    assert died[0]["reason"] == "engine dead (/health 503)"
    assert not launcher.status(first).alive


def test_a_requested_restart_is_not_counted_as_a_death(events):
    spec = sim_spec()
    sup = Supervisor(spec, SimLauncher(), events, policy=FAST, poll_interval_s=0.1)
    thread, _ = run_in_thread(sup)
    wait_for(lambda: sup.ready is not None, what="ready")
    first = sup.handle
    sup.request_restart()
    wait_for(
        lambda: sup.handle is not None and sup.handle.ref != first.ref and sup.starts == 2,
        what="restart",
    )
    wait_for(lambda: types(events, spec.name).count("ready") == 2, what="second ready")
    sup.request_stop()
    thread.join(20)
    assert "died" not in types(events, spec.name)
