"""A param never becomes shell: in a phase's `check` and `context` commands every value is
one quoted shell word, unless the workflow marks it `| raw` (SECURITY.md, "Params in
commands"). Through `pilot run` against the simulated server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml
from pilot_harness import call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore
from pilot.workflow.templating import make_environment


def test_a_param_with_shell_in_it_is_quoted_in_check_and_context(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    injected, chosen = tmp_path / "INJECTED", tmp_path / "RAW-CHOSEN"
    turns = [  # a change, then finish: the phase's evidence (its check passed from the start)
        {"tool_calls": [call("write_file", path="notes.txt", content="quoted\n")]},
        {"tool_calls": [call("finish", summary="wrote notes.txt")]},
    ]
    script = write_script(tmp_path / "s.yaml", "quoting", turns)
    env = {**os.environ, "MARATHON_HOME": str(home)}
    env.pop("MARATHON_DB", None)
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="quoting",
            endpoint=sim.openai_base_url,
            phases=[
                {
                    "name": "work",
                    "prompt": "p",
                    "context": ["echo {{ params.target }}", "{{ params.setup | raw }}"],
                    "check": "echo checked {{ params.target }}",
                }
            ],
        )
        data = yaml.safe_load(workflow.read_text())
        data["params"]["target"] = {"type": "string"}
        data["params"]["setup"] = {"type": "string"}
        workflow.write_text(yaml.safe_dump(data, sort_keys=False))
        done = subprocess.run(
            [
                *pilot_cmd(),
                "run",
                str(workflow),
                "-p",
                f"repo={repo}",
                "--param",
                f"target=tests; touch {injected}",
                "--param",
                f"setup=touch {chosen}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert not injected.exists(), "a param ran as shell"
    assert chosen.exists(), "a value marked | raw is a command by the workflow's choice"
    store = EventStore(f"sqlite:///{home / 'marathon.db'}")
    events = store.load_events(store.list_runs()[0].id)
    check = next(e for e in events if isinstance(e, ev.CheckFinished))
    assert check.passed and f"checked tests; touch {injected}" in check.output
    prompt = next(e for e in events if isinstance(e, ev.PhaseStarted)).prompt
    assert f"tests; touch {injected}" in prompt, "the context command echoed the value"


def test_quoting_applies_to_command_templates_only_and_never_twice() -> None:
    value = {"v": "a b; c"}
    command = make_environment(commands=True)
    assert command.from_string("x {{ v }}").render(v=value["v"]) == "x 'a b; c'"
    assert command.from_string("x {{ v | shell_quote }}").render(v=value["v"]) == "x 'a b; c'"
    assert command.from_string("x {{ v | raw }}").render(v=value["v"]) == "x a b; c"
    prompt = make_environment()
    assert prompt.from_string("x {{ v }}").render(v=value["v"]) == "x a b; c"
