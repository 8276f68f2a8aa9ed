"""The chaos bench's shared scenario: a long scripted run, the policy that plays it, and helpers.

The run is ``steps`` numbered steps over three phases (the last two with a check). Each step is
one tool call (write_file, edit_file, read_file, a `run` that appends a line to ``ledger.txt``,
git_commit, finish at a phase's end), so a side effect applied twice shows as a duplicated
ledger line. The model is :class:`ChaosPolicy`: a pure function of the request's messages that
survives compactions and faults (it re-issues a step whose call came back as an error), so a
resumed, compacted or faulted run converges to the same workspace as the clean one.

Nothing here imports the tests; everything is real: git repositories in temp dirs, the
simulated vLLM server over loopback, SQLite files and ``pilot`` subprocesses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from brain.sim.policy import SimChatRequest, SimTurn

KEY = "chaos-harness"
FILLER = "lorem ipsum dolor sit amet consectetur " * 3
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Chaos",
    "GIT_AUTHOR_EMAIL": "chaos@example.invalid",
    "GIT_COMMITTER_NAME": "Chaos",
    "GIT_COMMITTER_EMAIL": "chaos@example.invalid",
}
SLOW_SECONDS = 0.4
"""How long the slow `run` steps (the "kill inside a tool" targets) take."""

MAX_TRIES = 4
"""A step whose call keeps coming back as an error is given up after this many tries."""
_STEP = re.compile(r"Step (\d+) of (\d+)\.")
_DONE = re.compile(r"done through Step (\d+) of")


# -- the plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    number: int
    tool: str
    arguments: dict[str, Any]


def phase_ends(steps: int) -> list[int]:
    """Step numbers of each phase's `finish` (three phases, roughly 40/40/20 %), each phase
    with a step of work before its finish (a phase succeeds on a change, not on finish alone)."""
    return [max(2, steps * 2 // 5), max(4, steps * 4 // 5), steps]


def step_plan(steps: int) -> list[Step]:
    """The run, step by step; every call is unique (no loop detection, no ambiguity)."""
    ends = phase_ends(steps)
    plan: list[Step] = []
    written: list[int] = []
    for n in range(1, steps + 1):
        if n in ends:
            plan.append(Step(n, "finish", {"summary": f"phase {ends.index(n) + 1} done"}))
            continue
        kind = n % 10
        if kind in (1, 4, 7):
            plan.append(
                Step(n, "write_file", {"path": f"src/f{n:03d}.txt", "content": f"v{n}\n{FILLER}\n"})
            )
            written.append(n)
        elif kind in (2, 8):
            plan.append(Step(n, "run", {"command": f"echo step{n:03d} >> ledger.txt"}))
        elif kind == 5:
            # The slow one: a partial effect, a marker for the harness, then the rest.
            plan.append(
                Step(
                    n,
                    "run",
                    {
                        "command": f"echo step{n:03d} >> ledger.txt; mkdir -p .chaos; "
                        f"touch .chaos/in-{n:03d}; sleep {SLOW_SECONDS}; "
                        f"echo step{n:03d}-done >> ledger.txt",
                        "timeout": 60,
                    },
                )
            )
        elif kind in (3, 9) and written:
            target = written[-1]
            plan.append(
                Step(
                    n,
                    "edit_file",
                    {"path": f"src/f{target:03d}.txt", "old": f"v{target}\n", "new": f"v{n}\n"},
                )
            )
            written.pop()
        elif kind == 6:
            plan.append(Step(n, "git_commit", {"message": f"chaos step {n}"}))
        else:
            plan.append(Step(n, "read_file", {"path": "ledger.txt", "offset": 1, "limit": n}))
    return plan


def ledger_expected(steps: int) -> list[str]:
    lines = []
    for step in step_plan(steps):
        if step.tool == "run":
            lines.append(f"step{step.number:03d}")
            if "-done" in step.arguments["command"]:
                lines.append(f"step{step.number:03d}-done")
    return lines


def duplicated_lines(ledger: str) -> int:
    """Side effects applied twice: ledger lines beyond their first occurrence."""
    lines = [line for line in ledger.splitlines() if line.strip()]
    return len(lines) - len(set(lines))


# -- the model ------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class ChaosPolicy:
    """Plays :func:`step_plan`; a pure function of the messages (the sim's contract).

    The next step is one past the last assistant message saying "Step K of N." — unless that
    call came back as an error (a malformed, unknown or cut call), then K again. A compaction
    keeps the recent turns, whose "Step K" it reads (its summary is built from the events and
    holds none of the model's words); a summary it wrote itself, in runs recorded when the
    pilot asked the model for one (no tools offered), says "done through Step K".
    """

    def __init__(self, steps: int, *, summary_padding: int = 0) -> None:
        self.steps = steps
        self.plan = step_plan(steps)
        self.summary_padding = summary_padding

    def next_step(self, messages: list[Any]) -> int:
        results: dict[str, str] = {}
        tries: dict[int, int] = {}
        for m in messages:
            if m.role == "tool" and m.tool_call_id:
                results[m.tool_call_id] = _text(m.content)
            if m.role == "assistant" and (found := _STEP.search(_text(m.content))):
                tries[int(found.group(1))] = tries.get(int(found.group(1)), 0) + 1
        for m in reversed(messages):
            if m.role == "assistant":
                found = _STEP.search(_text(m.content))
                if not found:
                    continue
                number = int(found.group(1))
                calls = m.tool_calls or []
                call_id = calls[0].get("id") if calls else None
                answer = results.get(call_id or "", "")
                if (
                    not calls
                    or answer.startswith("Error")
                    or not self._as_planned(number, calls[0])
                ) and tries[number] < MAX_TRIES:
                    return number
                return number + 1
            if m.role == "user":
                done = _DONE.search(_text(m.content))
                if done:
                    return int(done.group(1)) + 1
        return 1

    def _as_planned(self, number: int, call: dict[str, Any]) -> bool:
        """Whether the call that went out is the one planned (a cut call may have been
        repaired into a different one, and run: then the step is done again)."""
        if not 1 <= number <= self.steps:
            return True
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "null")
        except ValueError:
            return False
        step = self.plan[number - 1]
        return function.get("name") == step.tool and arguments == step.arguments

    def respond(self, request: SimChatRequest) -> SimTurn:
        if not request.tools:
            return self.summary(request)
        number = self.next_step(list(request.messages))
        if number > self.steps:  # (only after a failed last check) end the phase again
            return SimTurn(
                content=f"Step {self.steps} of {self.steps}. All steps are done.",
                tool_calls=(("finish", json.dumps({"summary": "all steps done"})),),
            )
        step = self.plan[number - 1]
        return SimTurn(
            content=f"Step {number} of {self.steps}. {FILLER}",
            tool_calls=((step.tool, json.dumps(step.arguments)),),
        )

    def summary(self, request: SimChatRequest) -> SimTurn:
        text = " ".join(_text(m.content) for m in request.messages)
        done = [int(number) for number, _total in _STEP.findall(text)]
        done += [int(number) for number in _DONE.findall(text)]
        last = max(done) if done else 0
        pad = ("Notes: " + FILLER * self.summary_padding + "\n") if self.summary_padding else ""
        return SimTurn(
            content=(
                f"Goal: play the chaos script.\nProgress: done through Step {last} of "
                f"{self.steps}.\nDecisions: none.\nFiles: src/, ledger.txt.\n"
                f"Open problems: none.\n{pad}Next step: Step {last + 1}."
            )
        )


def script_turns(steps: int) -> list[dict[str, Any]]:
    """The same run as a `script:` policy (turn i = step i+1), for a sim in its own process."""
    return [
        {
            "content": f"Step {s.number} of {steps}. {FILLER}",
            "tool_calls": [{"name": s.tool, "arguments": s.arguments}],
        }
        for s in step_plan(steps)
    ]


def write_script(path: Path, steps: int) -> Path:
    data = {"conversations": [{"key": KEY, "turns": script_turns(steps)}]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- workspace and workflow -----------------------------------------------------------------


def git_env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV}


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("# chaos\n")
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "app.py").write_text("VALUE = 1\n")
    (root / "ledger.txt").write_text("")
    (root / ".gitignore").write_text("__pycache__/\n.chaos/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, env=git_env(), check=True, capture_output=True)
    return root


def write_workflow(
    path: Path,
    *,
    endpoint: str,
    steps: int,
    model: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    ends = phase_ends(steps)
    data: dict[str, Any] = {
        "name": "chaos",
        "params": {"repo": {"type": "path", "required": True}},
        "model": {
            "endpoint": endpoint,
            "name": "auto",
            "server_wait": 60,
            "idle_timeout": 5,
            "max_tokens": 400,
            **(model or {}),
        },
        "workspace": {"path": "{{ params.repo }}"},
        "tools": ["read_file", "write_file", "edit_file", "run", "git_commit", "finish"],
        "sandbox": "none",
        "system": f"Conversation {KEY}. Work through the numbered steps with the tools.",
        "limits": {"max_no_progress_steps": 1000},
        "phases": [
            {"name": "build", "prompt": f"Do steps 1 to {ends[0]}."},
            {
                "name": "extend",
                "prompt": f"Do steps {ends[0] + 1} to {ends[1]}.",
                "check": "test -s ledger.txt",
            },
            {
                "name": "wrap",
                "prompt": f"Do steps {ends[1] + 1} to {ends[2]}.",
                "check": "test -f src/f001.txt",
            },
        ],
        **(extra or {}),
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- comparing runs -------------------------------------------------------------------------


_SHA = re.compile(r"\b[0-9a-f]{7,40}\b")
_RUN_BRANCH = re.compile(r"marathon/run-[0-9a-f]+")


def transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with what differs between two equal runs normalised: server-chosen
    call ids (by order of appearance), commit hashes and the run id in the branch name."""
    ids: dict[str, str] = {}
    out = []
    for message in messages:
        m = dict(message)
        if isinstance(m.get("content"), str):
            m["content"] = _SHA.sub("<sha>", _RUN_BRANCH.sub("marathon/run-<id>", m["content"]))
        if "tool_calls" in m:
            m["tool_calls"] = [
                {
                    "id": ids.setdefault(c["id"], f"c{len(ids)}"),
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in m["tool_calls"]
            ]
        if "tool_call_id" in m:
            m["tool_call_id"] = ids.get(m["tool_call_id"], m["tool_call_id"])
        out.append(m)
    return out


def workspace_of(state: Any) -> Path:
    """Where a run worked (its own worktree; the checkout it came from is never changed)."""
    return Path(state.started.workspace)


def tree_hash(repo: Path) -> str:
    """A hash of every non-ignored file's path and bytes in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    digest = hashlib.sha256()
    for name in sorted(n for n in listed if n):
        path = repo / name.decode()
        if path.is_file():
            digest.update(name + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def pilot_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pilot", *args]


def pilot_env(home: Path, failpoint: str | None = None) -> dict[str, str]:
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(home)}
    env.pop("MARATHON_FAILPOINT", None)
    env.pop("MARATHON_DB", None)
    if failpoint:
        env["MARATHON_FAILPOINT"] = failpoint
    return env


def run_pilot(
    args: list[str], db: Path, *, failpoint: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pilot_cmd(*args, "--db", f"sqlite:///{db}", "--json"),
        env=pilot_env(db.parent / "home", failpoint),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_id_of(db: Path) -> str:
    from pilot.store.event_store import EventStore

    store = EventStore(f"sqlite:///{db}")
    try:
        (record,) = store.list_runs()
        return record.id
    finally:
        store.close()


def load_run(db: Path, run_id: str) -> tuple[list[Any], Any]:
    """The run's events and folded state."""
    from pilot.agent.state import fold
    from pilot.store.event_store import EventStore

    store = EventStore(f"sqlite:///{db}")
    try:
        events = store.load_events(run_id)
    finally:
        store.close()
    return events, fold(events)


def integrity_ok(db: Path) -> bool:
    import sqlite3

    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
