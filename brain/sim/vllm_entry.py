"""Run the sim with vLLM's own argv: ``python -m brain.sim.vllm_entry serve MODEL --flag ...``.

The brain's Docker tests build a fake ``vllm/vllm-openai`` image whose entrypoint is this
module, so the brain's real ``vllm serve`` command line must start the sim. Flags that map are
honoured (``--served-model-name``, ``--max-model-len``, ``--host``, ``--port``, ``--api-key``,
``--max-num-seqs``, ``--max-num-queued-reqs``, ``--speculative-config``, ``--seed``,
``--allowed-local-media-path``, ``--stream-interval``, ``--enable-auto-tool-choice``,
``--tool-call-parser``, ``--block-size``, ``--[no-]enable-prefix-caching``); every other
flag is accepted and ignored with one log line, as the sim has no GPU to apply it to. As with
vLLM, without ``--enable-auto-tool-choice`` and ``--tool-call-parser`` a request
with tools (``tool_choice`` "auto" by default) is refused with vLLM's 400. The engine
arguments vLLM refuses (``brain/vllm_refusals.py``: ``--max-model-len`` below 1,
``--max-num-batched-tokens`` below ``--max-num-seqs`` or, with chunked prefill off, below
``--max-model-len``, an unknown ``--load-format``) end the start as vLLM's do: the same text,
in the same shape (a config's pydantic error from the API server, or the engine core's
``ValueError`` and the API server's "Engine core initialization failed"), exit status 1.

Sim-only settings come from the environment, since vLLM's argv has no room for them:
``BRAIN_SIM_CONFIG`` (YAML of SimConfig fields, the base), ``BRAIN_SIM_POLICY``,
``BRAIN_SIM_LOAD_DELAY``, ``BRAIN_SIM_FATAL_LOG``, ``BRAIN_SIM_FAULTS`` (``;``-separated fault
specs), ``BRAIN_SIM_VLLM_VERSION`` (``0.26`` or ``0.33``: the release to answer as).
``VLLM_API_KEY`` is read like vLLM does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from brain.sim.cli import build_config, serve_in_foreground
from brain.sim.config import SimConfig, load_config_file
from brain.sim.faults import parse_fault_spec
from brain.sim.logs import stdout_log, vllm_line
from brain.vllm_choices import LOAD_FORMATS, LOAD_FORMATS_026
from brain.vllm_refusals import (
    MODEL_CONFIG_ERROR,
    batched_tokens_refusal,
    load_format_refusal,
    max_model_len_refusal,
)

VLLM_DEFAULT_PORT = 8000


def parse_max_model_len(text: str) -> int | None:
    """vLLM's forms: 4096, 32k (x1000), 32K (x1024); ``auto``/``-1`` mean "the default"."""
    text = text.strip()
    if text in ("auto", "-1"):
        return None
    multipliers = {"k": 1000, "m": 1000**2, "g": 1000**3, "K": 1024, "M": 1024**2, "G": 1024**3}
    if text[-1:] in multipliers:
        return int(float(text[:-1]) * multipliers[text[-1]])
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm serve (simulated)", add_help=True, allow_abbrev=False
    )
    parser.add_argument("model_tag", nargs="?", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--max-model-len", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--api-key", action="append", default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-queued-reqs", type=int, default=None)
    parser.add_argument("--speculative-config", default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--allowed-local-media-path", default=None)
    parser.add_argument("--stream-interval", type=int, default=None)
    parser.add_argument("--enable-auto-tool-choice", action="store_true", default=False)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None
    )
    parser.add_argument("--max-num-batched-tokens", default=None)
    parser.add_argument(
        "--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None
    )
    parser.add_argument("--load-format", default=None)
    return parser


class EngineArgsRefused(Exception):
    """vLLM refused an engine argument: what it prints then (stdout, stderr), exit status 1."""

    def __init__(self, stdout: list[str], stderr: list[str]) -> None:
        super().__init__("\n".join(stderr))
        self.stdout = stdout
        self.stderr = stderr


def _config_error(config: str, text: str, below: int | None = None) -> EngineArgsRefused:
    """A config's refusal as vLLM's API server dies of it: pydantic's error for the config,
    from a validator's ValueError, or from the field's own ``ge=-1`` when ``below`` is the
    max_model_len given."""
    if below is None:
        kind = "value_error"
        detail = [
            f"  Value error, {text} [type={kind}, input_value=ArgsKwargs((), {{}}), "
            "input_type=ArgsKwargs]"
        ]
    else:
        kind = "greater_than_equal"
        detail = ["max_model_len", f"  {text} [type={kind}, input_value={below}, input_type=int]"]
    return EngineArgsRefused(
        [],
        [
            "Traceback (most recent call last):",
            MODEL_CONFIG_ERROR.format(config),
            *detail,
            f"    For further information visit https://errors.pydantic.dev/2.12/v/{kind}",
        ],
    )


def check_engine_args(known: argparse.Namespace, version: str | None) -> None:
    """Refuse what vLLM refuses, in its order: ModelConfig, SchedulerConfig (both while the
    API server builds the engine config), then the engine core loading the model."""
    window = parse_max_model_len(known.max_model_len) if known.max_model_len else None
    if window is not None and (refusal := max_model_len_refusal(window)) is not None:
        raise _config_error("ModelConfig", refusal, window if window < -1 else None)
    if known.max_num_batched_tokens is not None:
        tokens = parse_max_model_len(known.max_num_batched_tokens) or 0
        chunked = known.enable_chunked_prefill
        refusal = batched_tokens_refusal(tokens, known.max_num_seqs, window, chunked)
        if refusal is not None:
            raise _config_error("SchedulerConfig", refusal)
    formats = LOAD_FORMATS_026 if version == "0.26" else LOAD_FORMATS
    if known.load_format and (refusal := load_format_refusal(known.load_format, formats)):
        raise EngineArgsRefused(
            [
                vllm_line("EngineCore failed to start.", "core.py:1584", "ERROR"),
                vllm_line(f"ValueError: {refusal}", "core.py:1584", "ERROR"),
            ],
            [
                "Process EngineCore:",
                "Traceback (most recent call last):",
                f"ValueError: {refusal}",
                "Traceback (most recent call last):",
                "RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {'EngineCore': 1}",
            ],
        )


def config_from_vllm_argv(
    argv: Sequence[str], env: Mapping[str, str]
) -> tuple[SimConfig, list[str]]:
    """The SimConfig for a ``vllm serve`` command line, and the flags it ignored."""
    args = list(argv)
    if args[:1] == ["serve"]:
        args = args[1:]
    known, ignored = _parser().parse_known_args(args)
    base = load_config_file(env["BRAIN_SIM_CONFIG"]) if env.get("BRAIN_SIM_CONFIG") else SimConfig()
    check_engine_args(known, env.get("BRAIN_SIM_VLLM_VERSION") or base.vllm_version)
    model = known.model or known.model_tag or base.model
    overrides: dict[str, Any] = {
        "model": model,
        "served_model_names": known.served_model_name,
        "host": known.host or ("0.0.0.0" if not env.get("BRAIN_SIM_CONFIG") else None),
        "port": known.port if known.port is not None else (base.port or VLLM_DEFAULT_PORT),
        "max_num_seqs": known.max_num_seqs,
        "max_queue": known.max_num_queued_reqs,
        "seed": known.seed,
        "allowed_local_media_path": known.allowed_local_media_path,
        "stream_interval": known.stream_interval,
        "policy": env.get("BRAIN_SIM_POLICY"),
        "fatal_log": env.get("BRAIN_SIM_FATAL_LOG"),
        "vllm_version": env.get("BRAIN_SIM_VLLM_VERSION"),
        "block_size": known.block_size,
        "enable_prefix_caching": known.enable_prefix_caching,
    }
    # vLLM's tool flags: what the command line says, never the sim's own defaults
    data = {"enable_auto_tool_choice": known.enable_auto_tool_choice}
    data["tool_call_parser"] = known.tool_call_parser
    if data["enable_auto_tool_choice"] and not data["tool_call_parser"]:
        raise ValueError("--enable-auto-tool-choice requires --tool-call-parser")
    if known.max_model_len is not None:
        overrides["max_model_len"] = parse_max_model_len(known.max_model_len)
    keys = list(known.api_key or []) or ([env["VLLM_API_KEY"]] if env.get("VLLM_API_KEY") else [])
    if keys:
        overrides["api_keys"] = keys
    if known.speculative_config:
        spec = json.loads(known.speculative_config)
        overrides["speculative.num_tokens"] = int(spec.get("num_speculative_tokens", 1))
        overrides["speculative.method"] = str(
            spec.get("method") or ("draft_model" if spec.get("model") else "mtp")
        )
        overrides["speculative.draft_model"] = spec.get("model")
    if env.get("BRAIN_SIM_LOAD_DELAY"):
        overrides["timing.load_delay"] = float(env["BRAIN_SIM_LOAD_DELAY"])
    if env.get("BRAIN_SIM_FAULTS"):
        extra = [parse_fault_spec(s) for s in env["BRAIN_SIM_FAULTS"].split(";") if s.strip()]
        overrides["faults"] = [f.model_dump() for f in (*base.faults, *extra)]
    config = build_config(base, overrides)
    return config.model_copy(update=data), ignored


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["--version"], ["-v"]):  # `vllm --version`: the release the sim answers as
        print(SimConfig().version)
        return 0
    try:
        config, ignored = config_from_vllm_argv(argv, os.environ)
    except EngineArgsRefused as refused:
        for line in refused.stdout:
            stdout_log(line)
        print("\n".join(refused.stderr), file=sys.stderr, flush=True)
        return 1
    except (ValueError, KeyError) as exc:
        print(f"vllm serve (simulated): error: {exc}", file=sys.stderr, flush=True)
        return 2
    stdout_log(vllm_line(f"non-default args (simulated): {' '.join(argv)}", "utils.py:326"))
    if ignored:
        stdout_log(
            vllm_line(
                f"brain.sim ignores these vLLM flags: {' '.join(ignored)}",
                "vllm_entry.py:1",
                "WARNING",
            )
        )
    return serve_in_foreground(config)


if __name__ == "__main__":
    raise SystemExit(main())
