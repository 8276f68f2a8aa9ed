"""`brain` on a first day: doctor does not fail on a media folder nobody chose and names who
holds a port, the profiles follow the seed's OOM score, and Docker's refusals (a restricted
runtime, a pull that cannot work) come with their cause and a fix."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from brain.doctor import check_media, check_port
from brain.launchers.docker import docker_api_diagnosis
from brain.profiles import apply_overrides, list_profiles, load_profile

PROFILES = [n for n in list_profiles() if n not in ("presets", "sim")]


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_doctor_warns_about_the_default_media_folder_not_made_yet(fresh_home: Path) -> None:
    spec = load_profile("gemma4-e4b-mtp")
    (check,) = check_media(spec)
    assert check.level == "warn", check
    assert f"mkdir -p {fresh_home / 'marathon' / 'media'}" in check.message
    (fresh_home / "marathon" / "media").mkdir(parents=True)
    assert check_media(spec)[0].level == "ok"


def test_doctor_fails_a_missing_media_folder_the_process_backend_needs(fresh_home: Path) -> None:
    spec = apply_overrides(
        load_profile("gemma4-e4b-mtp"),
        ["backend=process", f"allowed_local_media_path={fresh_home / 'nope'}"],
    )
    (check,) = check_media(spec)
    assert check.level == "fail" and "create it" in check.message


def test_doctor_names_the_process_holding_the_port() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        spec = apply_overrides(load_profile("gemma4-e4b-mtp"), [f"port={port}"])
        (check,) = check_port(spec)
    assert check.level == "fail"
    assert f"pid {os.getpid()}" in check.message


@pytest.mark.parametrize("name", PROFILES)
def test_profiles_let_the_kernel_kill_the_server_first(name: str) -> None:
    """The seed's --oom-score-adj=300: never negative (a restricted Docker cannot lower it)."""
    spec = load_profile(name)
    if spec.docker.oom_score_adj is not None:
        assert spec.docker.oom_score_adj == 300


RUNC_OOM = (
    "failed to create task for container: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: write /proc/self/oom_score_adj: permission denied: unknown"
)
RUNC_OTHER = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to "
    "start container process: error during container init: error setting cgroup config for "
    "procHooks process: openat2 /sys/fs/cgroup/memory.max: no such file or directory: unknown"
)
PULLS = {
    "registry_unreachable": 'Get "https://registry-1.docker.io/v2/": dial tcp: lookup '
    "registry-1.docker.io on 127.0.0.53:53: server misbehaving",
    "registry_auth": "pull access denied for vllm/vllm-openai-private, repository does not "
    "exist or may require 'docker login': denied: requested access to the resource is denied",
    "image_not_found": "manifest for vllm/vllm-openai:v9.9.9 not found: manifest unknown: "
    "manifest unknown",
    "registry_rate_limited": "toomanyrequests: You have reached your pull rate limit. You may "
    "increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
}


def test_a_restricted_docker_refusing_the_oom_score_says_what_to_change() -> None:
    spec = apply_overrides(load_profile("gemma4-e4b-mtp"), ["docker.oom_score_adj=-500"])
    diag = docker_api_diagnosis(RUNC_OOM, spec)
    assert diag is not None and diag.cause == "docker_oom_score_adj_denied"
    assert "docker.oom_score_adj to 0 or more" in diag.remedy and "-500" in diag.remedy
    other = docker_api_diagnosis(RUNC_OTHER, spec)
    assert other is not None and other.cause == "docker_runtime_refused"
    assert "docker info" in other.remedy


@pytest.mark.parametrize("cause", sorted(PULLS))
def test_a_failed_pull_says_why_and_what_to_do(cause: str) -> None:
    spec = load_profile("gemma4-e4b-mtp")
    diag = docker_api_diagnosis(PULLS[cause], spec, pulling=True)
    assert diag is not None and diag.cause == cause
    assert diag.evidence == [PULLS[cause]]
    assert "brain up --pull" in diag.remedy or "docker load" in diag.remedy
