"""Startup log -> StartupTimeline (line texts from vLLM 0.33.0's source)."""

from __future__ import annotations

from pathlib import Path

from brain.timeline import TimelineParser, parse_startup_log

LOG = """\
(APIServer pid=1) INFO 11-29 10:00:00 [utils.py:300] vLLM API server version 0.33.0
(EngineCore pid=253) INFO 11-29 10:00:05 [core.py:140] Initializing a V1 LLM engine (v0.33.0) \
with config: model='google/gemma-4-E4B-it', speculative_config=SpeculativeConfig(method='mtp', \
model='google/gemma-4-E4B-it-assistant', num_spec_tokens=2), \
tokenizer='google/gemma-4-E4B-it', skip_tokenizer_init=False, tokenizer_mode=auto, \
revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, \
max_seq_len=32768, download_dir=None, load_format=auto, tensor_parallel_size=1, \
pipeline_parallel_size=1, data_parallel_size=1, quantization=None, enforce_eager=False, \
kv_cache_dtype=auto, device_config=cuda, served_model_name=gemma4-e4b, \
enable_prefix_caching=True, enable_chunked_prefill=True, compilation_config={"level": 3}
(EngineCore pid=253) INFO 11-29 10:00:06 [scheduler.py:311] Chunked prefill is enabled with \
max_num_batched_tokens=8192.
(EngineCore pid=253) INFO 11-29 10:01:40 [default_loader.py:507] Loading weights took 80.12 seconds
(EngineCore pid=253) INFO 11-29 10:01:41 [gpu_model_runner.py:5089] Model loading took 15.4 GiB \
memory and 92.500000 seconds
(EngineCore pid=253) INFO 11-29 10:01:50 [monitor.py:20] torch.compile took 21.30 s in total
(EngineCore pid=253) INFO 11-29 10:01:55 [gpu_worker.py:773] Available KV cache memory: 4.79 GiB
(EngineCore pid=253) INFO 11-29 10:01:55 [kv_cache_utils.py:1148] GPU KV cache size: 104,608 \
tokens, Maximum concurrency for 32,768 tokens per request: 3.19x
(EngineCore pid=253) INFO 11-29 10:02:20 [gpu_model_runner.py:6517] Graph capturing finished \
in 25 secs, took 0.62 GiB
(EngineCore pid=253) INFO 11-29 10:02:20 [core.py:413] init engine (profile, create kv cache, \
warmup model) took 38.90 s (compilation: 21.30 s)
(APIServer pid=1) INFO 11-29 10:02:22 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000
INFO:     Application startup complete.
"""


def test_full_startup_log_gives_every_phase():
    t = parse_startup_log(LOG)
    assert t.vllm_version == "0.33.0"
    assert t.speculative_enabled is True
    assert t.speculative.model_dump() == {
        "method": "mtp",
        "model": "google/gemma-4-E4B-it-assistant",
        "num_spec_tokens": 2,
    }
    assert t.config["model"] == "google/gemma-4-E4B-it"
    assert t.config["max_seq_len"] == "32768"
    assert t.config["kv_cache_dtype"] == "auto"
    assert t.config["served_model_name"] == "gemma4-e4b"
    assert t.config["enable_chunked_prefill"] == "True"
    assert (t.weights_gib, t.weights_load_s) == (15.4, 92.5)
    assert t.torch_compile_s == 21.3
    assert t.available_kv_cache_gib == 4.79
    assert (t.kv_cache_tokens, t.max_concurrency_tokens, t.max_concurrency) == (104608, 32768, 3.19)
    assert (t.graph_capture_s, t.graph_capture_gib) == (25, 0.62)
    assert t.init_engine_s == 38.9
    assert t.chunked_prefill_max_batched_tokens == 8192
    assert t.listening_on == "http://0.0.0.0:8000"
    assert t.ready is True and t.total_s == 142  # 10:00:00 -> 10:02:22 from log stamps
    assert t.weights_from_cache_tensors is None


def test_incremental_feed_uses_the_readers_clock_when_given():
    p = TimelineParser()
    for i, line in enumerate(LOG.splitlines()):
        t = p.feed(line, at=100.0 + i)
        if i == 0:
            assert t.ready is False and t.vllm_version is None
    assert p.timeline.ready and p.timeline.total_s == len(LOG.splitlines()) - 1


def test_speculation_off_and_weight_cache_lines():
    t = parse_startup_log(
        "INFO 11-29 10:00:05 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: "
        "model='Qwen/Qwen2.5-1.5B-Instruct', speculative_config=None, tokenizer='x'\n"
        "INFO 11-29 10:00:07 [ipc_loader.py:322] Mapped 339 tensors from the weight cache "
        "daemon (zero_copy mode)\n"
    )
    assert t.speculative_enabled is False and t.speculative is None
    assert (t.weights_from_cache_tensors, t.weights_cache_mode) == (339, "zero_copy")
    assert not t.ready and t.total_s is None


def test_fallback_and_older_separate_kv_lines():
    t = parse_startup_log(
        "WARNING 11-29 10:00:09 [ipc_loader.py:252] Weight cache unusable (x); falling back to "
        "disk loading\n"
        "INFO 05-13 23:28:53 [kv_cache_utils.py:600] GPU KV cache size: 10,720 tokens\n"
        "INFO 05-13 23:28:53 [kv_cache_utils.py:637] Maximum concurrency for 2,048 tokens per "
        "request: 5.23x\n"
        "INFO 05-13 23:28:54 [core.py:200] init engine (profile, create kv cache, warmup model) "
        "took 12.50 seconds\n"
    )
    assert t.weight_cache_fallback is True
    assert (t.kv_cache_tokens, t.max_concurrency) == (10720, 5.23)
    assert t.init_engine_s == 12.5


REAL_026 = (
    Path(__file__).parent / "fixtures" / "vllm-0.26" / "logs" / "serve-dummy-ngram.log"
).read_text()


def test_real_026_log_fills_every_phase_including_memory_profiling():
    t = parse_startup_log(REAL_026)
    assert t.vllm_version == "0.26.0"
    assert t.speculative_enabled and t.speculative.method == "ngram"
    assert t.weights_load_s == 0.691972 and t.torch_compile_s == 18.46
    # warmup 0.26 s logged at 13:49:52, "Available KV cache memory" at 13:50:06
    assert t.memory_profiling_s == 14.26
    assert t.graph_capture_s == 5 and t.graph_capture_gib == 0.34
    assert t.init_engine_s == 39.86 and t.kv_cache_tokens == 1523696
    assert t.ready


def test_the_clock_starts_at_the_spawn_when_it_is_known():
    # The real log's first line came ~27 s after launch (Python imports): a total counted
    # from the first line hides them.
    p = TimelineParser(started_at=100.0)
    lines = REAL_026.splitlines()
    p.feed(lines[0], at=127.0)
    for i, line in enumerate(lines[1:], start=1):
        p.feed(line, at=127.0 + i * 0.1)
        if p.timeline.ready:
            break
    assert p.timeline.first_output_s == 27.0
    assert p.timeline.total_s is not None and p.timeline.total_s > 27.0 + 0.1 * (i - 1)
    assert abs(p.timeline.total_s - (27.0 + 0.1 * i)) < 1e-6
