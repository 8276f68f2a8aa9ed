"""What each vLLM release the brain knows accepts, and how to tell which one it drives.

Flags, tool parsers, subcommands and request fields drift between releases: a spec written for
0.33 can start a 0.26 server that refuses a flag, or serve with a setting silently ignored. The
brain reads the version (``vllm --version`` for the process backend, the image tag for docker,
``/version`` of a running server) and checks the spec against that release's facts before
launch: what cannot work is refused with the fix, what can be left out is left out, and both
are said. Facts come from each release's source (paths below are inside the ``vllm`` package)
and, for 0.26, from a real run on an H200 (tests/fixtures/vllm-0.26); 0.33's value lists are
brain.vllm_choices'.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from brain.spec import ServerSpec
from brain.vllm_choices import LOAD_FORMATS, LOAD_FORMATS_026, TOOL_CALL_PARSERS, VLLM_VERSION
from brain.vllm_refusals import load_format_refusal

# tool_parsers/__init__.py _TOOL_PARSERS_TO_REGISTER in vLLM 0.26.0 (44 names; the same list
# the real server printed refusing "nosuch").
_TOOL_PARSERS_026 = frozenset(
    {
        "apertus",
        "cohere_command3",
        "cohere_command4",
        "deepseek_v3",
        "deepseek_v31",
        "deepseek_v32",
        "deepseek_v4",
        "ernie45",
        "functiongemma",
        "gemma4",
        "gigachat3",
        "glm45",
        "glm47",
        "granite",
        "granite-20b-fc",
        "granite4",
        "hermes",
        "hunyuan_a13b",
        "hy_v3",
        "inkling",
        "internlm",
        "jamba",
        "kimi_k2",
        "lfm2",
        "llama3_json",
        "llama4_json",
        "llama4_pythonic",
        "longcat",
        "mimo",
        "minicpm5",
        "minimax_m2",
        "minimax_m3",
        "mistral",
        "olmo3",
        "openai",
        "phi4_mini_json",
        "poolside_v1",
        "pythonic",
        "qwen3_coder",
        "qwen3_xml",
        "seed_oss",
        "step3",
        "step3p5",
        "xlam",
    }
)


@dataclass(frozen=True)
class VllmFacts:
    """What one vLLM release accepts, as far as the brain and the pilot depend on it."""

    version: str
    tool_call_parsers: frozenset[str]
    max_num_queued_reqs: bool
    """``--max-num-queued-reqs`` (engine/arg_utils.py; absent in 0.26)."""
    adaptive_verification: bool
    """``enable_adaptive_verification`` in the speculative config (config/speculative.py)."""
    preload: bool
    """``vllm preload`` and ``--load-format ipc_cache`` (entrypoints/cli/preload.py,
    model_executor/model_loader/weight_cache/)."""
    request_stream_interval: bool
    """A request's own ``stream_interval`` (entrypoints/openai/chat_completion/protocol.py);
    0.26 has only the server's ``--stream-interval`` and drops the field with HTTP 200."""
    clamps_max_tokens: bool
    """Prompt + max_tokens over the window: 0.33 lowers max_tokens, 0.26 answers 400."""
    load_formats: frozenset[str]
    """``--load-format`` values its engine loads (model_executor/model_loader/__init__.py)."""


KNOWN: dict[str, VllmFacts] = {
    "0.26": VllmFacts(
        version="0.26.0",
        tool_call_parsers=_TOOL_PARSERS_026,
        max_num_queued_reqs=False,
        adaptive_verification=False,
        preload=False,
        request_stream_interval=False,
        clamps_max_tokens=False,
        load_formats=LOAD_FORMATS_026,
    ),
    "0.33": VllmFacts(
        version=VLLM_VERSION,
        tool_call_parsers=TOOL_CALL_PARSERS,
        max_num_queued_reqs=True,
        adaptive_verification=True,
        preload=True,
        request_stream_interval=True,
        clamps_max_tokens=True,
        load_formats=LOAD_FORMATS,
    ),
}
DEFAULT = "0.33"
"""The release the brain's argv, diagnosis and sim are checked against (spec.DEFAULT_TAG)."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``0.26.0``, ``v0.33.0``, ``0.26.0+cu130``, ``vllm 0.26.0`` -> (0, 26, 0); else None."""
    if not text:
        return None
    m = _VERSION.search(text.strip())
    if not m:
        return None
    return int(m[1]), int(m[2]), int(m[3] or 0)


def facts_for(version: str | None) -> VllmFacts:
    """The facts of the newest known release not newer than ``version`` (the default release
    when the version is unknown; the oldest known one for anything older)."""
    parsed = parse_version(version)
    if parsed is None:
        return KNOWN[DEFAULT]
    known = sorted(KNOWN.items(), key=lambda kv: parse_version(kv[0]) or (0, 0, 0))
    best = known[0][1]
    for key, facts in known:
        if (parse_version(key) or (0, 0, 0))[:2] <= parsed[:2]:
            best = facts
    return best


def version_from_tag(tag: str | None) -> str | None:
    """The release an image tag names (``v0.33.0``, ``v0.26.0-cu130``); None for ``latest``."""
    parsed = parse_version(tag)
    return ".".join(map(str, parsed)) if parsed else None


_ASK_METADATA = "from importlib.metadata import version; print(version('vllm'))"


def _python_of(executable: Sequence[str]) -> str | None:
    """The interpreter of a pip-installed ``vllm`` script (its ``#!`` line), if it is one."""
    path = shutil.which(executable[0]) if len(executable) == 1 else None
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    interpreter = first[2:].strip().split()[0] if first[2:].strip() else ""
    return interpreter if os.path.basename(interpreter).startswith("python") else None


def installed_version(executable: Sequence[str], timeout: float = 120.0) -> str | None:
    """The installed vLLM's version: from its package metadata when ``executable`` is a
    pip-installed script (a fraction of a second), else ``<executable> --version`` (which
    imports vLLM: 26 s on the H200, more while other servers start). None when neither says
    (the sim, a wrapper that does not pass --version on)."""
    python = _python_of(executable)
    if python is not None:
        try:
            done = subprocess.run(
                [python, "-c", _ASK_METADATA],
                capture_output=True,
                text=True,
                timeout=30.0,
                stdin=subprocess.DEVNULL,
            )
            if done.returncode == 0 and parse_version(done.stdout):
                return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        done = subprocess.run(
            [*executable, "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    for line in reversed(done.stdout.strip().splitlines()):
        if re.fullmatch(r"\s*v?\d+\.\d+(?:\.\d+)?\S*\s*", line):
            return line.strip()
    return None


@dataclass(frozen=True)
class VersionIssue:
    """One spec setting the release does not accept: refused (cannot work) or left out."""

    field: str
    action: Literal["refuse", "drop"]
    message: str


def check_spec(spec: ServerSpec, facts: VllmFacts) -> list[VersionIssue]:
    """What in ``spec`` this release does not accept."""
    v = facts.version
    issues: list[VersionIssue] = []
    parser = spec.tool_call_parser
    if parser and parser not in facts.tool_call_parsers:
        issues.append(
            VersionIssue(
                "tool_call_parser",
                "refuse",
                f"vLLM {v} has no tool parser {parser!r}: set tool_call_parser to one of "
                f"{', '.join(sorted(facts.tool_call_parsers))}, or use a newer vLLM.",
            )
        )
    if not facts.preload and (spec.preload.enabled or spec.load_format == "ipc_cache"):
        issues.append(
            VersionIssue(
                "preload",
                "refuse",
                f"vLLM {v} has no weight-cache daemon (vllm preload, --load-format ipc_cache): "
                "set preload.enabled=false (and unset load_format), or use vLLM >= 0.33.",
            )
        )
    fmt = spec.load_format
    if fmt and fmt != "ipc_cache" and (refusal := load_format_refusal(fmt, facts.load_formats)):
        issues.append(
            VersionIssue(
                "load_format",
                "refuse",
                f"vLLM {v} refuses it when its engine loads the model ({refusal!r}): set "
                f"load_format to one of {', '.join(sorted(facts.load_formats))}, or unset it.",
            )
        )
    if spec.max_num_queued_reqs is not None and not facts.max_num_queued_reqs:
        issues.append(
            VersionIssue(
                "max_num_queued_reqs",
                "drop",
                f"vLLM {v} has no --max-num-queued-reqs: left out, so the server's queue has "
                "no bound (clients see no 503 when it is full).",
            )
        )
    sp = spec.speculative
    if sp is not None and sp.enable_adaptive_verification and not facts.adaptive_verification:
        issues.append(
            VersionIssue(
                "speculative.enable_adaptive_verification",
                "drop",
                f"vLLM {v} has no adaptive verification: left out of the speculative config "
                "(speculation runs with a fixed num_speculative_tokens).",
            )
        )
    return issues


def refusal_message(issues: list[VersionIssue]) -> str | None:
    """One message for every refused setting, or None."""
    refused = [i for i in issues if i.action == "refuse"]
    if not refused:
        return None
    return "\n".join(f"{i.field}: {i.message}" for i in refused)


def adapt_argv(argv: list[str], issues: list[VersionIssue]) -> list[str]:
    """``argv`` without what ``issues`` drops: the flag and its value, or a key of the
    ``--speculative-config`` JSON."""
    dropped = {i.field for i in issues if i.action == "drop"}
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if "max_num_queued_reqs" in dropped and arg.split("=", 1)[0] == "--max-num-queued-reqs":
            skip = "=" not in arg
            continue
        if (
            "speculative.enable_adaptive_verification" in dropped
            and i > 0
            and argv[i - 1] == "--speculative-config"
        ):
            try:
                cfg = json.loads(arg)
            except ValueError:
                cfg = None
            if isinstance(cfg, dict):
                cfg.pop("enable_adaptive_verification", None)
                arg = json.dumps(cfg, separators=(",", ":"))
        out.append(arg)
    return out
