"""`pilot logs -f` on a run nobody drives says so and names `pilot resume`, exit 1, instead
of ending as if the run had finished."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from pilot_harness import pilot_cmd

from pilot import events as ev
from pilot.store.event_store import EventStore, shown_status


def test_following_an_interrupted_run_says_nobody_drives_it(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    url = f"sqlite:///{tmp_path / 'marathon.db'}"
    store = EventStore(url)
    run_id = store.create_run(
        workflow_name="w",
        workflow_path="w.yaml",
        workflow_text="",
        params={},
        workspace=str(tmp_path),
        owner=f"{socket.gethostname()}:{gone.pid}:abcdef",
    )
    started = ev.RunStarted(
        workflow="w", workspace=str(tmp_path), branch="b", endpoint="e", system="", phases=["p"],
        owner="o",
    )  # fmt: skip
    store.append(run_id, 1, started, totals={})
    assert shown_status(store.get_run(run_id)) == "interrupted"
    env = {**os.environ}
    env.pop("MARATHON_DB", None)
    followed = subprocess.run(
        [*pilot_cmd(), "logs", run_id, "-f", "--db", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert followed.returncode == 1, followed.stdout + followed.stderr
    assert "run started" in followed.stdout, "the events are printed first"
    message = " ".join(followed.stderr.split())
    assert "nobody drives it" in message and f"pilot resume {run_id}" in message, message
    assert "Traceback" not in followed.stderr
