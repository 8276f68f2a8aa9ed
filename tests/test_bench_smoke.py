"""The benchmarks still run: each one tiny, checking only that the figures are sane.

No timing targets here (those are for ``bench/README.md``, measured in one sitting); only that
the benches run end to end and report numbers that make sense: every step durable at the kill,
a resume that finishes, sizes and times that are positive and finite.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tools.registry import default_registry

ROOT = Path(__file__).resolve().parent.parent


def _langgraph_missing() -> str | None:
    try:
        import langgraph.checkpoint.sqlite
        import langgraph.graph  # noqa: F401
    except ImportError as exc:
        return f"LangGraph not installed ({exc}); pip install -e '.[bench]'"
    return None


def _bench(module: str, *args: str, out: Path) -> list | dict:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def _positive(value: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _check_vs_langgraph_row(row: dict, n: int) -> None:
    assert row["n"] == n
    assert row["durable_steps"] == n, row
    assert row["resume_ok"], row
    for key in (
        "ms_per_step",
        "cpu_ms_per_step",
        "first_decile_ms",
        "last_decile_ms",
        "db_bytes_per_step",
        "load_state_ms",
        "resume_proc_wall_s",
        "run_peak_rss_mib",
        "resume_peak_rss_mib",
    ):
        assert _positive(row[key]), (key, row)


def test_vs_langgraph_marathon_configs_run_and_every_step_is_durable(tmp_path: Path) -> None:
    data = _bench(
        "bench.vs_langgraph",
        "--n",
        "10",
        "--configs",
        "marathon",
        "marathon-off",
        out=tmp_path / "out.json",
    )
    rows = {row["config"]: row for row in data["summary"]}
    assert set(rows) == {"marathon", "marathon-off"}
    for row in rows.values():
        _check_vs_langgraph_row(row, 10)
        # the default tool set, through the real registry
        assert row["tools_sent"] == len(default_registry().names())
        assert row["checkpoint_bytes_at_kill"] == 0  # 40 events: none yet (every 256)
        assert _positive(row["git_bytes_at_kill"])  # the real workspace: its start commit
    for result in data["results"]:
        # the resume imports what a real one does: the SDK, with its first model call
        assert result["resume_imported_openai"] is True, result
        assert _positive(result["resume_proc_cpu_s"]), result
        # open -> first call split: the SDK's import and client made inside it, and the rest
        sdk, first = result["resume_sdk_ms"], result["resume_open_to_first_model_call_ms"]
        assert _positive(sdk) and sdk < first, result
        assert result["resume_first_call_less_sdk_ms"] == first - sdk
    # what a step adds to the thread: 1,200 + 2,048 + the call's arguments
    assert 3248 < data["raw"]["10"] < 3800


def test_snapshot_bench_measures_file_and_run_steps(tmp_path: Path) -> None:
    rows = _bench("bench.snapshots", "--sizes", "50", "--steps", "2", out=tmp_path / "out.json")
    assert [(r["files"], r["mode"]) for r in rows] == [(50, "rehash"), (50, "index"), (50, "watch")]
    for row in rows:
        for key in ("run_step_ms", "run_snapshot_ms", "sitting_first_ms", "start_ms"):
            assert _positive(row[key]), (key, row)
    for key in ("file_step_ms", "file_snapshot_ms"):  # path-based in every mode: measured once
        assert _positive(rows[2][key]), (key, rows[2])


def test_vs_langgraph_langgraph_configs_run_and_every_step_is_durable(tmp_path: Path) -> None:
    missing = _langgraph_missing()
    if missing:
        pytest.skip(missing)
    data = _bench(
        "bench.vs_langgraph",
        "--n",
        "10",
        "--configs",
        "lg-delta-sync",
        "lg-default-off",
        out=tmp_path / "out.json",
    )
    rows = {row["config"]: row for row in data["summary"]}
    assert set(rows) == {"lg-delta-sync", "lg-default-off"}
    for row in rows.values():
        _check_vs_langgraph_row(row, 10)


def test_parallel_runs_side_by_side_against_the_sim(tmp_path: Path) -> None:
    results = _bench(
        "bench.parallel",
        "--runs",
        "1",
        "2",
        "--steps",
        "2",
        "--ttft",
        "0.005",
        "--itl",
        "0.001",
        out=tmp_path / "out.json",
    )
    assert [r["runs"] for r in results] == [1, 2]
    for r in results:
        assert r["succeeded"] == r["runs"]
        assert r["total_steps"] == r["runs"] * 3  # 2 tool steps + finish
        for key in ("wall_s", "cpu_s", "cpu_ms_per_step", "peak_rss_mib", "wall_vs_one"):
            assert _positive(r[key]), (key, r)


def test_parallel_repeats_give_each_sweep_its_own_one_run_baseline(tmp_path: Path) -> None:
    results = _bench(
        "bench.parallel",
        *("--runs", "1", "2", "--steps", "1", "--repeats", "2"),
        *("--ttft", "0.005", "--itl", "0.001"),
        out=tmp_path / "out.json",
    )
    assert [(r["repeat"], r["runs"]) for r in results] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    for repeat in (0, 1):
        one, two = (r for r in results if r["repeat"] == repeat)
        assert one["wall_vs_one"] == 1.0
        assert two["wall_vs_one"] == two["wall_s"] / one["wall_s"]
        assert one["succeeded"] == 1 and two["succeeded"] == 2


def test_the_pilot_benches_draw_their_figures(tmp_path: Path) -> None:
    """``--plot`` on a bench, and ``bench.plots`` on a saved ``--json``, write a PNG."""
    pytest.importorskip("matplotlib", reason="plots need the bench extra (matplotlib)")
    _bench(
        "bench.parallel",
        *("--runs", "1", "2", "--steps", "1", "--repeats", "2"),
        *("--ttft", "0.005", "--itl", "0.001", "--plot", str(tmp_path / "parallel.png")),
        out=tmp_path / "parallel.json",
    )
    _bench(
        "bench.vs_langgraph",
        *("--n", "20", "--configs", "marathon", "marathon-off"),
        *("--plot", str(tmp_path / "vs.png")),
        out=tmp_path / "vs.json",
    )
    for name in ("parallel", "vs"):
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, name
    subprocess.run(
        [sys.executable, "-m", "bench.plots", "langgraph", str(tmp_path / "vs.json"),
         str(tmp_path / "again.png")],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert (tmp_path / "again.png").read_bytes().startswith(b"\x89PNG")


def test_scale_routes_a_batch_over_one_and_two_sim_servers(tmp_path: Path) -> None:
    out = _bench(
        "bench.scale",
        *("--runs", "2", "--servers", "1", "2", "--steps", "1"),
        *("--ttft", "0.005", "--itl", "0.001"),
        out=tmp_path / "out.json",
    )
    results = out["results"]  # type: ignore[call-overload]
    assert [r["servers"] for r in results] == [1, 2]
    for r in results:
        assert r["succeeded"] == r["runs"] == 2
        assert r["requests"] == 4 and sum(r["requests_per_server"]) == 4  # 1 step + finish
        assert len(r["requests_per_server"]) == r["servers"]
        for key in ("wall_s", "runs_per_min", "ideal_s", "speedup"):
            assert _positive(r[key]), (key, r)
    assert results[1]["requests_per_server"] == [2, 2]  # one run on each server


def test_printer_bench_shows_every_event_each_way(tmp_path: Path) -> None:
    rows = _bench("bench.printer", "--steps", "5", "--repeats", "1", out=tmp_path / "out.json")
    lines = {mode: [r["lines"] for r in runs] for mode, runs in rows.items()}
    assert lines == {"none": [0], "rich": [20], "printer": [20]}  # 4 events a step, a line each
    assert _positive(rows["printer"][0]["cpu_ms_per_step"])
