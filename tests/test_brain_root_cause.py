"""Every real vLLM log of the recordings diagnosed as what really happened, and the root cause
of an engine's death read from the process that died, nearest before its death, whole.

The logs are a real vLLM 0.26.0 on an H200 (tests/fixtures/vllm-0.26, copied from
shared/reference/vllm-0.26-h200/logs and the GPU proof of 2026-12-01): what each died of was
read from the log by hand and is written next to it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from brain.diagnose import ENGINE_DEATH_WINDOW_S, diagnose, is_fatal_line, root_cause
from brain.vllm_log import MAX_MESSAGE_CHARS, MAX_MESSAGE_LINES, exceptions, read_lines

LOGS = Path(__file__).parent / "fixtures" / "vllm-0.26" / "logs"

# (log, cause, the root cause's start (engine deaths), what really happened)
REAL_LOGS = [
    ("brain-up-badflag.log", "unrecognized_arguments", None, "argparse: --no-such-flag"),
    ("brain-up-badlen.log", "max_model_len_over_model_limit", None, "65536 > 8192 derived"),
    ("brain-up-kvsmall.log", "kv_cache_too_small", None, "EngineCore: 10M tokens' KV cache"),
    ("brain-up-nomodel.log", "model_not_found", None, "HFValidationError for a local path"),
    (
        "brain-up-watch-before-engine-kill.log",
        "engine_killed",
        None,
        "EngineCore SIGKILLed at 14:01:56 while idle; the API server's 400s were at 14:01:40",
    ),
    ("brain-up-watch-real-weights.log", None, None, "served, then stopped by brain down"),
    (
        "engine-core-killed.txt",
        "engine_killed",
        None,
        "the API server's side of an EngineCore SIGKILL",
    ),
    ("fail-gpu-memory-0.99.log", "gpu_memory_in_use", None, "EngineCore: 68 of 139 GiB free"),
    ("fail-unknown-tool-parser.log", "unknown_tool_parser", None, "KeyError at startup"),
    (
        "serve-dummy-ngram.log",
        "engine_killed",
        None,
        "EngineCore SIGKILLed at 13:53:43; the API server's 400s were at 13:50:52",
    ),
    ("serve-real-weights.log", None, None, "served, then stopped by SIGTERM"),
    ("h200-2026-12-01b/arch.log", "unknown_architecture", None, "FooBarForCausalLM"),
    ("h200-2026-12-01b/attn.log", "invalid_attention_backend", None, "FOO"),
    ("h200-2026-12-01b/dtype.log", "invalid_cli_choice", None, "--dtype float7"),
    (
        "h200-2026-12-01b/flashinfer.log",
        "engine_dead",
        "ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid",
        "EngineCore: FlashInfer not installed",
    ),
    ("h200-2026-12-01b/kvdtype.log", "invalid_cli_choice", None, "--kv-cache-dtype fp9"),
    (
        "h200-2026-12-01b/kvsmall.log",
        "stopped_while_starting",
        None,
        "SIGTERM from the brain during startup (it misread a WARNING, since fixed)",
    ),
    ("h200-2026-12-01b/nogpu.log", "no_gpu_visible", None, "CUDA_VISIBLE_DEVICES empty"),
    ("h200-2026-12-01b/quant.log", "invalid_quantization", None, "bogus"),
    ("h200-2026-12-01b/reason.log", "invalid_reasoning_parser", None, "nope"),
    ("h200-2026-12-01b/remote.log", "needs_trust_remote_code", None, "custom code"),
    ("h200-2026-12-01b/smolreal-no-kv-cache.log", "no_kv_cache_memory", None, "0.05 of GPU"),
    ("h200-2026-12-01b/specm.log", "invalid_speculative_method", None, "bogus"),
]


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_every_recorded_log_has_a_case():
    recorded = {str(p.relative_to(LOGS)) for p in LOGS.rglob("*") if p.is_file()}
    assert recorded == {name for name, *_ in REAL_LOGS}


@pytest.mark.parametrize(("name", "cause", "root", "what"), REAL_LOGS)
def test_each_real_log_is_diagnosed_as_what_happened(name, cause, root, what):
    text = _log(name)
    d = diagnose(text)
    if cause is None:
        assert d is None, (what, d)
        assert not any(is_fatal_line(ln) for ln in text.splitlines()), what
        return
    assert d is not None and d.cause == cause, (what, d)
    assert d.evidence and all(ln.strip() in text for ln in d.evidence)
    if cause in ("engine_dead", "engine_killed"):
        found = d.details["root_cause"]
        assert found is None if root is None else found.startswith(root), d.details
        assert "chat template" not in d.render()  # the API server's 400s, minutes before


def test_a_killed_engine_is_not_blamed_on_the_api_servers_earlier_errors():
    text = _log("serve-dummy-ngram.log")
    assert "Cannot apply chat template" in text  # logged by the API server at 13:50:52
    d = diagnose(text)
    assert d.cause == "engine_killed" and root_cause(text) is None
    assert "engine core exited unexpectedly" in d.evidence[0]
    assert "13:53:43" in d.remedy and "dmesg" in d.remedy


def test_the_engines_root_cause_names_its_process():
    d = diagnose(_log("h200-2026-12-01b/flashinfer.log"))
    assert d.details["process"] == "EngineCore pid=3854"
    assert d.summary.startswith("the engine process (EngineCore pid=3854) died: ValueError:")


def _fail_099(replacement: str) -> str:
    """The real 0.99 failure, with the engine's ValueError (logged twice: by its logger and by
    Python as it died) replaced by ``replacement``'s lines, each carrying the line's prefix."""
    real = _log("fail-gpu-memory-0.99.log")

    def swap(m: re.Match[str]) -> str:
        return "\n".join(m["prefix"] + part for part in replacement.split("\n"))

    text, n = re.subn(r"(?m)^(?P<prefix>.*?)ValueError: Free memory on device[^\n]*", swap, real)
    assert n == 2
    return text


CUDA_ERROR = (
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def test_a_multi_line_message_is_quoted_whole():
    d = diagnose(_fail_099(CUDA_ERROR))
    assert d.cause == "engine_dead"
    assert d.details["root_cause"] == CUDA_ERROR
    assert d.evidence[:4] == CUDA_ERROR.split("\n")
    assert "CUDA_LAUNCH_BLOCKING=1" in d.summary


def test_a_message_that_starts_on_the_next_line_is_not_an_empty_exception():
    d = diagnose(_fail_099("RuntimeError:\nWorker failed: NCCL timeout\nrank 1 never answered"))
    assert (
        d.details["root_cause"]
        == "RuntimeError: Worker failed: NCCL timeout\nrank 1 never answered"
    )
    assert "RuntimeError: Worker failed: NCCL timeout rank 1 never answered" in d.summary


def test_a_long_message_is_bounded():
    long = "RuntimeError: start\n" + "\n".join(f"detail {i} " + "x" * 300 for i in range(60))
    d = diagnose(_fail_099(long))
    cause = d.details["root_cause"]
    assert cause.startswith("RuntimeError: start\ndetail 0")
    assert len(cause) <= MAX_MESSAGE_CHARS and cause.count("\n") < MAX_MESSAGE_LINES
    assert cause.endswith("…")


def test_an_engine_exception_it_lived_through_is_not_its_death():
    # An error the engine logged and survived, three minutes before it was SIGKILLed.
    real = _log("serve-dummy-ngram.log")
    survived = (
        "(EngineCore pid=1598) ERROR 12-01 13:50:40 [core.py:1849] Invocation of "
        "collective_rpc method failed\n"
        "(EngineCore pid=1598) ERROR 12-01 13:50:40 [core.py:1849] RuntimeError: busy\n"
    )
    anchor = "(APIServer pid=1469) INFO:     127.0.0.1:53794"
    text = real.replace(anchor, survived + anchor, 1)
    assert text != real and ENGINE_DEATH_WINDOW_S < 183  # 13:50:40 to 13:53:43
    d = diagnose(text)
    assert d.cause == "engine_killed" and "busy" not in d.render()


# vLLM 0.33's shape: its logger names the process on each line (vllm/logger.py _FORMAT) but
# Python's own traceback of the dying child is not prefixed; multiprocessing names the child
# first ("Process EngineCore:").
LOG_033 = """\
(APIServer pid=10) INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.33.0
(APIServer pid=10) ERROR 12-01 10:00:20 [hf.py:786] ValueError: Cannot apply chat template to \
an empty conversation. Provide at least one message.
(EngineCore pid=20) ERROR 12-01 10:00:30 [core.py:1584] EngineCore failed to start.
(EngineCore pid=20) ERROR 12-01 10:00:30 [core.py:1584] Traceback (most recent call last):
(EngineCore pid=20) ERROR 12-01 10:00:30 [core.py:1584]   File "core.py", line 1, in run
(EngineCore pid=20) ERROR 12-01 10:00:30 [core.py:1584] ModuleNotFoundError: No module named \
'flashinfer'
Process EngineCore:
Traceback (most recent call last):
  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
ModuleNotFoundError: No module named 'flashinfer'
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): \
{'EngineCore': 1}
"""


def test_a_033_log_attributes_pythons_own_traceback_to_the_child_it_names():
    found = exceptions(read_lines(LOG_033))
    assert [(e.process, e.name) for e in found] == [
        ("APIServer", "ValueError"),
        ("EngineCore", "ModuleNotFoundError"),
        ("EngineCore", "ModuleNotFoundError"),
        (None, "RuntimeError"),
    ]
    d = diagnose(LOG_033)
    assert d.cause == "engine_dead"
    assert d.details["root_cause"] == "ModuleNotFoundError: No module named 'flashinfer'"


def test_an_engine_killed_at_startup_is_told_by_its_exit_code():
    text = (
        "(APIServer pid=10) INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.33.0\n"
        "(EngineCore pid=20) INFO 12-01 10:00:05 [core.py:140] Initializing a V1 LLM engine\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore': -9}\n"
    )
    d = diagnose(text)
    assert d.cause == "engine_killed" and d.details["root_cause"] is None
