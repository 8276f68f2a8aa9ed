"""The agents the suite compares on the same model: Marathon's pilot, a plain loop, and
mini-swe-agent (``bench.tasks.mini``, a real peer run as it ships).

``run_marathon`` drives the pilot in-process on a one-phase workflow: the task's test
command (with the package's tests, when it does not run them) is the phase's check (run after
each file edit too, ``check_after_edit``; a failed
try undone and asked again from the prompt, ``retry_fresh``),
``require_change`` refuses a finish on an unchanged tree, the failing tests' output and the
functions they call open the prompt (``context``, ``locate``), a function rewritten in a
Python block is an edit (``replace_definition``), and the pilot's repairs, specific feedback,
loop detection and compaction are all on.

``run_plain`` is a minimal loop in the style of mini-swe-agent: one bash command per answer
in a fenced block, its output sent back, the same format reminder whenever the answer has
not exactly one block, no repairs, no loop detection, no compaction, no check; it stops when
the model prints the submit word, at the step limit or at a context error.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import yaml

from bench.tasks.callmodes import counts_json, cut_answers, marathon_modes, plain_modes
from bench.tasks.suite import Task, task_env

SYSTEM_MARATHON = """You fix bugs in Python code in a repository, alone: nobody answers \
questions. Change the code with the tools; a function is best rewritten whole. The harness \
runs the tests after each change and tells you the result. When they pass, call finish with \
a summary naming the files you changed."""
"""Says what to do, never how to write a call: the syntax is the call mode's (the pilot adds
what a mode needs); a syntax here was copied placeholder and all (``<file>``, 110 calls)."""

SYSTEM_PLAIN = """You are a helpful assistant that can interact with a computer shell to \
solve programming tasks in the repository in your current directory.
Your response must contain exactly ONE bash code block with ONE command, like:
```bash
ls -la
```
Each command runs in a new shell in the repository. When the task is done, run:
```bash
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
```"""

FORMAT_ERROR = (
    "Please always provide EXACTLY ONE action in triple backticks (```bash ... ```), "
    "found {n} actions."
)
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
OUTPUT_LIMIT = 6000


@dataclass
class AgentResult:
    status: str
    """How the agent stopped: succeeded/failed/limit/paused (Marathon), submitted/limit/
    error (plain, mini-swe-agent; mini also format_errors)."""
    reason: str
    steps: int
    prompt_tokens: int
    completion_tokens: int
    tokens_estimated: bool
    wall_s: float
    claimed: bool = False
    """The agent said the task is done (Marathon: succeeded; the others: submitted)."""
    answers: dict[str, int] = field(default_factory=dict)
    cut: tuple[int, int] | None = None
    """Marathon: (answers cut at the output limit, their calls that ran); None elsewhere."""
    """Answers per call mode (``bench.tasks.callmodes``)."""


def marathon_workflow(
    task: Task,
    endpoint: str,
    *,
    max_steps: int,
    max_tokens: int,
    context_window: int | None,
    call_mode: str = "auto",
    wall_s: float = 7200,
) -> dict[str, Any]:
    model: dict[str, Any] = {
        "endpoint": endpoint,
        "name": "auto",
        "temperature": 0.2,
        "max_tokens": max_tokens,
        "request_timeout": 900,
        "idle_timeout": 600,
        "server_wait": 120,
    }
    if context_window:
        model["context_window"] = context_window
    if call_mode != "auto":  # the pilot's pin of its call mode (issue 38: model.tool_calls)
        model["tool_calls"] = call_mode
    return {
        "name": "bench-task",
        "params": {"repo": {"type": "path", "required": True}},
        "model": model,
        # In the checkout itself: the hidden check runs there after the run (a run's own
        # worktree would keep every change out of its sight).
        "workspace": {"path": "{{ params.repo }}", "in_place": True},
        "tools": [
            "read_file",
            "replace_definition",
            "edit_file",
            "write_file",
            "run",
            "finish",
        ],
        "env_allowlist": ["PYTHONPATH", "PYTHONDONTWRITEBYTECODE"],
        "sandbox": "none",
        "system": SYSTEM_MARATHON,
        "limits": {"max_steps": max_steps, "max_wall_time": wall_s, "max_no_progress_steps": 8},
        "phases": [
            {
                "name": "task",
                "prompt": f"{task.prompt.strip()}\nTest command: {task.test}",
                # What a user's fix-the-tests workflow does first: run the tests, so the
                # failure is in front of the model before its first step.
                "context": [task.test],
                # ... and show the functions its failures call.
                "locate": True,
                "check": marathon_check(task),
                "check_timeout": 300,
                "require_change": True,
                # Done at the edit that makes the tests pass: a small model rarely calls
                # finish right after it, and wanders off.
                "check_after_edit": True,
                # ... and a try that fails is undone and asked again from the prompt alone,
                # sampled hotter: a 0.5B model's first answer is its best.
                "retry_fresh": True,
                "max_attempts": 3,
            }
        ],
    }


def marathon_check(task: Task) -> str:
    """The phase's check: the task's test command, and the package's tests beside it when that
    command does not run them (a doctest task), as a user's check would: on the GPU a 1.5B
    model "fixed" a docstring by rewriting the code it documents, the doctests passed, the
    package's tests did not, and the run said succeeded."""
    files = [f for f in task.tests if f.endswith(".py") and not f.endswith("__init__.py")]
    if not files or all(f in task.test for f in files):
        return task.test
    return f"{task.test} && python -m pytest -q -p no:cacheprovider {' '.join(files)}"


def run_marathon(
    task: Task,
    repo: Path,
    endpoint: str,
    work: Path,
    *,
    max_steps: int,
    max_tokens: int = 512,
    context_window: int | None = None,
    call_mode: str = "auto",
    wall_s: float = 7200,
    settings: Sequence[str] = (),
) -> AgentResult:
    from pilot.run.launch import load_for_run, start_run
    from pilot.run.runner import Runner
    from pilot.store.event_store import EventStore

    spec = marathon_workflow(
        task,
        endpoint,
        max_steps=max_steps,
        max_tokens=max_tokens,
        context_window=context_window,
        call_mode=call_mode,
        wall_s=wall_s,
    )
    workflow = work / "workflow.yaml"
    workflow.write_text(yaml.safe_dump(spec, sort_keys=False))
    saved = dict(os.environ)
    os.environ.update(task_env(task, repo))
    started = time.monotonic()
    try:
        store = EventStore(f"sqlite:///{work / 'runs.db'}")
        loaded = load_for_run(workflow, [f"repo={repo}"], settings=settings)
        runner = Runner(store)

        async def drive() -> Any:
            try:
                return await start_run(runner, loaded)
            finally:
                await runner.aclose()

        outcome = asyncio.run(drive())
        events = [e.model_dump(mode="json") for e in store.load_events(outcome.run_id)]
        store.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    state = outcome.state
    return AgentResult(
        status=outcome.status,
        reason=outcome.reason or "",
        steps=state.steps,
        prompt_tokens=state.prompt_tokens,
        completion_tokens=state.completion_tokens,
        tokens_estimated=state.usage_estimated,
        wall_s=time.monotonic() - started,
        claimed=outcome.status == "succeeded",
        answers=counts_json(marathon_modes(events)),
        cut=cut_answers(events),
    )


_BLOCK_RE = re.compile(r"```(?:bash|sh|shell)?\s*\n(.*?)\n?```", re.DOTALL)


def run_plain(
    task: Task,
    repo: Path,
    endpoint: str,
    *,
    max_steps: int,
    max_tokens: int = 512,
    model: str | None = None,
    transcript: Path | None = None,
    wall_s: float = 7200,
) -> AgentResult:
    client = openai.OpenAI(
        base_url=endpoint, api_key="none", timeout=min(900, wall_s), max_retries=2
    )
    name = model or client.models.list().data[0].id
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PLAIN},
        {"role": "user", "content": f"{task.prompt}\nTest command: {task.test}"},
    ]
    env = task_env(task, repo)
    started = time.monotonic()
    prompt_tokens = completion_tokens = steps = 0
    status, reason = "limit", f"step limit reached ({max_steps} steps)"
    while steps < max_steps:
        if time.monotonic() - started > wall_s:
            status, reason = "limit", f"wall time limit reached ({wall_s:.0f} s)"
            break
        steps += 1
        try:
            answer = client.chat.completions.create(
                model=name, messages=messages, temperature=0.2, max_tokens=max_tokens
            )
        except openai.BadRequestError as exc:
            status, reason = "error", f"the server refused the request: {str(exc)[:200]}"
            break
        if answer.usage:
            prompt_tokens += answer.usage.prompt_tokens
            completion_tokens += answer.usage.completion_tokens
        text = answer.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        blocks = _BLOCK_RE.findall(text)
        if len(blocks) != 1:
            messages.append({"role": "user", "content": FORMAT_ERROR.format(n=len(blocks))})
            continue
        command = blocks[0].strip()
        if SUBMIT in command:
            status, reason = "submitted", "the model submitted"
            break
        try:
            proc = subprocess.run(
                command, shell=True, cwd=repo, env=env, capture_output=True, text=True, timeout=120
            )
            output = f"returncode {proc.returncode}\n{proc.stdout}{proc.stderr}"
        except subprocess.TimeoutExpired:
            output = "the command timed out after 120 s"
        if len(output) > OUTPUT_LIMIT:
            half = OUTPUT_LIMIT // 2
            output = output[:half] + "\n[... output cut ...]\n" + output[-half:]
        messages.append({"role": "user", "content": output})
    if transcript is not None:
        transcript.write_text(json.dumps(messages, indent=1))
    return AgentResult(
        status=status,
        reason=reason,
        steps=steps,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        tokens_estimated=False,
        wall_s=time.monotonic() - started,
        claimed=status == "submitted",
        answers=counts_json(plain_modes(messages, blocks=_BLOCK_RE.findall)),
    )
