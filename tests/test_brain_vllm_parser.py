"""Every profile's argv, checked by vLLM's own argument parser and validators.

vLLM is heavy and is never installed into the project venv. Point MARATHON_VLLM_PYTHON at a
python that can import vllm (e.g. the lite venv from reference/env.md section 4); the check
runs there in one subprocess for all profiles. Skipped, with the reason, otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from brain.command import vllm_preload_argv, vllm_serve_argv
from brain.profiles import apply_overrides, list_profiles, load_profile
from brain.spec import ServerSpec
from brain.spec_flags import flag_fields

# Runs inside the vLLM python: parse each argv like `vllm serve` / `vllm preload` would.
CHECKER = r"""
import json, os, sys
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.common.cli_args import (
    make_arg_parser, validate_parsed_serve_args, validate_api_server_args)
from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
from vllm.entrypoints.cli.preload import PreloadSubcommand
import vllm
cases = json.load(sys.stdin)
out = {"version": vllm.__version__, "results": {}}
for name, case in cases.items():
    try:
        if case["kind"] == "serve":
            p = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
            p.add_argument("model_tag", nargs="?")
            ns = p.parse_args(case["argv"])
            if ns.model_tag:
                ns.model = ns.model_tag
            validate_parsed_serve_args(ns)
            validate_api_server_args(ns)
            AsyncEngineArgs.from_cli_args(ns)
        else:
            p = FlexibleArgumentParser(prog="vllm preload")
            PreloadSubcommand.add_cli_args(p)
            ns = p.parse_args(case["argv"])
            EngineArgs.from_cli_args(ns)
        out["results"][name] = "ok"
    except SystemExit as e:
        out["results"][name] = f"argparse exit {e.code}"
    except BaseException as e:
        out["results"][name] = f"{type(e).__name__}: {e}"
print("MARATHON-RESULT " + json.dumps(out))
"""


def _vllm_python() -> str:
    py = os.environ.get("MARATHON_VLLM_PYTHON")
    if not py:
        pytest.skip("MARATHON_VLLM_PYTHON is not set (a python with vllm importable)")
    if not Path(py).exists():
        pytest.skip(f"MARATHON_VLLM_PYTHON={py} does not exist")
    return py


def _cases() -> dict[str, dict]:
    cases: dict[str, dict] = {}
    for name in list_profiles():
        spec = load_profile(name)
        cases[name] = {"kind": "serve", "argv": vllm_serve_argv(spec)}
        if spec.distributed is not None:
            # the head's argv as the process backend runs it (the docker one is above)
            argv = vllm_serve_argv(spec, in_container=False)
            cases[f"{name}/process"] = {"kind": "serve", "argv": argv}
            continue  # a multi-node server has no weight-cache daemon (refused by the spec)
        pre = apply_overrides(spec, ["preload.enabled=true", "preload.socket_dir=/tmp/wc"])
        if spec.backend != "sim":
            cases[f"{name}+preload"] = {"kind": "serve", "argv": vllm_serve_argv(pre)}
            cases[f"{name}/daemon"] = {"kind": "preload", "argv": vllm_preload_argv(pre)}
    cases["all-fields"] = {
        "kind": "serve",
        "argv": vllm_serve_argv(
            apply_overrides(
                load_profile("qwen2.5-1.5b-smoke"),
                [
                    "host=0.0.0.0",
                    "api_key=k",
                    "max_num_batched_tokens=8192",
                    "max_num_queued_reqs=16",
                    "stream_interval=8",
                    "kv_cache_dtype=fp8",
                    "enable_chunked_prefill=false",
                    "enable_prefix_caching=false",
                    "attention_backend=FLASH_ATTN",
                    "dtype=bfloat16",
                    "reasoning_parser=qwen3",
                    "trust_remote_code=true",
                    "generation_config=vllm",
                    "limit_mm_per_prompt={image: 2}",
                    "load_format=safetensors",
                ],
            )
        ),
    }
    # The other spellings the spec owns (aliases, the --no- form of each boolean): refusing
    # them in extra_args only protects something if vLLM knows them.
    negatives = [f.negative for f in flag_fields(ServerSpec) if f.negative]
    aliases = ["-tp", "1", "-pp", "1", "-q", "fp8"]
    cases["owned-spellings"] = {
        "kind": "serve",
        "argv": ["Qwen/Qwen2.5-1.5B-Instruct", *aliases, *negatives],
    }
    # A fleet replica is its profile with another name, port and GPUs: the TP-2 one on "2,3".
    from brain.fleet.plan import parse_gpus, plan_replicas

    replica = plan_replicas(
        load_profile("gemma4-e4b-mtp-tp2"), gpus=parse_gpus("0,1,2,3"), base_port=9000
    )[1]
    cases["fleet-replica-r1"] = {"kind": "serve", "argv": vllm_serve_argv(replica.spec)}
    return cases


@pytest.fixture(scope="module")
def vllm_results() -> dict:
    py = _vllm_python()
    proc = subprocess.run(
        [py, "-c", CHECKER],
        input=json.dumps(_cases()),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("MARATHON-RESULT ")), None)
    if line is None:
        pytest.fail(f"vLLM checker failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line.removeprefix("MARATHON-RESULT "))


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(_cases()))
def test_vllm_accepts_the_argv(vllm_results, case):
    assert vllm_results["results"][case] == "ok", vllm_results["results"][case]
