"""What a mutating step's workspace snapshot costs against the repository's size.

For each size (1K, 10K, 50K files by default: 100 files a folder, two folder levels, ~130 B a
file, one commit) a real git repository is made, then prepared as ``Runner.start`` prepares a
workspace (``ensure_repository``, ``start_work_branch``, the first snapshot). Then, through the
seams the loop uses (``RegistryExecutor`` over the default registry, ``GitWorkspace``):

- **file-tool steps**: ``write_file`` of one file (an existing one deep in the tree, or a new
  one), then the snapshot, as the loop takes it after a mutating tool;
- **run steps**: the ``run`` tool appending a line to one file (``sandbox: none``), then the
  snapshot, which the tool cannot tell what the command wrote. Three ways are compared, each in
  a fresh copy of the repository (``--modes``):

  - ``rehash``: ``git add -A`` into a fresh index each time (git hashes every file: what a
    snapshot without a kept index costs);
  - ``index``: the run's persistent private index with ``core.untrackedCache`` (git's stat cache
    skips unchanged files, but still ``lstat``s every file and reads and writes the whole index);
  - ``watch``: the default: an inotify watch of the tree (``pilot.workspace.watch``) names the
    paths the command changed, and only they are hashed, in-process with libgit2.

  git's own fsmonitor would be a fourth, but git has no fsmonitor daemon on Linux (``git
  fsmonitor--daemon``: "not supported on this platform", git 2.39 to 2.47).

Each figure is the median over ``--steps`` steps of wall time, and of CPU time (this process's
and its children's: git, the command's shell), which the other processes on a shared machine
disturb less. Run from the repository root::

    .venv/bin/python -m bench.snapshots                       # 1K, 10K, 50K files
    .venv/bin/python -m bench.snapshots --sizes 1000 --steps 30 --json out.json

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table

PER_FOLDER = 100
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def file_path(i: int) -> str:
    return f"pkg{i // 1000:03d}/sub{(i // PER_FOLDER) % 10}/mod_{i:05d}.py"


def make_repository(root: Path, files: int) -> float:
    """A repository of ``files`` small files in one commit; returns the seconds it took."""
    started = time.perf_counter()
    root.mkdir(parents=True)
    for i in range(files):
        path = root / file_path(i)
        if i % PER_FOLDER == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# module {i}\n" + "value = 1\n" * 12)
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the repository"]):
        # no background `git gc --auto` (50K loose objects start one) racing the copies
        subprocess.run(
            ["git", "-c", "gc.auto=0", *args], cwd=root, env=env, check=True, capture_output=True
        )
    return time.perf_counter() - started


def cpu_s() -> float:
    """CPU seconds of this process and of its finished children (git, the command's shell)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), cpu_s()
    fn()
    return (time.perf_counter() - wall) * 1000, (cpu_s() - cpu) * 1000


def measure(root: Path, files: int, steps: int, mode: str) -> dict[str, Any]:
    from pilot.workspace.executor import GitWorkspace, RegistryExecutor
    from pilot.workspace.snapshot import (
        _index_path,
        ensure_repository,
        start_work_branch,
        take_snapshot,
    )
    from tools.registry import default_registry

    run_id = "bench0001"
    repo = ensure_repository(root, init=False)
    start_wall, start_cpu = timed(
        lambda: (start_work_branch(repo, "bench"), take_snapshot(repo, run_id, "run start"))
    )
    executor = RegistryExecutor(
        registry=default_registry(),
        workspace_root=repo.root,
        artifacts_dir=root.parent / "artifacts",
        settings={},
        env_allowlist=[],
        sandbox="none",
        work_branch="bench",
    )
    workspace = GitWorkspace(repo, run_id, executor.take_written, watch_changes=mode == "watch")
    figures: dict[str, list[float]] = {}
    first_wall, first_cpu = timed(
        lambda: workspace.snapshot("the sitting's first (full): the watch starts here")
    )

    def step(kind: str, name: str, arguments: dict[str, Any], call_id: str) -> None:
        tool_wall, tool_cpu = timed(lambda: executor.invoke(name, arguments, call_id))
        if mode == "rehash":
            _index_path(repo, run_id).unlink(missing_ok=True)
        snap_wall, snap_cpu = timed(lambda: workspace.snapshot(f"after {name} ({call_id})"))
        for key, value in (
            ("step_ms", tool_wall + snap_wall),
            ("step_cpu_ms", tool_cpu + snap_cpu),
            ("snapshot_ms", snap_wall),
            ("snapshot_cpu_ms", snap_cpu),
        ):
            figures.setdefault(f"{kind}_{key}", []).append(value)

    for k in range(steps if mode == "watch" else 0):  # file tools: the same in every mode
        i = (k * 7919) % files  # spread over the tree
        # odd steps: a new file in a new folder; even ones: an existing file
        path = f"pkg{i // 1000:03d}/new/file_{k:04d}.py" if k % 2 else file_path(i)
        step("file", "write_file", {"path": path, "content": f"# step {k}\nvalue = {k}\n"}, f"w{k}")
    for k in range(steps):
        target = file_path((k * 104729) % files)
        step("run", "run", {"command": f"echo '# run {k}' >> {target}"}, f"r{k}")
    workspace.close()
    return {
        "mode": mode,
        "files": files,
        "steps": steps,
        "start_ms": start_wall,
        "start_cpu_ms": start_cpu,
        "sitting_first_ms": first_wall,
        "sitting_first_cpu_ms": first_cpu,
        **{key: statistics.median(values) for key, values in figures.items()},
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Run steps in every mode, then the file-tool steps (path-based in every mode)."""
    base = {r["mode"]: r for r in rows if r["files"] == min(x["files"] for x in rows)}
    run_table = markdown_table(
        [
            "mode",
            "files",
            "run step ms (command + snapshot)",
            "its snapshot ms",
            "snapshot CPU ms (git included)",
            "snapshot vs smallest",
            "a sitting's first snapshot ms (watch set up)",
        ],
        [
            [
                r["mode"],
                f"{r['files']:,}",
                r["run_step_ms"],
                r["run_snapshot_ms"],
                r["run_snapshot_cpu_ms"],
                r["run_snapshot_ms"] / base[r["mode"]]["run_snapshot_ms"],
                r["sitting_first_ms"],
            ]
            for r in rows
        ],
    )
    file_rows = [r for r in rows if "file_step_ms" in r]
    file_table = markdown_table(
        [
            "files",
            "file-tool step ms (write_file + snapshot)",
            "its snapshot ms",
            "step CPU ms",
            "start ms (branch + first snapshot)",
        ],
        [
            [f"{r['files']:,}", r["file_step_ms"], r["file_snapshot_ms"], r["file_step_cpu_ms"],
             r["start_ms"]]
            for r in file_rows
        ],
    )  # fmt: skip
    return run_table + "\n\n" + file_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 50_000])
    parser.add_argument("--steps", type=int, default=15, help="steps of each kind per size")
    parser.add_argument("--modes", nargs="+", default=["rehash", "index", "watch"],
                        choices=("rehash", "index", "watch"))  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-snapshots-") as tmp:
        for files in args.sizes:
            made = make_repository(Path(tmp) / f"repo-{files}" / "seed", files)
            for mode in args.modes:  # each mode in its own copy: no cache carried over
                root = Path(tmp) / f"repo-{files}" / mode
                subprocess.run(["cp", "-a", str(root.parent / "seed"), str(root)], check=True)
                row = measure(root, files, args.steps, mode)
                rows.append(row)
                print(
                    f"  {files:>6} files (made in {made:.1f} s) {mode:6s}: run snapshot "
                    f"{row['run_snapshot_ms']:.1f} ms, CPU {row['run_snapshot_cpu_ms']:.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
        print(table(rows), flush=True)  # before the clean-up: removing 50K files takes a while
        if args.json is not None:
            args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
