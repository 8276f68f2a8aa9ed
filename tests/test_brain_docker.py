"""The Docker launcher against a real daemon and the fake vLLM image (.ci/services start).

What a user would check: the container's host config (IPC, shm, memory, ports on 127.0.0.1),
readiness and logs, stop, a crash restarted by the supervisor, an OOM-killed container
diagnosed, a missing image explained. Skipped, with the reason, without a daemon or the image.
"""

from __future__ import annotations

import threading
import time

import pytest

from brain.errors import LaunchError, PortInUse
from brain.events import ServerEventWriter
from brain.launchers.docker import DockerLauncher
from brain.launchers.ports import free_port
from brain.spec import ServerSpec
from brain.supervisor import RestartPolicy, Supervisor, launch

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("marathon_home")]

FAKE_IMAGE, FAKE_TAG = "vllm/vllm-openai", "marathon-ci-fake"
CI_LABEL = {"marathon.ci": "1"}


@pytest.fixture(scope="module")
def client():
    try:
        import docker

        c = docker.from_env(timeout=10)
        c.ping()
    except Exception as exc:  # no daemon here: say so
        pytest.skip(
            f"no Docker daemon reachable ({type(exc).__name__}: {exc}); run .ci/services start"
        )
    try:
        c.images.get(f"{FAKE_IMAGE}:{FAKE_TAG}")
    except Exception:
        pytest.skip(f"{FAKE_IMAGE}:{FAKE_TAG} is not built; run .ci/services start")
    return c


class TrackingLauncher(DockerLauncher):
    """Remembers its containers so cleanup never touches another test worker's."""

    def __init__(self, client) -> None:
        super().__init__(client=client, extra_labels=CI_LABEL)
        self.names: set[str] = set()

    def start(self, spec):
        self.names.add(f"marathon-{spec.name}")
        return super().start(spec)


@pytest.fixture
def launcher(client):
    made = TrackingLauncher(client)
    yield made
    for c in client.containers.list(all=True, filters={"label": "marathon.ci"}):
        if c.name in made.names:
            c.remove(force=True)


def fake_spec(**docker: object) -> ServerSpec:
    port = free_port()
    settings = {"request_gpus": False, "hf_cache": None, "memory": "512m"} | docker
    return ServerSpec(
        name=f"dt{port}",
        backend="docker",
        image=FAKE_IMAGE,
        tag=FAKE_TAG,
        model="Qwen/Qwen2.5-0.5B-Instruct",
        served_model_name="fake",
        port=port,
        max_model_len=2048,
        docker=settings,
        timeouts={"load_timeout_s": 60, "stop_timeout_s": 10},
    )


def test_container_gets_the_spec_host_config_becomes_ready_logs_and_stops(client, launcher):
    spec = fake_spec(ipc_host=True)
    handle, info = launch(spec, launcher)
    try:
        c = client.containers.get(handle.ref)
        hc = c.attrs["HostConfig"]
        assert c.name == f"marathon-{spec.name}"
        assert c.labels["marathon.server"] == spec.name and "marathon.spec-hash" in c.labels
        assert hc["IpcMode"] == "host"
        assert hc["Memory"] == 512 * 1024**2
        assert hc["PortBindings"] == {
            "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(spec.port)}]
        }
        assert not hc.get("DeviceRequests")
        assert info.served_names == ["fake"] and info.max_model_len == 2048
        assert info.timeline.ready and info.timeline.kv_cache_tokens
        lines = list(launcher.logs(handle))
        assert any("Initializing a V1 LLM engine" in ln for ln in lines)
        assert launcher.status(handle).alive
    finally:
        t0 = time.monotonic()
        launcher.stop(handle, timeout=10)
    assert time.monotonic() - t0 < 9  # SIGTERM honoured: no wait for the kill timeout
    assert launcher.status(handle).state == "missing"


def test_shm_size_applies_without_host_ipc(client, launcher):
    spec = fake_spec(ipc_host=False, shm_size="256m")
    handle, _ = launch(spec, launcher)
    try:
        hc = client.containers.get(handle.ref).attrs["HostConfig"]
        assert hc["ShmSize"] == 256 * 1024**2 and hc["IpcMode"] != "host"
    finally:
        launcher.stop(handle, timeout=10)


def test_a_killed_container_is_restarted_by_the_supervisor(client, launcher, tmp_path):
    spec = fake_spec()
    events = ServerEventWriter(f"sqlite:///{tmp_path / 'marathon.db'}")
    policy = RestartPolicy(max_restarts=2, backoff_initial_s=0.1, backoff_max_s=0.5)
    sup = Supervisor(spec, launcher, events, policy=policy, poll_interval_s=0.2)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while sup.ready is None and time.monotonic() < deadline:
        time.sleep(0.1)
    first = sup.handle
    assert first is not None
    client.containers.get(first.ref).kill()
    while (sup.handle is None or sup.handle.ref == first.ref or sup.starts < 2) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    while [e.type for e in events.read(spec.name)].count(
        "ready"
    ) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    second = sup.handle
    sup.request_stop()
    thread.join(30)
    assert result == [0]
    kinds = [e.type for e in events.read(spec.name)]
    assert kinds == ["starting", "ready", "died", "restarting", "starting", "ready", "stopped"]
    died = events.read(spec.name)[2].payload
    assert died["exit_code"] == 137 and died["oom_killed"] is False
    assert launcher.status(second).state == "missing"


def test_an_oom_killed_container_is_diagnosed(launcher):
    spec = fake_spec(memory="48m", memory_swap="48m")
    spec = spec.model_copy(update={"env": {"FAKE_VLLM_ALLOCATE_MB": "400"}})
    with pytest.raises(LaunchError) as exc:
        launch(spec, launcher)
    diag = exc.value.diagnosis
    assert diag is not None and diag.cause == "container_oom_killed"
    assert "docker.memory" in diag.remedy


def test_a_missing_image_is_explained_with_the_pull_command(launcher):
    spec = fake_spec().model_copy(update={"tag": "no-such-tag"})
    with pytest.raises(LaunchError) as exc:
        launcher.start(spec)
    assert exc.value.diagnosis.cause == "image_missing"
    assert "docker pull vllm/vllm-openai:no-such-tag" in exc.value.diagnosis.remedy


def test_a_port_held_by_a_marathon_container_is_refused_naming_it(launcher):
    spec = fake_spec()
    handle, _ = launch(spec, launcher)
    try:
        with pytest.raises(PortInUse) as exc:
            launcher.start(spec.model_copy(update={"name": f"{spec.name}b"}))
        assert f"marathon-{spec.name}" in str(exc.value)
    finally:
        launcher.stop(handle, timeout=10)
