"""The pilot's and the `--detach` launcher's /proc/<pid>/environ show no value the redaction
rules flag: an unsandboxed command that reads them finds the names, never the secrets
(SECURITY.md, "What the sandbox modes protect")."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from pilot_harness import call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.redact import redactor_for
from pilot.store.event_store import EventStore

SECRETS = {
    "PASSPHRASE": "correct-horse-battery-staple",
    "SLACK_WEBHOOK": "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/" + "x9Y8z7W6v5U4t3S2",
    "CI_JOB_JWT": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJqb2IxMjM0NSJ9." + "c2lnbmF0dXJlLXBhcnQ",
    "MYSQL_PWD": "mysql-hunter2-Qx7",
    "DB_PWD": "db-hunter3-Zy8",
    "STRIPE_SK": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
}


def test_the_redaction_rules_flag_each_of_these_variables() -> None:
    redactor = redactor_for(())
    for name, value in SECRETS.items():
        assignment = f"{name}={value}"
        assert value not in redactor.text(assignment), name


def _children(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().strip()
    except OSError:
        return ""


def test_neither_a_running_pilot_nor_its_detach_launcher_shows_a_secret(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    seen = tmp_path / "pilot-environ.bin"
    script = write_script(
        tmp_path / "s.yaml",
        "environ",
        [
            {"tool_calls": [call("run", command=f"cat /proc/$PPID/environ > {seen}")]},
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    env = {**os.environ, "MARATHON_HOME": str(home), **SECRETS}
    env.pop("MARATHON_DB", None)
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="environ",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        launcher = subprocess.Popen(
            [*pilot_cmd(), "run", str(workflow), "-p", f"repo={repo}", "--detach"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        launcher_environ = b""
        while launcher.poll() is None and not launcher_environ:
            if _children(launcher.pid):  # the run is started: the launcher is its parent
                launcher_environ = Path(f"/proc/{launcher.pid}/environ").read_bytes()
            time.sleep(0.01)
        out, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 0, out + err
        store = EventStore(f"sqlite:///{home / 'marathon.db'}")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = store.list_runs()
            if runs and runs[0].status in ("succeeded", "failed"):
                break
            time.sleep(0.2)
    assert runs[0].status == "succeeded", runs[0].status_reason
    assert launcher_environ, "the launcher's environment was read while it was the parent"
    pilot_environ = seen.read_bytes()
    for name, value in SECRETS.items():
        assert value.encode() not in launcher_environ, f"{name} readable in the launcher"
        assert value.encode() not in pilot_environ, f"{name} readable in the running pilot"
        assert f"{name}=".encode() in pilot_environ, "the name stays, its value is gone"
