"""The brain CLI's last rough edges (issue 37): ``--json`` on ``profiles`` and ``doctor``, shell
completion of profile, preset, server and choice values (the real ``brain`` executable, as the
shell calls it), choices shown in the help, and ``--gpus`` refusing what is not a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from brain.cli import app
from brain.launchers.ports import free_port
from brain.profiles import list_presets, list_profiles
from brain.state import Registry, ServerRecord

pytestmark = pytest.mark.usefixtures("marathon_home")
runner = CliRunner()
BRAIN = Path(sys.executable).with_name("brain")


def test_profiles_json_is_one_object_per_profile_and_preset():
    r = runner.invoke(app, ["profiles", "--json"])
    assert r.exit_code == 0, r.output
    objects = [json.loads(line) for line in r.output.splitlines()]
    profiles = {o["name"]: o for o in objects if o["kind"] == "profile"}
    presets = {o["name"]: o for o in objects if o["kind"] == "preset"}
    assert sorted(profiles) == list_profiles() and presets.keys() == list_presets().keys()
    sim = profiles["sim"]
    assert (sim["backend"], sim["model"], sim["error"]) == ("sim", "sim/marathon-demo", None)
    assert presets["vram-16gb"]["description"] == list_presets()["vram-16gb"]


def test_doctor_json_gives_each_check_and_the_verdict_with_the_exit_code(tmp_path: Path):
    r = runner.invoke(app, ["doctor", "sim", "--json", "--set", f"port={free_port()}"])
    assert r.exit_code == 0, r.output
    facts = json.loads(r.output)
    assert (facts["server"], facts["backend"], facts["ok"]) == ("sim", "sim", True)
    assert facts["checks"] and all(c["level"] in ("ok", "warn") for c in facts["checks"])
    args = ["doctor", "sim", "--json", "--backend", "process", "--set", f"model={tmp_path / 'x'}"]
    r = runner.invoke(app, args)
    assert r.exit_code == 1
    facts = json.loads(r.output)
    assert facts["ok"] is False
    assert any(c["level"] == "fail" and "does not exist" in c["message"] for c in facts["checks"])


def complete(line: str) -> list[str]:
    """What bash gets from ``brain`` for ``line`` (the word after its last space)."""
    words = line.split(" ")
    env = {
        **os.environ,
        "_BRAIN_COMPLETE": "complete_bash",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    done = subprocess.run([BRAIN], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_completion_offers_profiles_presets_servers_and_choices():
    assert complete("brain up ") == list_profiles()
    assert complete("brain doctor gemma4") == ["gemma4-e4b-mtp", "gemma4-e4b-mtp-tp2"]
    assert complete("brain up sim --preset vram") == ["vram-16gb", "vram-24gb"]
    assert complete("brain up sim --backend ") == ["docker", "process", "sim"]
    assert complete("brain sim --vllm-version ") == ["0.26", "0.33"]
    registry = Registry()
    for name, fleet in (("solo", None), ("pair-r0", "pair"), ("pair-r1", "pair")):
        record = ServerRecord(name=name, backend="sim", spec={}, handle={}, fleet=fleet)
        registry.put(record)
    assert complete("brain down ") == ["pair", "pair-r0", "pair-r1", "solo"]
    assert complete("brain logs so") == ["solo"]


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("up", ["<docker|process|sim>", "KEY=VALUE", "PRESET", "IDS"]),
        ("doctor", ["<docker|process|sim>", "KEY=VALUE", "--json"]),
        ("profiles", ["--json"]),
        ("sim", ["<0.26|0.33>", "demo|script:PATH"]),
    ],
)
def test_options_with_choices_show_them_in_the_help(command: str, shown: list[str]):
    r = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    for text in shown:
        assert text in r.output, (text, r.output)


def test_a_backend_not_among_the_choices_is_refused_naming_them():
    r = runner.invoke(app, ["up", "sim", "--backend", "dock", "--dry-run"])
    assert r.exit_code == 2
    said = " ".join(r.output.replace("│", " ").split())  # the error box wraps at 80 columns
    assert "'dock' is not one of 'docker', 'process', 'sim'" in said


@pytest.mark.parametrize("gpus", ["a,b", "0,gpu0", "1,-1"])
def test_gpus_that_are_not_gpus_are_refused_saying_what_gpus_takes(gpus: str):
    r = runner.invoke(app, ["up", "sim", "--gpus", gpus, "--dry-run"])
    assert r.exit_code == 2, r.output
    assert "--gpus takes device indexes or UUIDs" in r.output
    assert "Traceback" not in r.output and Registry().servers() == []


def test_gpu_indexes_and_uuids_are_taken():
    r = runner.invoke(app, ["up", "sim", "--gpus", "0,GPU-5e1a0c2b,MIG-9f1c/1/0", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "GPUs GPU-5e1a0c2b" in r.output and "GPUs MIG-9f1c/1/0" in r.output


def test_gpus_all_and_dockers_device_form_are_read_as_docker_reads_them(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"  # a real process on PATH, as on a GPU host
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\necho '0, GPU-aaaa, H100, 81559, 0, 81559'\n"
        "echo '1, GPU-bbbb, H100, 81559, 0, 81559'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    r = runner.invoke(app, ["up", "sim", "--gpus", "all", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "replica 0: sim-r0  GPUs 0 " in r.output and "replica 1: sim-r1  GPUs 1 " in r.output
    r = runner.invoke(app, ["up", "sim", "--gpus", "device=1", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "1 replica(s)" in r.output and "replica 0: sim-r0  GPUs 1 " in r.output


def test_gpus_all_on_a_host_with_no_gpu_says_so_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    r = runner.invoke(app, ["up", "sim", "--gpus", "all", "--dry-run"])
    assert r.exit_code == 2, r.output
    said = " ".join(r.output.split())
    assert "--gpus all: this host shows no NVIDIA GPU" in said and "--gpus 0,1" in said
    assert "Traceback" not in r.output
