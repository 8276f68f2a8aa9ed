"""The vLLM startup log -> StartupTimeline: what was configured, what each phase cost.

Incremental (``TimelineParser.feed(line)``) so readiness can build it while following logs,
and the supervisor can record it as a server event. Log texts checked against vLLM 0.33.0
(v1/engine/core.py, v1/worker/gpu_model_runner.py, v1/worker/gpu_worker.py,
v1/core/kv_cache_utils.py, model_loader/weight_cache/ipc_loader.py) and a real vLLM 0.26.0 log
(tests/fixtures/vllm-0.26). The clock starts at the spawn when the reader gives it: vLLM
imports for tens of seconds before its first line, and a total from the first line hides them.
Pure: no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, Field

# "(EngineCore pid=253) INFO 11-29 10:00:01 [core.py:140] ..." (year-less, second resolution)
_TS = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)\b")


class SpeculativeInfo(BaseModel):
    method: str | None = None
    model: str | None = None
    num_spec_tokens: int | None = None


class StartupTimeline(BaseModel):
    """Facts from one startup; None means the line has not (yet) been seen."""

    vllm_version: str | None = None
    config: dict[str, str] = Field(default_factory=dict)
    """Selected fields of the effective config (model, max_seq_len, dtype, kv_cache_dtype ...)."""
    speculative_enabled: bool | None = None
    speculative: SpeculativeInfo | None = None
    weights_gib: float | None = None
    weights_load_s: float | None = None
    weights_from_cache_tensors: int | None = None
    """Set when weights were mapped from the preload daemon instead of read from disk."""
    weights_cache_mode: str | None = None
    weight_cache_fallback: bool = False
    memory_profiling_s: float | None = None
    """The profiling run and the CUDA graph memory estimate, up to "Available KV cache memory".
    0.33 logs "Memory profiling takes" only at DEBUG; at INFO both releases log the warmup
    run's own time and, seconds later, the KV cache memory: the span between them counts."""
    available_kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    chunked_prefill_max_batched_tokens: int | None = None
    torch_compile_s: float | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    init_engine_s: float | None = None
    listening_on: str | None = None
    ready: bool = False
    first_output_s: float | None = None
    """From the spawn to the first line (the Python imports), when the spawn time is known."""
    total_s: float | None = None
    """From the spawn (or, without it, the first line seen) to "Application startup
    complete"."""


_CONFIG_KEYS = (
    "model",
    "tokenizer_mode",
    "dtype",
    "max_seq_len",
    "load_format",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "quantization",
    "enforce_eager",
    "kv_cache_dtype",
    "served_model_name",
    "enable_prefix_caching",
    "enable_chunked_prefill",
)

_INIT = re.compile(r"Initializing a V1 LLM engine \(v?(?P<ver>[^)\s]+)\) with config: (?P<cfg>.*)")
_SPEC = re.compile(
    r"speculative_config=(?:None|SpeculativeConfig\(method=(?P<method>'[^']*'|None), "
    r"model=(?P<model>'[^']*'|None), num_spec_tokens=(?P<k>\d+|None)\))"
)
_FLOAT = r"([\d.,]+)"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "model_loading": re.compile(rf"Model loading took {_FLOAT} ?GiB(?: memory)? and {_FLOAT} s"),
    "loading_weights": re.compile(rf"Loading weights took {_FLOAT} s"),
    "mapped": re.compile(r"Mapped (\d+) tensors from the weight cache daemon(?: \((\w+) mode\))?"),
    "fallback": re.compile(r"Weight cache (?:unusable|IPC loading failed)[^\n]*falling back"),
    "profiling": re.compile(rf"Memory profiling takes {_FLOAT} seconds"),
    "warmup": re.compile(rf"Initial profiling/warmup run took {_FLOAT} s"),
    "kv_mem": re.compile(rf"Available KV cache memory: (-?{_FLOAT[1:-1]}) ?GiB"),
    "kv_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(rf"Maximum concurrency for ([\d,]+) tokens per request: {_FLOAT}x"),
    "chunked": re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
    "compile": re.compile(rf"torch\.compile took {_FLOAT} s in total"),
    "graphs": re.compile(rf"Graph capturing finished in {_FLOAT} secs?(?:, took {_FLOAT} GiB)?"),
    "init": re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_FLOAT} s"),
    "listening": re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (\S+)"),
    "ready": re.compile(r"Application startup complete"),
}


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def _unquote(s: str | None) -> str | None:
    if s is None or s == "None":
        return None
    return s.strip("'")


def _log_time(line: str) -> float | None:
    m = _TS.search(line)
    if not m:
        return None
    # Year-less stamps; 2000 is a leap year so 02-29 parses. Only differences are used.
    return datetime.strptime("2000-" + m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()


class TimelineParser:
    """Feed log lines in order; ``timeline`` is always the state so far."""

    def __init__(self, started_at: float | None = None) -> None:
        """``started_at``: the reader's clock (monotonic seconds) at the spawn, if known."""
        self.timeline = StartupTimeline()
        self._started_at = started_at
        self._warmup: tuple[float, float | None] | None = None  # (seconds, log time)
        self._first_at: float | None = None
        self._first_log_time: float | None = None
        self._last_log_time: float | None = None

    def feed(self, line: str, at: float | None = None) -> StartupTimeline:
        """Consume one line. ``at`` is the reader's clock (monotonic seconds) if it has one;
        otherwise the log's own timestamps measure the total."""
        t = self.timeline
        if at is not None and self._first_at is None:
            self._first_at = at
            if self._started_at is not None:
                t.first_output_s = round(at - self._started_at, 3)
        lt = _log_time(line)
        if lt is not None:
            if self._first_log_time is None:
                self._first_log_time = lt
            self._last_log_time = lt

        if m := _INIT.search(line):
            t.vllm_version = m["ver"]
            cfg = m["cfg"]
            for key in _CONFIG_KEYS:
                km = re.search(rf"(?:^|, ){key}=('(?:[^'\\]|\\.)*'|[^,]*)", cfg)
                if km:
                    t.config[key] = km.group(1).strip("'")
            sm = _SPEC.search(cfg)
            if sm:
                if sm["k"] is None and sm["method"] is None:
                    t.speculative_enabled = False
                else:
                    t.speculative_enabled = True
                    t.speculative = SpeculativeInfo(
                        method=_unquote(sm["method"]),
                        model=_unquote(sm["model"]),
                        num_spec_tokens=int(sm["k"]) if sm["k"] and sm["k"] != "None" else None,
                    )
            return t
        p = _PATTERNS
        if m := p["model_loading"].search(line):
            t.weights_gib, t.weights_load_s = _f(m[1]), _f(m[2])
        elif (m := p["loading_weights"].search(line)) and t.weights_load_s is None:
            t.weights_load_s = _f(m[1])
        elif m := p["mapped"].search(line):
            t.weights_from_cache_tensors = int(m[1])
            t.weights_cache_mode = m[2]
        elif p["fallback"].search(line):
            t.weight_cache_fallback = True
        elif m := p["profiling"].search(line):
            t.memory_profiling_s = _f(m[1])
        elif m := p["warmup"].search(line):
            self._warmup = (_f(m[1]), lt)
        elif m := p["kv_mem"].search(line):
            t.available_kv_cache_gib = _f(m[1])
            if t.memory_profiling_s is None and self._warmup is not None:
                took, when = self._warmup
                span = lt - when if lt is not None and when is not None else 0.0
                t.memory_profiling_s = round(took + span, 3)
        elif m := p["chunked"].search(line):
            t.chunked_prefill_max_batched_tokens = int(m[1])
        elif m := p["compile"].search(line):
            t.torch_compile_s = _f(m[1])
        elif m := p["graphs"].search(line):
            t.graph_capture_s = _f(m[1])
            t.graph_capture_gib = _f(m[2]) if m[2] else None
        elif m := p["init"].search(line):
            t.init_engine_s = _f(m[1])
        elif m := p["listening"].search(line):
            t.listening_on = m[1]
        elif p["ready"].search(line):
            t.ready = True
            if at is not None and self._started_at is not None:
                t.total_s = round(at - self._started_at, 3)
            elif at is not None and self._first_at is not None:
                t.total_s = round(at - self._first_at, 3)
            elif self._first_log_time is not None and self._last_log_time is not None:
                t.total_s = self._last_log_time - self._first_log_time
        # KV size and concurrency share one line in 0.33 but were separate lines before.
        if m := p["kv_tokens"].search(line):
            t.kv_cache_tokens = int(m[1].replace(",", ""))
        if m := p["concurrency"].search(line):
            t.max_concurrency_tokens = int(m[1].replace(",", ""))
            t.max_concurrency = _f(m[2])
        return t


def parse_startup_log(text: str) -> StartupTimeline:
    """Parse a whole log at once."""
    parser = TimelineParser()
    for line in text.splitlines():
        parser.feed(line)
    return parser.timeline
