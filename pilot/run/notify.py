"""Tell someone when a run ends: the workflow's ``notify`` command, else ``$MARATHON_NOTIFY``.

Runs end at night with nobody watching; a command (a webhook via curl, ``notify-send``, a mail)
is the one hook every notification service accepts. It is code from the workflow or the user,
like a phase's ``check``, so it runs with the pilot's own environment (it may need a token),
in the workspace, under a timeout. Whatever it does, the run's outcome and exit code stay the
same: a notification that fails is reported on stderr and forgotten.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pilot.workflow.plan import NotifyPlan, RunPlan

__all__ = ["USER_NOTIFY_ENV", "notify_queue_end", "notify_run_end", "run_payload"]

USER_NOTIFY_ENV = "MARATHON_NOTIFY"
"""The user's default notification command, for workflows without ``notify``."""


def _user_plan() -> NotifyPlan | None:
    """``$MARATHON_NOTIFY``, for the endings in ``$MARATHON_NOTIFY_ON`` (comma-separated;
    default all), e.g. ``MARATHON_NOTIFY_ON=failed,paused`` for a large matrix."""
    command = os.environ.get(USER_NOTIFY_ENV, "").strip()
    if not command:
        return None
    on = [s.strip() for s in os.environ.get(USER_NOTIFY_ENV + "_ON", "").split(",") if s.strip()]
    return NotifyPlan(command, tuple(on)) if on else NotifyPlan(command)


def run_payload(outcome: Any, plan: RunPlan | None) -> dict[str, Any]:
    """What the command gets on stdin: the run's ending and where to look next."""
    state = outcome.state
    started = state.started
    payload: dict[str, Any] = {
        "event": "run_ended",
        "run_id": outcome.run_id,
        "workflow": plan.workflow_name if plan else (started.workflow if started else None),
        "status": outcome.status,
        "reason": outcome.reason,
        "steps": state.steps,
        "tokens_in": state.prompt_tokens,
        "tokens_out": state.completion_tokens,
        "workspace": started.workspace if started else (plan.workspace if plan else None),
        "branch": started.branch if started else (plan.branch if plan else None),
        "show": f"pilot show {outcome.run_id}",
    }
    if outcome.status == "paused":
        payload["resume"] = f"pilot resume {outcome.run_id}"
    return payload


def _run_command(notify: NotifyPlan, payload: dict[str, Any], cwd: str | None) -> None:
    env = {
        **os.environ,
        "MARATHON_EVENT": str(payload["event"]),
        "MARATHON_RUN_ID": str(payload.get("run_id") or ""),
        "MARATHON_RUN_STATUS": str(payload.get("status") or ""),
        "MARATHON_RUN_REASON": str(payload.get("reason") or ""),
        "MARATHON_WORKFLOW": str(payload.get("workflow") or ""),
    }
    where = cwd if cwd and Path(cwd).is_dir() else None
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", notify.command],
            input=json.dumps(payload),
            env=env,
            cwd=where,
            capture_output=True,
            text=True,
            timeout=notify.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        _warn(f"the notify command took over {notify.timeout:g}s and was stopped")
        return
    except OSError as exc:
        _warn(f"the notify command could not start: {exc}")
        return
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        _warn(f"the notify command exited {done.returncode}: {tail[0][:300]}")


def _warn(message: str) -> None:
    print(f"warning: {message} (the run itself is unaffected)", file=sys.stderr, flush=True)


async def notify_run_end(outcome: Any, plan: RunPlan | None) -> None:
    """Run the workflow's (else the user's) command if this ending is one it asked for."""
    notify = (plan.notify if plan is not None else None) or _user_plan()
    if notify is None or outcome.status not in notify.on:
        return
    payload = run_payload(outcome, plan)
    await asyncio.to_thread(_run_command, notify, payload, payload.get("workspace"))


def notify_queue_end(outcomes: Sequence[Any]) -> None:
    """After a matrix or a worker that emptied its queue: one line for the whole batch, to
    the user's ``$MARATHON_NOTIFY`` (a queue spans workflows, so no workflow's command)."""
    notify = _user_plan()
    if notify is None or len(outcomes) < 2:  # one run was already notified as a run
        return
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    payload = {
        "event": "queue_done",
        "runs": len(outcomes),
        "status": ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
        "reason": "",
        "by_status": counts,
        "run_ids": [o.run_id for o in outcomes],
    }
    _run_command(notify, payload, None)
