"""How long `pilot cancel` takes to stop a live run: from the command to the run's stop.

Each try starts a real `pilot run` (the simulated server, a script of `run` calls that sleep
0.2 s each, so a step is always in flight), waits for its second tool result, then runs
`pilot cancel` and measures, from the moment the cancel command starts:
- to the run's recorded stop (its `run_finished` event, `cancelled`),
- to the run's process gone.
The figures go in bench/README.md ("Cancel latency").

    PYTHONPATH=. python bench/cancel_latency.py --tries 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_common import GIT_ENV, pilot_cmd

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.cancel import request_cancel
from pilot.store.event_store import EventStore


def _repo(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


def _script(path: Path) -> Path:
    turns = [
        {"tool_calls": [{"name": "run", "arguments": {"command": f"sleep 0.2; echo {i}"}}]}
        for i in range(500)
    ]
    path.write_text(yaml.safe_dump({"conversations": [{"key": "cancel", "turns": turns}]}))
    return path


def _workflow(path: Path, endpoint: str) -> Path:
    data = {
        "name": "cancel-bench",
        "params": {"repo": {"type": "path", "required": True}},
        "model": {"endpoint": endpoint, "name": "auto", "server_wait": 20},
        "workspace": {"path": "{{ params.repo }}"},
        "tools": ["run", "finish"],
        "sandbox": "none",
        "system": "Test conversation cancel. Work with the tools.",
        "phases": [{"name": "work", "prompt": "p"}],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_try(folder: Path, endpoint: str, in_process: bool) -> tuple[float, float, float, str]:
    """Seconds from the cancel's start to the recorded stop, from the signal sent to the
    recorded stop (``in_process``: ``request_cancel`` called here; else the `pilot cancel`
    command, whose signal time is not seen: 0), from the start to the run's process gone,
    and the stop's reason."""
    home, repo = folder / "home", _repo(folder / "repo")
    env = {**os.environ, "MARATHON_HOME": str(home)}
    env.pop("MARATHON_DB", None)
    workflow = _workflow(folder / "wf.yaml", endpoint)
    pilot = subprocess.Popen(
        [*pilot_cmd(), "run", str(workflow), "-p", f"repo={repo}", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert pilot.stdout is not None
    run_id, tools = None, 0
    for line in pilot.stdout:
        record = json.loads(line)
        run_id = run_id or record.get("run_id")
        tools += record.get("type") == "tool_finished"
        if tools == 2:
            break
    asked = datetime.now(UTC)
    start = time.monotonic()
    told = asked
    if in_process:  # what `pilot cancel` does, without its interpreter's start-up
        request_cancel(EventStore(f"sqlite:///{home / 'marathon.db'}"), str(run_id))
        told = datetime.now(UTC)
    else:
        subprocess.run(
            [*pilot_cmd(), "cancel", str(run_id)], env=env, check=True, capture_output=True
        )
    pilot.communicate(timeout=120)
    gone = time.monotonic() - start
    end = EventStore(f"sqlite:///{home / 'marathon.db'}").load_events(str(run_id))[-1]
    assert isinstance(end, ev.RunFinished) and end.status == "cancelled", end
    return (end.at - asked).total_seconds(), (end.at - told).total_seconds(), gone, end.reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = _script(Path(tmp) / "script.yaml")
        config = SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")
        with running_sim(config) as sim:
            results = {}
            for in_process in (False, True):
                rows = []
                for n in range(args.tries):
                    folder = Path(tmp) / f"try{n}-{in_process}"
                    rows.append(one_try(folder, sim.openai_base_url, in_process))
                    stop, after, gone, reason = rows[-1]
                    how = "request_cancel" if in_process else "pilot cancel"
                    print(
                        f"{how} try {n + 1}: stop recorded {stop:.3f} s after the start "
                        f"({after:.3f} s after the signal); process gone {gone:.3f} s"
                    )
                results[in_process] = rows
    print(f"recorded event: run_finished cancelled, reason {reason!r}")
    for in_process, rows in results.items():
        how = "request_cancel in-process" if in_process else "the pilot cancel command"
        columns = [("start to the recorded stop", 0), ("start to the process gone", 2)]
        if in_process:
            columns.insert(1, ("signal to the recorded stop", 1))
        for name, column in columns:
            values = [row[column] for row in rows]
            print(
                f"{how}, {name}: median {statistics.median(values):.3f} s, "
                f"max {max(values):.3f} s over {len(values)} tries"
            )


if __name__ == "__main__":
    main()
