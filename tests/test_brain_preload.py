"""The weight-cache daemon lifecycle through the sim stand-in, and the fingerprint check that
explains a mismatch before vLLM would."""

from __future__ import annotations

import json
import struct

import httpx
import pytest

from brain.errors import LaunchError, PreloadMismatch
from brain.launchers.base import ServerHandle
from brain.launchers.ports import free_port
from brain.preload import (
    SimPreloadLauncher,
    check_preload,
    checkpoint_identity,
    fingerprint,
    mismatched_fields,
    preload_status,
    start_preload,
    stop_preload,
)
from brain.spec import ServerSpec
from brain.state import Registry

pytestmark = pytest.mark.usefixtures("marathon_home")


def preload_spec(tmp_path, **update) -> ServerSpec:
    spec = ServerSpec(
        name=f"p{free_port()}",
        backend="sim",
        model="sim/test-model",
        port=free_port(),
        max_model_len=4096,
        preload={
            "enabled": True,
            "socket_dir": str(tmp_path / "sockets"),
            "health_port": free_port(),
        },
        timeouts={"load_timeout_s": 20, "stop_timeout_s": 5},
    )
    return spec.model_copy(update=update)


def test_daemon_starts_waits_for_ready_records_its_fingerprint_and_stops(tmp_path):
    spec = preload_spec(tmp_path)
    registry = Registry()
    record = start_preload(spec, SimPreloadLauncher(), registry)
    handle = ServerHandle.from_dict(record.handle)
    try:
        assert preload_status(record).alive
        assert httpx.get(f"http://127.0.0.1:{spec.preload.health_port}/health").status_code == 200
        assert record.fingerprint["tp_size"] == 1
        assert record.fingerprint["checkpoint"] == "sim/test-model"
        assert registry.get_preload(spec.name) is not None
        assert check_preload(spec, registry).name == spec.name  # the same spec matches
    finally:
        assert stop_preload(spec.name, registry)
    assert not SimPreloadLauncher().status(handle).alive
    assert registry.get_preload(spec.name) is None


def test_a_server_with_other_engine_args_is_refused_naming_the_fields(tmp_path):
    spec = preload_spec(tmp_path)
    registry = Registry()
    start_preload(spec, SimPreloadLauncher(), registry)
    try:
        server = spec.model_copy(
            update={"tensor_parallel_size": 2, "gpus": [0, 1], "dtype": "float16"}
        )
        with pytest.raises(PreloadMismatch) as exc:
            check_preload(server, registry)
        assert set(exc.value.fields) == {"tp_size", "tp_rank", "dtype", "gpus"}
        text = str(exc.value)
        assert "WeightCacheKey mismatch on fields" in text
        assert "tp_size: daemon 1 vs server 2" in text
        assert "brain preload" in text
    finally:
        stop_preload(spec.name, registry)


def test_starting_with_preload_but_no_daemon_says_how_to_start_one(tmp_path):
    with pytest.raises(LaunchError, match="brain preload start"):
        check_preload(preload_spec(tmp_path), Registry())


def test_a_daemon_that_fails_to_start_is_diagnosed_fast(tmp_path):
    spec = preload_spec(tmp_path, env={"BRAIN_SIM_PRELOAD_FAIL": "1"})
    with pytest.raises(LaunchError, match="Weight cache daemon rank"):
        start_preload(spec, SimPreloadLauncher(), Registry(), timeout=20)
    assert Registry().get_preload(spec.name) is None


def test_daemon_readiness_without_a_health_port_uses_the_ready_line(tmp_path):
    spec = preload_spec(tmp_path)
    spec = spec.model_copy(
        update={"preload": spec.preload.model_copy(update={"health_port": None})}
    )
    registry = Registry()
    record = start_preload(spec, SimPreloadLauncher(), registry)
    try:
        lines = list(SimPreloadLauncher().logs(ServerHandle.from_dict(record.handle)))
        assert any("===== Weight cache daemon READY" in ln for ln in lines)
    finally:
        stop_preload(spec.name, registry)


def _safetensors(path, header: dict) -> None:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * 16)


def test_checkpoint_identity_follows_vllm_same_weights_in_two_directories_match(tmp_path):
    header = {"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        _safetensors(tmp_path / d / "model.safetensors", header)
        (tmp_path / d / "config.json").write_text('{"architectures": ["Gemma4ForCausalLM"]}')
    a = ServerSpec(name="a", backend="process", model=str(tmp_path / "a"))
    b = ServerSpec(name="b", backend="process", model=str(tmp_path / "b"))
    assert checkpoint_identity(a) == checkpoint_identity(b)
    assert checkpoint_identity(a).startswith("safetensors:")
    assert fingerprint(a)["model_arch"] == "Gemma4ForCausalLM"
    _safetensors(tmp_path / "b" / "model.safetensors", {**header, "x": {}})
    assert checkpoint_identity(a) != checkpoint_identity(b)


def test_docker_fingerprint_carries_the_image_tag_as_vllm_version():
    spec = ServerSpec(name="d", model="org/m", tag="v0.33.0", docker={"hf_cache": None})
    other = spec.model_copy(update={"tag": "v0.32.0"})
    assert fingerprint(spec)["vllm_version"] == "vllm/vllm-openai:v0.33.0"
    assert fingerprint(spec)["vllm_version"] != fingerprint(other)["vllm_version"]


def test_the_fingerprint_holds_all_22_weightcachekey_fields_of_vllm_033():
    """``WeightCacheKey`` in vLLM 0.33 (model_loader/weight_cache/protocol.py:308) has 22
    fields; a daemon and a server differing in any of them fail with "WeightCacheKey mismatch"."""
    from brain.preload import KEY_FIELDS

    assert len(KEY_FIELDS) == 22 and len(set(KEY_FIELDS)) == 22
    spec = ServerSpec(name="k", backend="process", model="org/m")
    assert set(KEY_FIELDS) <= set(fingerprint(spec))


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
        ({"extra_args": ["--moe-backend", "triton"]}, "moe_backend"),
        ({"extra_args": ["--enable-expert-parallel"]}, "enable_expert_parallel"),
        ({"extra_args": ["--data-parallel-size", "2"]}, "dp_size"),
        ({"extra_args": ["--kv-cache-dtype-skip-layers", "0,1"]}, "kv_cache_dtype_skip_layers"),
        ({"extra_args": ["--hf-overrides", '{"rope_theta": 1}']}, "rope_parameters_hash"),
        ({"extra_args": ["--kernel-config", '{"linear_backend": "cutlass"}']}, "linear_backend"),
    ],
)
def test_a_daemon_and_server_differing_in_one_key_field_are_caught_before_launch(update, field):
    daemon = ServerSpec(name="k", backend="process", model="org/m")
    server = daemon.model_copy(update=update)
    assert field in mismatched_fields(fingerprint(daemon), fingerprint(server))


def test_a_recorded_fingerprint_matches_itself_after_a_json_round_trip():
    spec = ServerSpec(
        name="k",
        backend="process",
        model="org/m",
        extra_args=["--kernel-config", '{"linear_backend_per_quant": {"fp8": "cutlass"}}'],
    )
    stored = json.loads(json.dumps(fingerprint(spec)))
    assert mismatched_fields(stored, fingerprint(spec)) == []
    old = {k: v for k, v in stored.items() if k != "kv_cache_dtype"}  # an older brain's record
    assert mismatched_fields(old, fingerprint(spec)) == []
