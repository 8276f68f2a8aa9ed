"""mini-swe-agent, a real peer, run as it ships: its ``mini`` command, its default
configuration (``mini.yaml``: one ``bash`` tool through the server's tool-call parser,
litellm's OpenAI client), one subprocess per try in the task's repository.

What the suite sets, and nothing else: the model (``openai/<served name>`` at the
endpoint), the step budget (``agent.step_limit``, the same as the other agents'),
``max_tokens`` per answer (the same as theirs), no confirmations (``--yolo
--exit-immediately``, stdin closed: a limit ends the run instead of asking for a new one),
cost tracking off (a local model has no price) and its global config in the try's folder.
The task's environment (its ``PYTHONPATH``) reaches the commands mini runs, not mini itself,
so the task's package never shadows one of mini's.

It lives in its own virtual environment (its dependencies, litellm's among them, are not
the project's): ``MARATHON_BENCH_MINI`` names its ``mini`` executable, else ``mini`` on
``PATH``, else ``.venv-mini/bin/mini`` at the repository root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.tasks.agents import AgentResult
from bench.tasks.callmodes import counts_json, mini_modes, mini_usage
from bench.tasks.suite import Task, task_env

MINI_ENV = "MARATHON_BENCH_MINI"
ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = (
    "install it in a venv of its own: python3 -m venv .venv-mini && .venv-mini/bin/pip "
    "install --no-deps -r bench/tasks/mini-requirements.txt (or set MARATHON_BENCH_MINI to "
    "its `mini` executable)"
)
# mini's exit statuses (its trajectory's info.exit_status) as the suite's agent statuses.
_STATUS = {
    "Submitted": "submitted",
    "LimitsExceeded": "limit",
    "TimeExceeded": "limit",
    "RepeatedFormatError": "format_errors",
}


class MiniMissing(Exception):
    """mini-swe-agent is not installed where the suite looks (the message says how)."""


def find_mini() -> Path:
    """The ``mini`` executable, or :class:`MiniMissing` saying where it was looked for."""
    explicit = os.environ.get(MINI_ENV)
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise MiniMissing(f"{MINI_ENV}={explicit} is not an executable file; {INSTALL_HINT}")
    found = shutil.which("mini")
    if found:
        return Path(found)
    local = ROOT / ".venv-mini" / "bin" / "mini"
    if local.is_file():
        return local
    raise MiniMissing(f"mini-swe-agent is not installed; {INSTALL_HINT}")


def mini_command(
    mini: Path,
    task: Task,
    endpoint: str,
    model: str,
    *,
    max_steps: int,
    max_tokens: int,
    trajectory: Path,
    repo: Path,
) -> list[str]:
    """The ``mini`` command line for one try: its default config plus the suite's settings."""
    env = task_env(task, repo)
    return [
        str(mini),
        "--model",
        f"openai/{model}",
        "--task",
        f"{task.prompt}\nTest command: {task.test}",
        "--yolo",
        "--exit-immediately",
        "--output",
        str(trajectory),
        "-c",
        "mini.yaml",
        "-c",
        f"agent.step_limit={max_steps}",
        "-c",
        f"model.model_kwargs.api_base={endpoint}",
        "-c",
        f"model.model_kwargs.max_tokens={max_tokens}",
        "-c",
        f"environment.env.PYTHONPATH={env['PYTHONPATH']}",
        "-c",
        'environment.env.PYTHONDONTWRITEBYTECODE="1"',  # JSON: a string
    ]


def mini_environ(task: Task, repo: Path, config_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in task_env(task, repo).items() if k != "PYTHONPATH"}
    return {
        **env,
        "MSWEA_CONFIGURED": "1",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_GLOBAL_CONFIG_DIR": str(config_dir),
        "OPENAI_API_KEY": env.get("OPENAI_API_KEY", "none"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of litellm's price list
    }


def outcome(trajectory: dict[str, Any], wall_s: float) -> AgentResult:
    """A finished (or killed) try's result, from mini's trajectory file."""
    info = trajectory.get("info") or {}
    messages = trajectory.get("messages") or []
    exit_status = str(info.get("exit_status") or "no exit status")
    status = _STATUS.get(exit_status, "error")
    last = messages[-1] if messages else {}
    detail = str(last.get("content") or "")[:160] if status != "submitted" else ""
    reason = {
        "submitted": "the model submitted",
        "limit": f"{exit_status} ({info.get('model_stats', {}).get('api_calls', 0)} calls)",
        "format_errors": "three answers in a row without a bash tool call",
    }.get(status, f"{exit_status}: {detail}")
    prompt, completion = mini_usage(messages)
    return AgentResult(
        status=status,
        reason=reason,
        steps=int((info.get("model_stats") or {}).get("api_calls") or 0),
        prompt_tokens=prompt,
        completion_tokens=completion,
        tokens_estimated=False,
        wall_s=wall_s,
        claimed=status == "submitted",
        answers=counts_json(mini_modes(messages)),
    )


def run_mini(
    task: Task,
    repo: Path,
    endpoint: str,
    work: Path,
    *,
    max_steps: int,
    max_tokens: int = 512,
    model: str | None = None,
    timeout_s: float = 1800,
) -> AgentResult:
    """One try of mini-swe-agent in ``repo``; its trajectory and log are kept in ``work``."""
    import openai

    mini = find_mini()
    name = model or openai.OpenAI(base_url=endpoint, api_key="none").models.list().data[0].id
    trajectory = work / "trajectory.json"
    config_dir = work / "mini-config"
    config_dir.mkdir(exist_ok=True)
    cmd = mini_command(
        mini,
        task,
        endpoint,
        name,
        max_steps=max_steps,
        max_tokens=max_tokens,
        trajectory=trajectory,
        repo=repo,
    )
    started = time.monotonic()
    with (work / "mini.log").open("w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=repo,
            env=mini_environ(task, repo, config_dir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - started
    if not trajectory.exists():
        tail = (work / "mini.log").read_text(errors="replace").strip().splitlines()[-3:]
        return AgentResult(
            status="error",
            reason=f"mini exited {proc.returncode} with no trajectory: {' | '.join(tail)[:300]}",
            steps=0,
            prompt_tokens=0,
            completion_tokens=0,
            tokens_estimated=False,
            wall_s=wall,
        )
    result = outcome(json.loads(trajectory.read_text()), wall)
    if proc.returncode == -signal.SIGKILL and result.status != "submitted":
        result.status, result.reason = "limit", f"killed after {timeout_s:.0f} s (try timeout)"
    return result
