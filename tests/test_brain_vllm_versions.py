"""Which vLLM the brain drives and what that release accepts (brain.vllm_versions)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from brain.errors import LaunchError
from brain.launchers.ports import free_port
from brain.launchers.process import ProcessLauncher
from brain.spec import ServerSpec
from brain.vllm_choices import TOOL_CALL_PARSERS
from brain.vllm_versions import (
    KNOWN,
    adapt_argv,
    check_spec,
    facts_for,
    parse_version,
    version_from_tag,
)

FIX = Path(__file__).parent / "fixtures" / "vllm-0.26"

pytestmark = pytest.mark.usefixtures("marathon_home")


def _spec(**kw) -> ServerSpec:
    base = dict(name="v", backend="process", model="/m", port=free_port(), max_model_len=4096)
    return ServerSpec.model_validate({**base, **kw})


def test_versions_are_read_from_vllm_tags_and_server_answers():
    assert parse_version("0.26.0") == (0, 26, 0)
    assert parse_version("v0.33.0") == (0, 33, 0)
    assert parse_version("0.26.0+cu130") == (0, 26, 0)
    assert parse_version("latest") is None
    assert version_from_tag("v0.26.0-cu130") == "0.26.0"
    version = (FIX / "http" / "version.txt").read_text()
    assert facts_for(re.search(r'"version":"([^"]+)"', version)[1]).version == "0.26.0"
    assert facts_for("0.30.1").version == "0.26.0"  # the newest known not newer
    assert facts_for("0.40.0").version == "0.33.0"
    assert facts_for(None).version == "0.33.0"


def test_026_tool_parsers_are_the_ones_the_real_server_listed():
    log = (FIX / "logs" / "fail-unknown-tool-parser.log").read_text()
    listed = set(re.search(r"chose from \{([^}]*)\}", log)[1].replace(" ", "").split(","))
    assert KNOWN["0.26"].tool_call_parsers == listed
    # the issue counted 14 names the brain (at 0.33) accepted that 0.26 refuses
    assert len(TOOL_CALL_PARSERS - listed) == 14


def test_a_spec_for_033_is_refused_or_adapted_for_026():
    spec = _spec(
        tool_call_parser="qwen3_json",
        max_num_queued_reqs=64,
        speculative={
            "method": "ngram",
            "num_speculative_tokens": 2,
            "enable_adaptive_verification": True,
        },
    )
    issues = {i.field: i for i in check_spec(spec, KNOWN["0.26"])}
    assert issues["tool_call_parser"].action == "refuse"
    assert "hermes" in issues["tool_call_parser"].message
    assert issues["max_num_queued_reqs"].action == "drop"
    assert issues["speculative.enable_adaptive_verification"].action == "drop"
    assert check_spec(spec, KNOWN["0.33"]) == []
    argv = [
        "vllm",
        "serve",
        "/m",
        "--max-num-queued-reqs",
        "64",
        "--speculative-config",
        '{"method":"ngram","enable_adaptive_verification":true}',
    ]
    assert adapt_argv(argv, list(issues.values())) == [
        "vllm",
        "serve",
        "/m",
        "--speculative-config",
        '{"method":"ngram"}',
    ]


def test_a_load_format_is_refused_by_the_release_whose_engine_cannot_load_it():
    # bitsandbytes: a loader of 0.26.0 that 0.33.0 dropped (model_executor/model_loader).
    spec = _spec(load_format="bitsandbytes")
    assert check_spec(spec, KNOWN["0.26"]) == []
    (issue,) = check_spec(spec, KNOWN["0.33"])
    assert issue.field == "load_format" and issue.action == "refuse"
    assert "Load format `bitsandbytes` is not supported" in issue.message
    assert check_spec(_spec(load_format="SafeTensors"), KNOWN["0.33"]) == []  # vLLM lower-cases


def _fake_vllm(tmp_path: Path, version: str) -> list[str]:
    script = tmp_path / "fake_vllm.py"
    script.write_text(
        "import json, sys, time\n"
        f"if sys.argv[1:] == ['--version']: print({version!r}); sys.exit(0)\n"
        f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "print('started', flush=True); time.sleep(60)\n"
    )
    return [sys.executable, str(script)]


def test_the_process_launcher_asks_the_installed_vllm_and_refuses_what_it_lacks(tmp_path):
    said: list[str] = []
    launcher = ProcessLauncher(executable=_fake_vllm(tmp_path, "0.26.0"), say=said.append)
    assert launcher.vllm_version() == "0.26.0"
    with pytest.raises(LaunchError) as err:
        launcher.start(_spec(preload={"enabled": True}))
    assert "vLLM 0.26.0" in str(err.value) and "preload.enabled=false" in str(err.value)
    assert err.value.diagnosis.cause == "vllm_version_mismatch"
    assert not (tmp_path / "argv.json").exists()


def test_the_process_launcher_leaves_out_what_the_release_does_not_know_and_says_so(tmp_path):
    said: list[str] = []
    launcher = ProcessLauncher(executable=_fake_vllm(tmp_path, "0.26.0"), say=said.append)
    handle = launcher.start(_spec(max_num_queued_reqs=64))
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "argv.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        argv = (tmp_path / "argv.json").read_text()
    finally:
        launcher.stop(handle, timeout=2)
    assert "--max-num-queued-reqs" not in argv and "--max-model-len" in argv
    assert any("no --max-num-queued-reqs" in m for m in said)


def test_a_version_refusal_comes_before_the_preload_preflight(tmp_path):
    # On 0.26 "start the preload daemon" would be wrong advice: the release has none.
    from brain.supervisor import launch

    def preflight(spec):
        raise AssertionError("the preflight ran before the version check")

    launcher = ProcessLauncher(executable=_fake_vllm(tmp_path, "0.26.0"), say=lambda m: None)
    with pytest.raises(LaunchError, match=r"preload\.enabled=false"):
        launch(_spec(preload={"enabled": True}), launcher, preflight=preflight)


def test_a_pip_installed_vllm_is_asked_its_package_metadata_not_its_cli(tmp_path):
    # `vllm --version` imports vLLM (26 s on the H200); a console script's interpreter can say
    # it from the package metadata. A fake interpreter answers as importlib.metadata would.
    python = tmp_path / "python3"
    python.write_text(f"#!{sys.executable}\nprint('0.26.0')\n")
    python.chmod(0o755)
    vllm = tmp_path / "vllm"
    vllm.write_text(f"#!{python}\nimport sys\nsys.exit(9)\n")  # --version here would fail
    vllm.chmod(0o755)
    from brain.vllm_versions import installed_version

    assert installed_version([str(vllm)]) == "0.26.0"
