"""ServerSpec validation, profiles, overrides, presets and API keys."""

from __future__ import annotations

import os
import stat

import pytest

from brain.errors import SpecError
from brain.profiles import (
    apply_overrides,
    apply_preset,
    list_presets,
    list_profiles,
    load_profile,
    load_spec_text,
    parse_override,
)
from brain.spec import ServerSpec, ensure_api_key, spec_hash
from brain.spec_checks import launch_problems
from brain.spec_paths import container_to_host_path, host_to_container_path

GEMMA = "gemma4-e4b-mtp"
MEDIA = "{host: ~/marathon/media, container: /media}"


def gemma(*overrides: str) -> ServerSpec:
    return apply_overrides(load_profile(GEMMA), list(overrides))


def refused(*overrides: str) -> SpecError:
    with pytest.raises(SpecError) as ei:
        gemma(*overrides)
    return ei.value


def test_builtin_profiles_are_listed_and_all_load():
    names = list_profiles()
    assert names == [
        "deepseek-v4-flash-dspark",
        GEMMA,
        "gemma4-e4b-mtp-tp2",
        "qwen2.5-1.5b-smoke",
        "qwen3-32b-2node-ray",
        "sim",
    ]
    for n in names:
        assert load_profile(n).name == n


def test_presets_apply_to_every_profile():
    assert set(list_presets()) == {"vram-16gb", "vram-24gb", "throughput-first", "latency-first"}
    for n in list_profiles():
        for p in list_presets():
            apply_preset(load_profile(n), p)


def test_preset_changes_memory_knobs_and_skips_speculation_when_off():
    s = apply_preset(load_profile(GEMMA), "vram-16gb")
    assert (s.max_model_len, s.kv_cache_dtype, s.max_num_seqs) == (16384, "fp8", 4)
    assert s.speculative.num_speculative_tokens == 1
    q = apply_preset(load_profile("qwen2.5-1.5b-smoke"), "latency-first")
    assert q.speculative is None and q.max_num_seqs == 2


def test_overrides_are_yaml_typed_with_string_fields_kept_raw():
    s = gemma(
        "speculative.num_speculative_tokens=4",
        "docker.shm_size=8g",
        "api_key=12345",
        "env.FOO=1",
        "gpus=[0, 1]",
        "max_model_len=32k",
        "enforce_eager=true",
    )
    assert s.speculative.num_speculative_tokens == 4
    assert s.docker.shm_size == "8g"
    assert s.api_key == "12345" and s.env == {"FOO": "1"}
    assert s.gpus == [0, 1] and s.max_model_len == 32000 and s.enforce_eager is True


def test_unknown_override_key_names_the_key_and_the_valid_keys():
    e = refused("docker.shm=8g")
    assert e.field == "docker.shm" and "docker.shm_size" in str(e)


def test_override_without_equals_is_refused():
    with pytest.raises(SpecError, match="key=value"):
        gemma("max_model_len")


@pytest.mark.parametrize(
    ("override", "field", "fix"),
    [
        ("speculative.num_speculative_tokens=0", "speculative.num_speculative_tokens", "1-4"),
        ("speculative.model=null", "speculative.model", "gemma-4-E4B-it-assistant"),
        ("tool_call_parser=nope", "tool_call_parser", "--tool-parser-plugin"),
        ("tensor_parallel_size=2", "tensor_parallel_size", "gpus"),
        ("gpu_memory_utilization=1.5", "gpu_memory_utilization", "0.9"),
        ("gpu_memory_utilization=0", "gpu_memory_utilization", "0.9"),
        ("allowed_local_media_path=/data", "allowed_local_media_path", "mount"),
        ("extra_args=[--max-model-len, '5']", "extra_args", "max_model_len"),
        ("quantization=awq", "quantization", None),  # only refused with preload, see below
    ],
)
def test_invalid_combinations_are_refused_with_field_and_fix(override, field, fix):
    if fix is None:
        gemma(override)  # awq alone is fine
        return
    e = refused(override)
    assert e.field == field
    assert fix in (e.hint or "")


def test_auto_tool_choice_without_parser_is_refused():
    e = refused("tool_call_parser=null")
    assert e.field == "enable_auto_tool_choice"


def test_plugin_parser_is_allowed_through_extra_args():
    s = gemma("tool_call_parser=myparser", "extra_args=[--tool-parser-plugin, /opt/p.py]")
    assert s.tool_call_parser == "myparser"


def test_adaptive_verification_with_enforce_eager_is_refused():
    with pytest.raises(SpecError) as ei:
        apply_overrides(load_profile("deepseek-v4-flash-dspark"), ["enforce_eager=true"])
    assert ei.value.field == "speculative.enable_adaptive_verification"


def test_ipc_cache_refuses_unsupported_quant_and_kv_dtype():
    base = ["preload.enabled=true", "preload.socket_dir=/run/wc"]
    assert refused(*base, "quantization=awq").field == "quantization"
    assert refused(*base, "kv_cache_dtype=bfloat16").field == "kv_cache_dtype"
    assert gemma(*base, "kv_cache_dtype=fp8_e4m3").uses_ipc_cache


def test_preload_under_docker_needs_a_socket_dir():
    assert refused("preload.enabled=true").field == "preload.socket_dir"


def test_host_path_model_under_docker_suggests_the_container_path(tmp_path):
    e = refused(f"docker.volumes=[{{host: {tmp_path}, container: /models}}]", f"model={tmp_path}/m")
    assert e.field == "model" and e.hint == "set model=/models/m"


def test_existing_unmounted_host_path_draft_is_refused(tmp_path):
    e = refused(f"speculative.model={tmp_path}")
    assert e.field == "speculative.model" and "docker.volumes" in e.hint


def test_container_side_path_is_accepted(tmp_path):
    s = gemma(
        f"docker.volumes=[{{host: {tmp_path}, container: /models}}, {MEDIA}]", "model=/models/m"
    )
    assert s.model == "/models/m"


def test_host_paths_are_not_checked_for_the_process_backend(tmp_path):
    assert gemma("backend=process", f"model={tmp_path}").model == str(tmp_path)


def test_path_mapping_both_ways_prefers_the_longest_mount(tmp_path):
    s = gemma(
        f"docker.volumes=[{{host: {tmp_path}, container: /a}}, "
        f"{{host: {tmp_path}/sub, container: /b}}, {MEDIA}]"
    )
    assert host_to_container_path(s, f"{tmp_path}/x/y") == "/a/x/y"
    assert host_to_container_path(s, f"{tmp_path}/sub/z") == "/b/z"
    assert host_to_container_path(s, "/elsewhere") is None
    assert container_to_host_path(s, "/b/z") == f"{tmp_path}/sub/z"
    assert container_to_host_path(s, "/media/cat.png") == os.path.expanduser(
        "~/marathon/media/cat.png"
    )
    assert container_to_host_path(s, "/nope") is None


def test_public_host_needs_an_api_key_until_ensure_api_key(tmp_path):
    s = gemma("host=0.0.0.0")
    assert [p[0] for p in launch_problems(s)] == ["api_key"]
    keyed = ensure_api_key(s, tmp_path)
    assert keyed.api_key and launch_problems(keyed) == []
    key_file = tmp_path / "api-keys" / f"{s.name}.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert ensure_api_key(s, tmp_path).api_key == keyed.api_key  # reused, not regenerated


def test_loopback_server_gets_no_key(tmp_path):
    s = load_profile(GEMMA)
    assert ensure_api_key(s, tmp_path) is s
    assert not (tmp_path / "api-keys").exists()


def test_profile_errors_name_file_line_and_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: bad\nmodel: m\nspeculative:\n  model: d\n  num_speculative_tokens: 0\n")
    with pytest.raises(SpecError) as ei:
        load_profile(f)
    e = ei.value
    assert (e.file, e.line, e.field) == (str(f), 5, "speculative.num_speculative_tokens")
    assert str(e).startswith(f"{f}:5: speculative.num_speculative_tokens:")


def test_unknown_field_in_profile_reports_its_line_and_valid_fields():
    with pytest.raises(SpecError) as ei:
        load_spec_text("name: x\nmodel: m\ndocker:\n  shm: 1g\n", source="p.yaml")
    assert ei.value.line == 4 and ei.value.field == "docker.shm"
    assert "shm_size" in ei.value.hint


def test_duplicate_keys_and_bad_yaml_are_refused_with_lines():
    with pytest.raises(SpecError) as ei:
        load_spec_text("name: x\nmodel: m\nmodel: n\n", source="p.yaml")
    assert ei.value.line == 3
    with pytest.raises(SpecError) as ei:
        load_spec_text("name: x\nmodel: [\n", source="p.yaml")
    assert ei.value.file == "p.yaml" and ei.value.line


def test_profiles_read_yaml_as_workflows_do_no_and_on_stay_strings():
    # YAML 1.2 core scalars, as the workflow loader (one reader: brain.yaml_source):
    # YAML 1.1 would make these booleans and refuse them as names and environment values.
    spec = load_spec_text(
        "name: no\nmodel: m\nenv:\n  VLLM_FLAG: on\n  OTHER: yes\n",
        source="p.yaml",
    )
    assert spec.name == "no"
    assert spec.env == {"VLLM_FLAG": "on", "OTHER": "yes"}
    assert apply_overrides(spec, ["env.EXTRA=off"]).env["EXTRA"] == "off"
    assert parse_override("limit_mm_per_prompt.mode=no") == ("limit_mm_per_prompt.mode", "no")
    assert parse_override("limit_mm_per_prompt.image=0") == ("limit_mm_per_prompt.image", 0)


def test_unreadable_profile_yaml_names_its_line_and_the_fix(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("name: x\nmodel: m\nenv:\n\tA: b\n")
    with pytest.raises(SpecError) as ei:
        load_profile(f)
    assert ei.value.line == 4
    assert str(ei.value).startswith(f"{f}:4: invalid YAML: a tab character")
    assert "indent with spaces" in str(ei.value)
    f.write_text("name: x\nmodel: !!python/name:os.system m\n")
    with pytest.raises(SpecError) as ei:
        load_profile(f)
    assert str(ei.value).startswith(f"{f}:2: model: YAML tag !!python/name:os.system")
    assert "profiles are plain YAML without tags" in str(ei.value)


def test_a_profile_that_is_no_text_file_is_refused_with_its_reason(tmp_path):
    folder = tmp_path / "p.yaml"
    folder.mkdir()
    with pytest.raises(SpecError, match=r"p.yaml: is a directory; give the profile"):
        load_profile(folder)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: x\nmodel: caf\xe9\n")
    with pytest.raises(SpecError, match=r"latin.yaml: is not UTF-8 text \(byte 18\); save"):
        load_profile(latin)


def test_unknown_profile_lists_the_builtin_ones():
    with pytest.raises(SpecError, match="gemma4-e4b-mtp"):
        load_profile("nope")


def test_spec_hash_changes_with_server_shape_but_not_timeouts():
    s = load_profile(GEMMA)
    assert spec_hash(s) == spec_hash(load_profile(GEMMA))
    assert spec_hash(s) != spec_hash(gemma("max_model_len=1024"))
    assert spec_hash(s) == spec_hash(gemma("timeouts.load_timeout_s=5"))
