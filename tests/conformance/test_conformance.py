"""The sim answers every conformance case as vLLM does, over real HTTP (``cases.py``).

Each case runs against the sim in each vLLM flavour it lists; a case marked ``recorded`` is
also checked against the real vLLM 0.26 exchange it names, and a case marked ``not_followed``
must still differ from the sim (so the exception cannot go stale). With an installed vLLM
(``MARATHON_VLLM_PYTHON``: a Python that can ``import vllm``; ``VLLM_TARGET_DEVICE=cpu`` is
set for it) the expected answers of the cases marked ``vllm`` are recomputed by vLLM's own
request model, validation handler, tokenize limits and sampling-parameter checks, and the
forced and cut tool answers are read back by vLLM's own parser (``vllm_forced.py``); without
one those tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from brain.sim.config import SimConfig
from brain.sim.server import RunningSim, running_sim
from brain.sim.tokenizer import VOCAB_SIZE, count_chat
from brain.sim.vllm_entry import config_from_vllm_argv

from .cases import (
    ANY,
    CASES,
    METRIC_FAMILIES,
    SERVERS,
    SPEC_FAMILIES,
    Case,
    Expect,
)

HERE = Path(__file__).parent
RECORDED = HERE / "recorded_026"


@dataclass
class Answer:
    """What a server answered: status and body text (a recording parses to the same)."""

    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


# ------------------------------------------------------------------------------ the servers


@pytest.fixture(scope="module")
def sims() -> Iterator[Callable[[str, str], RunningSim]]:
    """One running sim per (server settings, flavour), started on first use."""
    with contextlib.ExitStack() as stack:
        running: dict[tuple[str, str], RunningSim] = {}

        def get(server: str, version: str) -> RunningSim:
            key = (server, version)
            if key not in running:
                config = SimConfig.model_validate({**SERVERS[server], "vllm_version": version})
                running[key] = stack.enter_context(running_sim(config))
            return running[key]

        yield get


def _send(base_url: str, case: Case) -> Answer:
    if case.raw is not None:
        content = case.raw.encode()
    elif case.body is not None:
        content = json.dumps(case.body).encode()
    else:
        content = None
    response = httpx.request(
        case.method,
        base_url + case.path,
        content=content,
        headers={"content-type": case.content_type} if content is not None else {},
        timeout=30,
    )
    return Answer(response.status_code, response.text)


def _recorded(name: str) -> Answer:
    """Status and body of a recorded exchange (``### ...`` lines, headers, body)."""
    text = (RECORDED / name).read_text(encoding="utf-8")
    status = int(re.search(r"^HTTP/1\.1 (\d+)", text, re.M)[1])  # type: ignore[index]
    body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    body = body.split("\n### curl", 1)[0].strip()
    return Answer(status, body)


# ------------------------------------------------------------------------ matching an answer


def _keys(actual: dict[str, Any], expected: Any, what: str) -> list[str]:
    if expected is None or set(actual) == set(expected):
        return []
    return [f"{what} keys differ: missing {set(expected) - set(actual)}, extra "
            f"{set(actual) - set(expected)}"]  # fmt: skip


def mismatches(expect: Expect, answer: Answer, case: Case, sim: RunningSim | None) -> list[str]:
    """Every way ``answer`` differs from ``expect`` (empty: it conforms)."""
    problems: list[str] = []
    if expect.status and answer.status != expect.status:
        return [f"status {answer.status} != {expect.status}: {answer.text[:300]}"]
    wants_error = expect.type is not None or expect.message is not None
    if wants_error or expect.message_contains is not None:
        error = answer.json()["error"]
        if expect.type is not None and error["type"] != expect.type:
            problems.append(f"type {error['type']!r} != {expect.type!r}")
        if expect.param is not ANY and error["param"] != expect.param:
            problems.append(f"param {error['param']!r} != {expect.param!r}")
        if expect.message is not None and error["message"] != expect.message:
            problems.append(f"message {error['message']!r} != {expect.message!r}")
        if expect.message_contains is not None and expect.message_contains not in error["message"]:
            problems.append(f"message {error['message']!r} lacks {expect.message_contains!r}")
    if expect.keys is not None or expect.finish_reason is not None:
        body = answer.json()
        problems += _keys(body, expect.keys, "body")
        choice = (body.get("choices") or [{}])[0]
        problems += _keys(choice, expect.choice_keys, "choice")
        if expect.message_keys is not None:
            problems += _keys(choice["message"], expect.message_keys, "message")
        problems += _keys(body.get("usage") or {}, expect.usage_keys, "usage")
        if expect.finish_reason is not None and choice["finish_reason"] != expect.finish_reason:
            problems.append(
                f"finish_reason {choice['finish_reason']!r} != {expect.finish_reason!r}"
            )
    if expect.check is not None:
        problems += CHECKS[expect.check](answer, case, sim)
    return problems


# ---------------------------------------------------------------------------- extra checks


def _two_choices(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    indexes = [c["index"] for c in answer.json()["choices"]]
    return [] if indexes == [0, 1] else [f"choices {indexes}"]


def _clamped(answer: Answer, case: Case, sim: RunningSim | None) -> list[str]:
    usage = answer.json()["usage"]
    window = SERVERS[case.server]["max_model_len"]
    if usage["prompt_tokens"] + usage["completion_tokens"] > window:
        return [f"prompt + completion over the window: {usage}"]
    if sim is None:
        return []
    # with 3 tokens of room left, the clamped answer is cut there, by `length`
    filler = "x" * (4 * (window - 3 - count_chat([{"role": "user", "content": ""}])))
    body = {"model": "smol", "messages": [{"role": "user", "content": filler}], "max_tokens": 500}
    tight = httpx.post(sim.openai_base_url + "/chat/completions", json=body, timeout=30).json()
    if tight["usage"]["completion_tokens"] != 3 or tight["choices"][0]["finish_reason"] != "length":
        return [f"with 3 tokens of room: {tight['usage']}, {tight['choices'][0]['finish_reason']}"]
    return []


def _call_has_required_city(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    calls = answer.json()["choices"][0]["message"].get("tool_calls") or []
    if not calls or calls[0]["function"]["name"] != "get_weather":
        return [f"calls {calls}"]
    arguments = json.loads(calls[0]["function"]["arguments"])
    return [] if "city" in arguments else [f"arguments {arguments} lack the required city"]


def _sane_ids(answer: Answer, _case: Case, sim: RunningSim | None) -> list[str]:
    body = answer.json()
    tokens = body["tokens"]
    problems = [] if body["count"] == len(tokens) else ["count != len(tokens)"]
    if not all(0 <= t < VOCAB_SIZE for t in tokens):
        problems.append(f"ids outside a vocabulary of {VOCAB_SIZE}: {tokens}")
    if sim is not None:
        back = httpx.post(sim.base_url + "/detokenize", json={"model": "smol", "tokens": tokens})
        if back.json() != {"prompt": "Hello world, this is a test."}:
            problems.append(f"detokenize gave {back.text}")
    return problems


def _model_card(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    card = answer.json()["data"][0]
    keys = ["id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"]
    return _keys(card, keys, "model card") + (
        [] if card["id"] == "smol" and card["max_model_len"] == 4096 else [f"card {card}"]
    )


def _not_found_detail(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    return [] if answer.json() == {"detail": "Not Found"} else [answer.text]


def _stream_usage(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return ["the stream does not end in [DONE]"]
    chunks = [json.loads(e) for e in events[:-1]]
    problems = []
    if chunks[0]["choices"][0]["delta"] != {"role": "assistant", "content": ""}:
        problems.append(f"first delta {chunks[0]['choices'][0]['delta']}")
    last = chunks[-1]
    if last["choices"] != [] or set(last["usage"]) != {
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
    }:
        problems.append(f"usage chunk {last}")
    if not any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks):
        problems.append("no chunk carries a finish_reason")
    return problems


def _stream_cut_call(answer: Answer, case: Case, sim: RunningSim | None) -> list[str]:
    """A streamed call cut at max_tokens: its arguments are not whole JSON, all max_tokens
    were spent, and the last choice chunk's finish_reason is the release's."""
    assert sim is not None
    chunks = [json.loads(line[6:]) for line in answer.text.splitlines() if line[:7] == "data: {"]
    arguments = "".join(
        call["function"].get("arguments") or ""
        for chunk in chunks
        if chunk["choices"]
        for call in chunk["choices"][0]["delta"].get("tool_calls") or []
    )
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    problems = []
    try:
        json.loads(arguments)
        problems.append(f"the call's arguments are whole: {arguments!r}")
    except ValueError:
        pass
    if not arguments:
        problems.append("no call was streamed")
    if chunks[-1]["usage"]["completion_tokens"] != case.extra["max_tokens"]:
        problems.append(f"usage {chunks[-1]['usage']}")
    wanted = case.extra["finish_reason"][sim.config.vllm_version]
    if reasons[-1] != wanted:
        problems.append(f"finish_reason {reasons[-1]!r} != {wanted!r}")
    return problems


def _message(answer: Answer) -> dict[str, Any]:
    return answer.json()["choices"][0]["message"]


def _forced_call(answer: Answer, case: Case, sim: RunningSim | None) -> list[str]:
    """A forced answer: the call with valid JSON arguments holding the required city, and
    content "" (``assemble_chat_message_fields``), not null."""
    problems = _call_has_required_city(answer, case, sim)
    content = _message(answer)["content"]
    return problems + ([] if content == "" else [f"content {content!r} is not ''"])


def _stream_events(answer: Answer) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in answer.text.splitlines() if line[:7] == "data: {"]


def _forced_stream(answer: Answer, case: Case, sim: RunningSim | None) -> list[str]:
    """A forced stream: one call, opened with id, type and name (no arguments key, as hermes
    opens it), whose argument pieces make whole JSON; no content after the role chunk; the
    release's finish_reason."""
    assert sim is not None
    chunks = [c for c in _stream_events(answer) if c["choices"]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [call for d in deltas for call in d.get("tool_calls") or []]
    problems: list[str] = []
    if not calls or not (calls[0].get("id") and calls[0]["function"].get("name")):
        return [f"no call opened: {deltas}"]
    if "arguments" in calls[0]["function"]:  # hermes: DeltaFunctionCall(name=...) alone
        problems.append(f"the opening entry carries arguments: {calls[0]}")
    arguments = "".join(c["function"].get("arguments") or "" for c in calls)
    try:
        if "city" not in json.loads(arguments):
            problems.append(f"arguments {arguments!r} lack the city")
    except ValueError:
        problems.append(f"arguments {arguments!r} are not whole")
    if any(d.get("content") for d in deltas):
        problems.append("content was streamed")
    wanted = case.extra["finish_reason"][sim.config.vllm_version]
    if chunks[-1]["choices"][0]["finish_reason"] != wanted:
        problems.append(
            f"finish_reason {chunks[-1]['choices'][0]['finish_reason']!r} != {wanted!r}"
        )
    return problems


def _cut_call_as_content(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    message = _message(answer)
    content = message["content"] or ""
    problems = [f"tool_calls {message['tool_calls']}"] if message.get("tool_calls") else []
    if not content.startswith('<tool_call>\n{"name": "finish", "arguments": '):
        problems.append(f"content {content!r}")
    return problems


def _no_call_empty_content(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    message = _message(answer)
    ok = not message.get("tool_calls") and message["content"] == ""
    return [] if ok else [f"message {message}"]


def _cut_named_call(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    message = _message(answer)
    calls = message.get("tool_calls") or []
    if len(calls) != 1 or calls[0]["function"]["name"] != "finish" or message["content"] != "":
        return [f"message {message}"]
    try:
        json.loads(calls[0]["function"]["arguments"])
        return ["the arguments are whole"]
    except ValueError:
        return []


def _content_fits_weather(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    content = _message(answer)["content"]
    try:
        value = json.loads(content)
    except (TypeError, ValueError):
        return [f"content {content!r} is not JSON"]
    return [] if isinstance(value, dict) and "city" in value else [f"content {content!r}"]


def _content_is_json_object(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    content = _message(answer)["content"]
    try:
        return [] if isinstance(json.loads(content), dict) else [f"content {content!r}"]
    except (TypeError, ValueError):
        return [f"content {content!r} is not JSON"]


def _content_not_whole_json(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    content = _message(answer)["content"] or ""
    try:
        json.loads(content)
        return [f"content {content!r} is whole"]
    except ValueError:
        return [] if content.startswith("{") else [f"content {content!r}"]


def _content_is_a_choice(answer: Answer, case: Case, _sim: RunningSim | None) -> list[str]:
    content = _message(answer)["content"]
    choices = (case.body or {})["structured_outputs"]["choice"]
    return [] if content in choices else [f"content {content!r} not in {choices}"]


def _families(text: str) -> set[str]:
    """The families a /metrics text declares, by their registered names. A ``X_created`` gauge
    next to counter ``X_total`` or histogram ``X`` is not one: prometheus_client writes it for
    each (vLLM's own /metrics has them, ``tests/fixtures/vllm-0.26/http/metrics_after.txt``)."""
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
    out = set()
    for name, kind in types.items():
        owner = name.removesuffix("_created")
        companion = types.get(f"{owner}_total") == "counter" or types.get(owner) == "histogram"
        if kind == "gauge" and owner != name and companion:
            continue
        out.add(name.removesuffix("_total") if kind == "counter" else name)
    return out


def _metric_families(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    got, want = _families(answer.text), set(METRIC_FAMILIES)
    return [] if got == want else [f"missing {want - got}, extra {got - want}"]


def _spec_families(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    got, want = _families(answer.text), set(METRIC_FAMILIES) | set(SPEC_FAMILIES)
    return [] if got == want else [f"missing {want - got}, extra {got - want}"]


def _finish_reasons(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    reasons = set(
        re.findall(r'^vllm:request_success_total\{.*finished_reason="(\w+)"', answer.text, re.M)
    )
    want = {"stop", "length", "abort", "error", "repetition"}
    return [] if reasons == want else [f"finished_reason labels {reasons}"]


def _kv_line_033(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    pattern = (
        r"\] GPU KV cache size: [\d,]+ tokens, "
        r"Maximum concurrency for [\d,]+ tokens per request: [\d.]+x$"
    )
    lines = [line for line in answer.text.splitlines() if "KV cache size" in line]
    ok = len(lines) == 1 and re.search(pattern, lines[0])
    return [] if ok else [f"KV lines {lines}"]


def _kv_lines_026(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    size = [
        line
        for line in answer.text.splitlines()
        if re.search(r"\] GPU KV cache size: [\d,]+ tokens$", line)
    ]
    most = [
        line
        for line in answer.text.splitlines()
        if re.search(r"\] Maximum concurrency for [\d,]+ tokens per request: [\d.]+x$", line)
    ]
    return [] if len(size) == 1 and len(most) == 1 else [f"KV lines {size} {most}"]


def _listening_line(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    ok = re.search(r"\] Starting vLLM server on http://[\d.]+:\d+$", answer.text, re.M)
    return [] if ok else ["no 'Starting vLLM server on' line"]


def _argv_refused(answer: Answer, _case: Case, _sim: RunningSim | None) -> list[str]:
    wanted = "--enable-auto-tool-choice requires --tool-call-parser"
    return [] if wanted in answer.text else [f"stderr {answer.text!r}"]


CHECKS: dict[str, Callable[[Answer, Case, RunningSim | None], list[str]]] = {
    "two_choices": _two_choices,
    "clamped": _clamped,
    "call_has_required_city": _call_has_required_city,
    "sane_ids": _sane_ids,
    "model_card": _model_card,
    "not_found_detail": _not_found_detail,
    "stream_usage": _stream_usage,
    "stream_cut_call": _stream_cut_call,
    "forced_call": _forced_call,
    "forced_stream": _forced_stream,
    "cut_call_as_content": _cut_call_as_content,
    "no_call_empty_content": _no_call_empty_content,
    "cut_named_call": _cut_named_call,
    "content_fits_weather": _content_fits_weather,
    "content_is_json_object": _content_is_json_object,
    "content_not_whole_json": _content_not_whole_json,
    "content_is_a_choice": _content_is_a_choice,
    "metric_families": _metric_families,
    "spec_families": _spec_families,
    "finish_reasons": _finish_reasons,
    "kv_line_033": _kv_line_033,
    "kv_lines_026": _kv_lines_026,
    "listening_line": _listening_line,
    "argv_refused": _argv_refused,
}


# ----------------------------------------------------------------------------- running a case


def _startup_log(version: str) -> Answer:
    lines: list[str] = []
    config = SimConfig.model_validate({**SERVERS["default"], "vllm_version": version})
    with running_sim(config, log=lines.append):
        pass
    return Answer(0, "\n".join(lines))


def _argv_answer(case: Case, version: str) -> tuple[Answer, RunningSim | None]:
    argv = case.extra["argv"]
    env = {"BRAIN_SIM_VLLM_VERSION": version}
    if case.expect.status == 2:  # refused at startup: the real process and its stderr
        done = subprocess.run(
            [sys.executable, "-m", "brain.sim.vllm_entry", *argv, "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )
        return Answer(done.returncode, done.stderr), None
    config, _ignored = config_from_vllm_argv(argv, env)
    config = config.model_copy(update={"host": "127.0.0.1", "port": 0})
    with running_sim(config) as sim:
        return _send(sim.base_url, case), None


def answer_of(
    case: Case, version: str, sims: Callable[[str, str], RunningSim]
) -> tuple[Answer, RunningSim | None]:
    if case.kind == "log":
        return _startup_log(version), None
    if case.kind == "argv":
        return _argv_answer(case, version)
    sim = sims(case.server, version)
    return _send(sim.base_url, case), sim


RUNS = [
    pytest.param(case, version, id=f"{case.id}[{version}]")
    for case in CASES
    for version in case.versions
]


@pytest.mark.parametrize(("case", "version"), RUNS)
def test_the_sim_answers_as_vllm(case: Case, version: str, sims: Any) -> None:
    answer, sim = answer_of(case, version, sims)
    problems = mismatches(case.expect, answer, case, sim)
    if case.not_followed:
        assert problems, f"{case.id} is marked not followed but the sim now follows it"
        return
    assert not problems, f"{case.id} ({case.source}): {problems}"


RECORDED_CASES = [pytest.param(c, id=c.id) for c in CASES if c.recorded]


@pytest.mark.parametrize("case", RECORDED_CASES)
def test_the_table_agrees_with_the_recorded_vllm_026(case: Case) -> None:
    """A recorded case's expectation is what real vLLM 0.26 answered, where 0.26 answers so;
    a case that says only 0.33 answers so must differ from the recording."""
    if case.recorded.endswith(".log"):  # type: ignore[union-attr]
        answer = Answer(0, (RECORDED / case.recorded).read_text(encoding="utf-8"))  # type: ignore[operator]
    else:
        answer = _recorded(case.recorded)  # type: ignore[arg-type]
    expect = case.expect
    if "recorded_contains" in case.extra:
        assert case.extra["recorded_contains"] in answer.json()["error"]["message"]
        expect = Expect(expect.status, expect.type, expect.param)
    problems = mismatches(expect, answer, case, None)
    if "0.26" in case.versions:
        assert not problems, f"{case.id} disagrees with {case.recorded}: {problems}"
    else:
        assert problems, f"{case.id} says 0.26 answers otherwise, but {case.recorded} agrees"


def test_the_table_counts() -> None:
    """The figures the README quotes: cases, runs, and the exceptions with their reasons."""
    runs = [(c, v) for c in CASES for v in c.versions]
    followed = [r for r in runs if not r[0].not_followed]
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
    assert all(c.source for c in CASES)
    assert (len(CASES), len(runs), len(followed)) == (TABLE_SIZE, RUN_COUNT, FOLLOWED)


TABLE_SIZE, RUN_COUNT, FOLLOWED = 80, 107, 103  # quoted in brain/sim/README.md


# ------------------------------------------------------------------- against a real vLLM


def _vllm_python() -> str | None:
    configured = os.environ.get("MARATHON_VLLM_PYTHON")
    if configured:
        return configured if shutil.which(configured) or Path(configured).exists() else None
    return None


def test_the_expected_answers_are_vllms_own() -> None:
    python = _vllm_python()
    if python is None:
        pytest.skip(
            "no installed vLLM: set MARATHON_VLLM_PYTHON to a Python with vllm 0.33 "
            "(the lite recipe in the reference env.md) to recompute the expected answers"
        )
    chosen = [c for c in CASES if c.vllm]
    payload = []
    for case in chosen:
        window = SERVERS[case.server]["max_model_len"]
        messages = (case.body or {}).get("messages")
        tokens = count_chat(messages) if isinstance(messages, list) else 1
        tokens = min(tokens, window + 1)  # vLLM's tokenizer stops at the limit + 1
        payload.append(
            {
                "id": case.id,
                "body": case.body,
                "raw": case.raw,
                "content_type": case.content_type,
                "max_model_len": window,
                "prompt_tokens": tokens,
            }
        )
    done = subprocess.run(
        [python, str(HERE / "vllm_expected.py")],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    vllm = json.loads(done.stdout)
    problems = []
    for case in chosen:
        got = vllm[case.id]
        if got["status"] != case.expect.status:
            problems.append(f"{case.id}: vLLM {got}")
            continue
        if got["status"] == 200:
            continue
        answer = Answer(got["status"], json.dumps({"error": got["error"]}))
        bare = Expect(
            case.expect.status,
            case.expect.type,
            case.expect.param,
            case.expect.message,
            case.expect.message_contains,
        )
        found = mismatches(bare, answer, case, None)
        problems += [f"{case.id}: {p}" for p in found]
    assert not problems, "\n".join(problems)


READ_BACK = [
    c
    for c in CASES
    if c.expect.check
    in {"forced_call", "cut_call_as_content", "no_call_empty_content", "cut_named_call"}
    or c.expect.check in {"forced_stream", "stream_cut_call"}
]
"""The cases whose answers, streamed and not, are vLLM's reading of what the model wrote."""


def _streamed_output(
    sim: RunningSim, body: dict[str, Any]
) -> tuple[str, list[list[str]], int, str | None]:
    """(content, [[name, arguments]], completion tokens, last finish_reason) of the sim's
    streamed answer."""
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    text = httpx.post(sim.openai_base_url + "/chat/completions", json=streamed, timeout=30).text
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line[:7] == "data: {"]
    content, calls = "", {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or []:
                name, args = calls.get(call["index"], ["", ""])
                function = call.get("function") or {}
                calls[call["index"]] = [name or function.get("name") or "",
                                        args + (function.get("arguments") or "")]  # fmt: skip
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    used = chunks[-1]["usage"]["completion_tokens"]
    return content, [calls[i] for i in sorted(calls)], used, reasons[-1]


def _model_text(parser: str, body: dict[str, Any], content: str, calls: list[list[str]]) -> str:
    """What the model wrote, from what the sim streamed: calls in the hermes format (the
    structural tag's; side by side when forced), or for a JSON-schema parser the named tool's
    arguments or ``required``'s array of ``{name, parameters}``."""
    from brain.sim.shaping import STRUCTURAL_TAG_PARSERS, hermes_markup

    def whole(args: str) -> bool:
        try:
            return isinstance(json.loads(args), dict)
        except ValueError:
            return False

    choice = body.get("tool_choice")
    forced = choice == "required" or isinstance(choice, dict)
    if parser in STRUCTURAL_TAG_PARSERS or not forced:
        marks = [hermes_markup(n, a, whole=whole(a)) for n, a in calls]
        return content + ("" if forced else "\n").join(marks)
    if isinstance(choice, dict):
        return calls[0][1]
    items = [f'{{"name": {json.dumps(n)}, "parameters": {a}' + ("}" if whole(a) else "")
             for n, a in calls]  # fmt: skip
    return "[" + ", ".join(items) + ("]" if all(whole(a) for _, a in calls) else "")


def test_the_forced_answers_are_vllms_reading_of_the_output(sims: Any, tmp_path: Path) -> None:
    """vLLM's own parser, message assembly, stream processor and finish-reason mapping, given
    what the sim's stream says the model wrote, answer what the sim answers, streamed and not
    (content, calls, finish_reason: the cut-at-max_tokens streams included), and force the
    call with the constraint the sim claims (a structural tag for hermes, a JSON schema for
    pythonic)."""
    python = _vllm_python()
    if python is None:
        pytest.skip("no installed vLLM: set MARATHON_VLLM_PYTHON to a Python with vllm 0.33")
    payload, expected = [], {}
    for case in READ_BACK:
        sim = sims(case.server, "0.33")
        parser = sim.config.tool_call_parser
        body = {k: v for k, v in (case.body or {}).items() if k not in ("stream", "stream_options")}
        content, calls, used, streamed_finish = _streamed_output(sim, body)
        finish = "length" if used == body.get("max_tokens") else "stop"
        text = _model_text(parser, body, content, calls)
        payload.append({"id": case.id, "parser": parser, "body": body, "text": text,
                        "engine_finish": finish})  # fmt: skip
        answer = httpx.post(sim.openai_base_url + "/chat/completions", json=body, timeout=30)
        choice = answer.json()["choices"][0]
        message = choice["message"]
        forced = body.get("tool_choice") not in (None, "auto", "none")
        expected[case.id] = {
            "constraint": (
                ("structural_tag" if parser == "hermes" else "json") if forced else None
            ),
            "content": message["content"],
            "calls": [
                [c["function"]["name"], c["function"]["arguments"]]
                for c in message.get("tool_calls") or []
            ],
            "finish_reason": choice["finish_reason"],
            "stream": {"content": content, "calls": calls, "finish_reason": streamed_finish},
        }
    result = tmp_path / "vllm.json"
    done = subprocess.run(
        [python, str(HERE / "vllm_forced.py"), str(result)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    vllm = json.loads(result.read_text())
    problems = [
        f"{k}: sim {expected[k]} != vLLM {vllm[k]}" for k in expected if vllm[k] != expected[k]
    ]
    assert not problems, "\n".join(problems)


def test_the_brains_value_lists_are_vllms() -> None:
    """``brain/vllm_choices.py`` holds exactly what the installed vLLM accepts."""
    python = _vllm_python()
    if python is None:
        pytest.skip("no installed vLLM: set MARATHON_VLLM_PYTHON to a Python with vllm 0.33")
    from brain import vllm_choices

    done = subprocess.run(
        [python, str(HERE / "vllm_lists.py")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name, values in json.loads(done.stdout).items():
        assert getattr(vllm_choices, name) == frozenset(values), name
