"""Sections 4 and 5 of the chaos bench: storage faults and concurrent resumes.

Storage: the database on a file system that fills up mid-run (a small tmpfs mount when this
process may mount, else a process file-size limit as a stand-in) must pause the run with a
clear message and resume cleanly once there is room again; a database held by another
connection's exclusive transaction must be waited for, not corrupted. `PRAGMA integrity_check`
closes every scenario.

Concurrency: two `pilot resume` of one run started at the same moment: exactly one may drive it
(the other exits 2 saying who holds the run); counted from the `run_resumed` events.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
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
    pilot_cmd,
    pilot_env,
    run_id_of,
    run_pilot,
    transcript,
    tree_hash,
    workspace_of,
    write_workflow,
)

from brain.sim.config import SimConfig, Timing
from brain.sim.server import running_sim
from pilot.store.lock_wait import LOCK_WAIT_NOTE

STORAGE_FULL_EXIT = 74
"""`pilot` exit code when the database's disk is full (EX_IOERR)."""


@dataclass
class StorageResult:
    scenario: str
    how: str
    ok: bool
    integrity: bool
    detail: str
    seconds: float


@contextlib.contextmanager
def small_filesystem(path: Path, size_kb: int) -> Iterator[str]:
    """A tmpfs of ``size_kb`` at ``path``; yields how it was made ('tmpfs' or '' if not)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        mounted = done.returncode == 0
    try:
        yield "tmpfs" if mounted else ""
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(directory: Path) -> Path:
    """Write a ballast file until the file system is full."""
    ballast = directory / "ballast"
    with contextlib.suppress(OSError), open(ballast, "wb", buffering=0) as out:
        for size in (1 << 20, 65536, 4096, 512):  # big chunks, then the last crumbs
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    return ballast


def _fsize_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def disk_full(base: Path, endpoint: str, steps: int, clean: tuple) -> StorageResult:
    """Fill the database's file system mid-run; expect a clean pause, then a clean resume."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="diskfull-", dir=base))
    repo = make_repo(root / "repo")
    workflow = write_workflow(root / "wf.yaml", endpoint=endpoint, steps=steps)
    with small_filesystem(root / "db", 16384) as how:
        db = root / "db" / "m.db"
        env = pilot_env(root / "home")
        args = pilot_cmd(
            "run", str(workflow), "--param", f"repo={repo}", "--db", f"sqlite:///{db}", "--json"
        )
        ballast = None
        if how:
            proc = subprocess.Popen(
                args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{") and json.loads(line).get("seq") == 12:
                    ballast = _fill(db.parent)
                    break
            _out, err = proc.communicate(timeout=300)
            code = proc.returncode
        else:
            # Stand-in: the pilot may not grow any file past the database's size after setup.
            how = "RLIMIT_FSIZE"
            first = run_pilot(
                ["run", str(workflow), "--param", f"repo={repo}"], db, failpoint="kill_after_seq=12"
            )
            limit = db.stat().st_size + (db.with_name("m.db-wal").stat().st_size)
            run_id = run_id_of(db)
            proc2 = subprocess.run(
                pilot_cmd("resume", run_id, "--db", f"sqlite:///{db}", "--json"),
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                preexec_fn=_fsize_limit(limit),
            )
            code, err = proc2.returncode, proc2.stderr
            del first
        paused_cleanly = code == STORAGE_FULL_EXIT and "disk is full" in err
        run_id = run_id_of(db)
        if ballast is not None:
            # A resume while the disk is still full says so the same way, and changes nothing.
            still = run_pilot(["resume", run_id], db, timeout=300)
            paused_cleanly = paused_cleanly and (
                still.returncode == STORAGE_FULL_EXIT and "disk is full" in still.stderr
            )
            err += f" (resume while full: exit {still.returncode})"
            ballast.unlink()
        resumed = run_pilot(["resume", run_id], db, timeout=300)
        _events, state = load_run(db, run_id)
        integrity = integrity_ok(db)
        work = workspace_of(state) if state.started else repo
        ledger = (work / "ledger.txt").read_text()
        same = (
            transcript(state.messages) == clean[0]
            and tree_hash(work) == clean[1]
            and duplicated_lines(ledger) == 0
            and ledger.splitlines() == ledger_expected(steps)
        )
        ok = (
            paused_cleanly
            and resumed.returncode == 0
            and state.finished is not None
            and state.finished.status == "succeeded"
            and same
        )
        tail = " ".join(err.strip().splitlines()[-2:]) if err.strip() else ""
        if resumed.returncode != 0:
            tail += " / resume: " + " ".join(resumed.stderr.strip().splitlines()[-3:])[:300]
        detail = (
            f"exit {code}: {tail[:160]}; resume exit {resumed.returncode}, "
            f"{'same' if same else 'DIFFERENT'} transcript, tree and ledger as the clean run"
        )
        return StorageResult(
            "database file system full mid-run",
            how,
            ok,
            integrity,
            detail,
            time.monotonic() - started,
        )


def locked_database(base: Path, endpoint: str, steps: int, hold: float) -> StorageResult:
    """Another process holds BEGIN EXCLUSIVE for ``hold`` seconds while the run goes on."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="locked-", dir=base))
    repo = make_repo(root / "repo")
    workflow = write_workflow(root / "wf.yaml", endpoint=endpoint, steps=steps)
    db = root / "m.db"
    proc = subprocess.Popen(
        pilot_cmd(
            "run", str(workflow), "--param", f"repo={repo}", "--db", f"sqlite:///{db}", "--json"
        ),
        env=pilot_env(root / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # The holder starts before the run reaches the chosen event and waits for a word on stdin,
    # so the lock is taken within milliseconds of it, not after an interpreter's start (which
    # under load let the run go on for most of the window before meeting the lock).
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3,sys,time;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
            "sys.stdin.readline();c.execute('BEGIN EXCLUSIVE');q='SELECT max(seq) FROM events';"
            "print(c.execute(q).fetchone()[0],flush=True);time.sleep(float(sys.argv[2]));"
            "print(c.execute(q).fetchone()[0],flush=True);c.execute('COMMIT')",
            str(db),
            str(hold),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    window: tuple[float, float] | None = None
    written = -1
    for line in proc.stdout:
        if line.startswith("{") and json.loads(line).get("seq") == 8:
            holder.stdin.write("go\n")
            holder.stdin.flush()
            first_seq = int(holder.stdout.readline())
            locked_at = time.time()
            written = int(holder.stdout.readline()) - first_seq
            window = (locked_at, time.time())
            break
    holder.stdin.close()
    holder.wait(timeout=60)
    _out, err = proc.communicate(timeout=300)
    run_id = run_id_of(db)
    events, state = load_run(db, run_id)
    integrity = integrity_ok(db)
    ledger = ((workspace_of(state) if state.started else repo) / "ledger.txt").read_text()
    after = 0
    gap = 0.0
    if window is not None:
        stamps = [e.at.timestamp() for e in events]
        after = sum(t >= window[1] - 0.05 for t in stamps)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        gap = max(gaps) if gaps else 0.0
    ok = (
        window is not None
        and proc.returncode == 0
        and state.finished is not None
        and state.finished.status == "succeeded"
        and duplicated_lines(ledger) == 0
        and written == 0
        and after > 0
        and LOCK_WAIT_NOTE in err
    )
    status = state.finished.reason if state.finished else "not finished"
    return StorageResult(
        "database locked by another process (BEGIN EXCLUSIVE)",
        f"held {window[1] - window[0]:.1f} s" if window else "never held",
        ok,
        integrity,
        f"events written while locked: {written}; longest wait {gap:.1f} s; run exit "
        f"{proc.returncode} ({status}) {(err.strip().splitlines() or [''])[-1][:120]}",
        time.monotonic() - started,
    )


def storage_faults(
    *, base: Path, quick: bool, steps: int | None = None, hold: float | None = None
) -> list[StorageResult]:
    steps = steps or (16 if quick else 30)
    config = SimConfig(model="chaos-model", max_model_len=32768, timing=Timing(ttft=0, itl=0))
    with running_sim(config, policy=ChaosPolicy(steps)) as sim:
        endpoint = sim.openai_base_url
        root = Path(tempfile.mkdtemp(prefix="clean-", dir=base))
        repo = make_repo(root / "repo")
        workflow = write_workflow(root / "wf.yaml", endpoint=endpoint, steps=steps)
        db = root / "m.db"
        run_pilot(["run", str(workflow), "--param", f"repo={repo}"], db)
        _e, state = load_run(db, run_id_of(db))
        clean = (transcript(state.messages), tree_hash(workspace_of(state)))
        results = [disk_full(base, endpoint, steps, clean)]
        hold = hold or (2.0 if quick else 5.0)
        results.append(locked_database(base, endpoint, steps, hold))
    return results


def storage_table(results: list[StorageResult]) -> str:
    rows = [
        [
            r.scenario,
            r.how,
            "yes" if r.ok else "NO",
            "ok" if r.integrity else "FAILED",
            r.detail,
            f"{r.seconds:.0f} s",
        ]
        for r in results
    ]
    return md_table(["scenario", "how", "passed", "integrity_check", "detail", "time"], rows)


# -- concurrency ----------------------------------------------------------------------------


@dataclass
class RaceResult:
    trials: int = 0
    exactly_one: int = 0
    both_ran: int = 0
    none_ran: int = 0
    refused_clearly: int = 0
    unclear: int = 0
    integrity_failures: int = 0
    completed: int = 0


def concurrent_resumes(
    *, base: Path, trials: int, progress: Callable[[], None] | None = None
) -> RaceResult:
    """Start two `pilot resume` of one paused run at once, ``trials`` times."""
    steps = 8  # three phases, each with work of its own before its finish
    result = RaceResult()
    config = SimConfig(model="chaos-model", max_model_len=32768, timing=Timing(ttft=0, itl=0))
    with running_sim(config, policy=ChaosPolicy(steps)) as sim:
        root = Path(tempfile.mkdtemp(prefix="race-", dir=base))
        repo = make_repo(root / "repo")
        workflow = write_workflow(root / "wf.yaml", endpoint=sim.openai_base_url, steps=steps)
        db = root / "m.db"
        for trial in range(trials):
            # A fresh run per trial, killed after its first events (a lease left behind by a
            # dead process, the hardest case: both resumers may take it over).
            for leftover in (db, db.with_name("m.db-wal"), db.with_name("m.db-shm")):
                leftover.unlink(missing_ok=True)
            shutil.rmtree(repo, ignore_errors=True)
            make_repo(repo)
            run_pilot(
                ["run", str(workflow), "--param", f"repo={repo}"],
                db,
                failpoint=f"kill_after_seq={3 + trial % 5}",
            )
            run_id = run_id_of(db)
            gate = threading.Barrier(2)
            outs: list[subprocess.CompletedProcess[str] | None] = [None, None]

            def go(
                i: int,
                run_id: str = run_id,
                gate: threading.Barrier = gate,
                outs: list[subprocess.CompletedProcess[str] | None] = outs,
            ) -> None:
                gate.wait()
                outs[i] = run_pilot(["resume", run_id], db, timeout=300)

            threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            events, state = load_run(db, run_id)
            resumed = sum(1 for e in events if e.type == "run_resumed")
            codes = [o.returncode if o else None for o in outs]
            result.trials += 1
            if resumed == 1:
                result.exactly_one += 1
            elif resumed == 0:
                result.none_ran += 1
            else:
                result.both_ran += 1
            losers = [o for o in outs if o is not None and o.returncode != 0]
            if sorted(codes) == [0, 2] and all("is being executed by" in o.stderr for o in losers):
                result.refused_clearly += 1
            elif resumed == 1 and sorted(codes) == [0, 0]:
                # The second one came after the first had finished: it found nothing to do.
                result.refused_clearly += 1
            else:
                result.unclear += 1
            result.completed += state.finished is not None and state.finished.status == "succeeded"
            result.integrity_failures += not integrity_ok(db)
            if progress is not None:
                progress()
    return result


def race_table(r: RaceResult) -> str:
    rows = [
        ["trials (two resumes started together)", r.trials],
        ["exactly one drove the run", r.exactly_one],
        ["both drove the run (must be 0)", r.both_ran],
        ["neither drove it", r.none_ran],
        ["loser exited 2 'is being executed by' (or found it done)", r.refused_clearly],
        ["other outcomes (must be 0)", r.unclear],
        ["runs completed", r.completed],
        ["integrity failures", r.integrity_failures],
    ]
    return md_table(["figure", "value"], rows)
