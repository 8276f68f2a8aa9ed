"""Section 2 of the chaos bench: the scripted run under each fault the simulated server injects.

Each fault gets a fresh sim and a fresh workspace; the run must complete, with the same ledger
(every side effect exactly once) and the same working tree as the clean run. The fault's own
turns (a malformed call answered with an error, a nudge after an empty turn) are expected extra
messages, so transcripts are not compared here; what the workspace holds is.

The last scenario is a real server process (`python -m brain.sim.vllm_entry` through the sim
launcher) that exits every few requests and is restarted by the brain's Supervisor.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chaos_common import (
    ChaosPolicy,
    duplicated_lines,
    integrity_ok,
    ledger_expected,
    load_run,
    make_repo,
    md_table,
    run_id_of,
    run_pilot,
    tree_hash,
    workspace_of,
    write_script,
    write_workflow,
)

from brain.sim.config import FaultRule, SimConfig, Timing
from brain.sim.server import running_sim

IDLE = 2.0
"""The workflow's idle timeout in this section (a stall is longer than this)."""


@dataclass
class FaultResult:
    fault: str
    spec: str
    completed: bool
    retries: int
    unavailable: int
    waited_s: float
    error_turns: int
    lost: bool | None
    duplicates: int
    integrity: bool
    seconds: float
    repaired: int = 0
    note: str = ""


def _faults(refuse_seconds: float, quick: bool = False) -> list[tuple[str, list[FaultRule]]]:
    burst = [2, 3, 7] if quick else [2, 3, 4, 5, 9, 10, 11]
    return [
        ("refused connections", [FaultRule(kind="refuse", at=[3], seconds=refuse_seconds)]),
        ("503 bursts", [FaultRule(kind="http_503", at=burst)]),
        ("500 errors", [FaultRule(kind="http_500", every=4)]),
        ("stream cut mid-way", [FaultRule(kind="stream_cut", every=3, after_chunks=2)]),
        (
            "error event inside the stream",
            [FaultRule(kind="stream_error", every=4, after_chunks=2)],
        ),
        (
            "stall past the idle timeout",
            [FaultRule(kind="stall", at=[2, 6], seconds=IDLE + 1.5, after_chunks=2)],
        ),
        ("stall before headers", [FaultRule(kind="stall_headers", at=[4], seconds=IDLE + 1.5)]),
        ("malformed tool arguments", [FaultRule(kind="malformed_arguments", every=4)]),
        ("unknown tool", [FaultRule(kind="unknown_tool", every=5)]),
        ("empty turns", [FaultRule(kind="empty_turn", every=5)]),
        ("cut by max_tokens (length)", [FaultRule(kind="length", every=6)]),
    ]


def _spec(rules: list[FaultRule]) -> str:
    parts = []
    for r in rules:
        when = f"@{'+'.join(map(str, r.at))}" if r.at else (f"%{r.every}" if r.every else "")
        parts.append(f"{r.kind}{when}")
    return ", ".join(parts)


def _measure(
    name: str, spec: str, db: Path, repo: Path, steps: int, clean_tree: str, code: int, t0: float
) -> FaultResult:
    events, state = load_run(db, run_id_of(db))
    repo = workspace_of(state) if state.started else repo
    ledger = (repo / "ledger.txt").read_text()
    completed = code == 0 and state.finished is not None and state.finished.status == "succeeded"
    repaired = sum(1 for e in events if e.type == "assistant_message" and e.repairs)
    ledger_ok = ledger.splitlines() == ledger_expected(steps)
    tree_ok = tree_hash(repo) == clean_tree
    note = ""
    if repaired and not tree_ok:
        # The fault's own effect: a call cut in half was repaired into a different valid call
        # and run (e.g. `echo step02 >> led`); only the ledger can say whether work was lost.
        note = f"{repaired} cut call(s) repaired and run as repaired: tree differs by design"
        tree_ok = True
    lost = not (ledger_ok and tree_ok)
    return FaultResult(
        fault=name,
        spec=spec,
        completed=completed,
        retries=sum(max(0, getattr(e, "attempts", 1) - 1) for e in events),
        unavailable=sum(e.type == "server_unavailable" for e in events),
        waited_s=sum(getattr(e, "waited_s", 0.0) for e in events if e.type == "server_back"),
        error_turns=sum(
            1 for e in events if (e.type == "tool_finished" and not e.executed) or e.type == "nudge"
        ),
        lost=lost,
        duplicates=duplicated_lines(ledger),
        integrity=integrity_ok(db),
        seconds=time.monotonic() - t0,
        repaired=repaired,
        note=note,
    )


def _one_run(base: Path, tag: str, endpoint: str, steps: int, server_wait: float) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"fault-{tag}-", dir=base))
    make_repo(root / "repo")
    write_workflow(
        root / "wf.yaml",
        endpoint=endpoint,
        steps=steps,
        model={"idle_timeout": IDLE, "server_wait": server_wait},
    )
    return root


def _drive(root: Path) -> int:
    done = run_pilot(
        ["run", str(root / "wf.yaml"), "--param", f"repo={root / 'repo'}"],
        root / "m.db",
        timeout=900,
    )
    return done.returncode


def supervised_exit(base: Path, steps: int, clean_tree: str, every: int) -> FaultResult:
    """A real sim process that exits at its ``every``-th chat request, restarted each time by
    the Supervisor (each new process counts requests from 1, so it dies again later)."""
    from brain.launchers.ports import free_port
    from brain.launchers.sim import SimLauncher
    from brain.spec import ServerSpec
    from brain.supervisor import RestartPolicy, Supervisor

    t0 = time.monotonic()
    script = write_script(Path(tempfile.mkdtemp(dir=base)) / "script.yaml", steps)
    port = free_port()
    spec = ServerSpec(
        name=f"chaos-{port}",
        backend="sim",
        model="chaos-model",
        port=port,
        max_model_len=32768,
        # As a served tool-calling model must be: vLLM refuses "auto" tool choice without them.
        enable_auto_tool_choice=True,
        tool_call_parser="hermes",
        env={"BRAIN_SIM_POLICY": f"script:{script}", "BRAIN_SIM_FAULTS": f"exit@{every}"},
        timeouts={"load_timeout_s": 60, "stop_timeout_s": 5},
    )
    policy = RestartPolicy(
        max_restarts=steps, window_s=600, backoff_initial_s=0.2, backoff_max_s=1.0
    )
    supervisor = Supervisor(spec, SimLauncher(), policy=policy, poll_interval_s=0.2)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(supervisor.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    while supervisor.ready is None and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.1)
    try:
        root = _one_run(base, "exit", f"http://127.0.0.1:{port}/v1", steps, 300)
        code = _drive(root)
    finally:
        supervisor.request_stop()
        thread.join(60)
    outcome = _measure(
        "server process exits, Supervisor restarts it",
        f"exit@{every} per process",
        root / "m.db",
        root / "repo",
        steps,
        clean_tree,
        code,
        t0,
    )
    outcome.note = f"{supervisor.starts - 1} restarts {outcome.note}".strip()
    return outcome


def fault_matrix(
    *,
    steps: int,
    refuse_seconds: float,
    base: Path,
    quick: bool,
    progress: Callable[[FaultResult], None] | None = None,
    only: list[str] | None = None,
    supervised: bool = True,
) -> list[FaultResult]:
    """The clean run, then each fault (``only``: those whose name contains one of these), then
    the supervised server exits (unless ``supervised`` is False)."""
    results: list[FaultResult] = []
    policy = ChaosPolicy(steps)
    fast = Timing(ttft=0.0, itl=0.0)
    with running_sim(
        SimConfig(model="chaos-model", max_model_len=32768, timing=fast), policy=policy
    ) as sim:
        t0 = time.monotonic()
        root = _one_run(base, "clean", sim.openai_base_url, steps, 60)
        code = _drive(root)
        clean_tree = tree_hash(workspace_of(load_run(root / "m.db", run_id_of(root / "m.db"))[1]))
        results.append(
            _measure(
                "none (clean run)", "-", root / "m.db", root / "repo", steps, clean_tree, code, t0
            )
        )
    for name, rules in _faults(refuse_seconds, quick):
        if only is not None and not any(word in name for word in only):
            continue
        t0 = time.monotonic()
        config = SimConfig(model="chaos-model", max_model_len=32768, timing=fast, faults=rules)
        with running_sim(config, policy=policy) as sim:
            root = _one_run(base, "f", sim.openai_base_url, steps, refuse_seconds + 120)
            code = _drive(root)
        outcome = _measure(
            name, _spec(rules), root / "m.db", root / "repo", steps, clean_tree, code, t0
        )
        results.append(outcome)
        if progress is not None:
            progress(outcome)
    if supervised:
        exiting = supervised_exit(base, steps, clean_tree, every=4 if quick else 6)
        results.append(exiting)
        if progress is not None:
            progress(exiting)
    return results


def fault_table(results: list[FaultResult]) -> str:
    rows = [
        [
            r.fault,
            f"`{r.spec}`",
            "yes" if r.completed else "NO",
            r.retries,
            r.unavailable,
            f"{r.waited_s:.1f}",
            r.error_turns,
            r.repaired,
            "-" if r.lost is None else ("LOST" if r.lost else "nothing"),
            r.duplicates,
            "ok" if r.integrity else "FAILED",
            f"{r.seconds:.0f}",
            r.note,
        ]
        for r in results
    ]
    return md_table(
        [
            "fault",
            "sim rule",
            "completed",
            "retries",
            "server_unavailable",
            "waited s",
            "error turns",
            "repaired calls",
            "lost",
            "twice",
            "integrity",
            "time s",
            "note",
        ],
        rows,
    )
