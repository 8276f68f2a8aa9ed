"""``pilot replay-export`` and ``brain bench --replay``: a real run against the sim, exported from
its store, read back, and replayed over loopback against sims (one, or two with --compare)."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
from pathlib import Path

import pytest
import typer
from pilot_harness import make_repo, run_in_process, write_workflow
from typer.testing import CliRunner

from brain.bench.cli import register
from brain.bench.models import BenchError
from brain.bench.replay.files import load_replay
from brain.bench.replay.models import ReplayConfig, ReplayPoint, RequestRow
from brain.bench.replay.report import render_markdown, write_plot
from brain.bench.replay.run import run_replay, salted
from brain.bench.replay.stats import reduce_depths
from brain.sim.config import SimConfig, Speculative, Timing
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.agent.state import RunState
from pilot.front.replay_export import export_run, write_replay
from pilot.store.event_store import EventStore

LONG_ANSWER = ScriptPolicy.from_dict({"default": {"content": "word " * 400}})


class Reader:
    """Reads big.txt in slices, then finishes; writes a summary when asked (no tools)."""

    def __init__(self, reads: int) -> None:
        self.reads = 0
        self.limit = reads

    def respond(self, request: SimChatRequest) -> SimTurn:
        if not request.tools:
            return SimTurn(
                content="## Goal\nread big.txt\n## Progress\nslices read\n## Next step\nread on"
            )
        self.reads += 1
        if self.reads > self.limit:
            return SimTurn(tool_calls=(("finish", json.dumps({"summary": "read it all"})),))
        args = {"path": "big.txt", "offset": 1 + 40 * (self.reads % 10), "limit": 40}
        return SimTurn(
            content=f"Reading slice {self.reads}.", tool_calls=(("read_file", json.dumps(args)),)
        )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A real run with compactions (small window), its database and its replay file."""
    tmp = tmp_path_factory.mktemp("replay")
    lines = "".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 + "\n" for i in range(400))
    repo = make_repo(tmp / "repo", {"big.txt": lines})
    with running_sim(SimConfig(model="m", max_model_len=6000), policy=Reader(24)) as sim:
        workflow = write_workflow(
            tmp / "wf.yaml",
            key="replay-flow",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "Read big.txt."}],
            model={"max_tokens": 512},
            limits={"max_no_progress_steps": 100},
        )
        outcome = run_in_process(workflow, repo, tmp / "r.db")
    assert outcome.status == "succeeded", outcome.reason
    db = tmp / "r.db"
    path = tmp / "run.jsonl.gz"
    write_replay(export_run(EventStore(f"sqlite:///{db}"), outcome.run_id), path)
    return db, path, outcome.run_id


def test_the_export_holds_every_prompt_the_pilot_sent(recorded) -> None:
    db, path, run_id = recorded
    events = EventStore(f"sqlite:///{db}").load_events(run_id)
    state = RunState()
    sent: list[list[dict]] = []
    for event in events:
        if isinstance(event, ev.ModelRequest):
            sent.append(list(state.messages))
        state.apply(event)
    compactions = [e for e in events if isinstance(e, ev.Compaction)]
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert len(compactions) >= 2

    run = load_replay(path)
    steps = [r for r in run.requests if r.kind == "step"]
    summaries = [r for r in run.requests if r.kind == "summary"]
    assert [r.messages for r in steps] == sent
    assert len(compactions) == run.compactions
    assert summaries == [], "a summary built from the events sent no request"
    assert all(r.tools and r.tools[0]["type"] == "function" for r in steps)
    assert [r.out for r in steps] == [a.usage.completion_tokens for a in answers if a.usage]
    # between two compactions every prompt starts with the one before it, byte for byte
    for before, after in itertools.pairwise(steps):
        if len(after.messages) > len(before.messages):
            assert after.messages[: len(before.messages)] == before.messages
    # each message is stored once: the file is far smaller than the prompts it holds
    raw = gzip.decompress(path.read_bytes())
    assert len(raw) < len(json.dumps([r.messages for r in run.requests])) / 2


def test_broken_replay_files_are_clear_errors(tmp_path: Path) -> None:
    not_replay = tmp_path / "a.jsonl"
    not_replay.write_text('{"prompt": "hi"}\n')
    with pytest.raises(BenchError, match=r"a.jsonl:1: not a replay file.*pilot replay-export"):
        load_replay(not_replay)
    dangling = tmp_path / "b.jsonl"
    dangling.write_text(
        '{"type": "replay", "version": 1, "run": "x"}\n'
        '{"type": "req", "spans": [[0, 2]], "out": 3}\n'
    )
    with pytest.raises(BenchError, match=r"b.jsonl:2: malformed req line.*defined above"):
        load_replay(dangling)
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(
        app, ["http://127.0.0.1:9", "--replay", str(tmp_path / "missing.jsonl")]
    )
    assert result.exit_code == 1, result.output
    assert "no such replay file" in result.output and "Traceback" not in result.output
    mixed = CliRunner().invoke(
        app, ["http://127.0.0.1:9", "--replay", str(dangling), "--depth", "0,4096"]
    )
    assert mixed.exit_code == 2 and "--depth do(es) not apply to --replay" in mixed.output


def test_salt_keeps_system_and_tools_shared_and_the_rest_apart() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ok"},
    ]
    a, b = salted(messages, "r1"), salted(messages, "r2")
    assert a[0] is messages[0] and a[2] is messages[2]
    assert a[1]["content"] == "[r1] task" and b[1]["content"] == "[r2] task"
    assert messages[1]["content"] == "task"


def test_depth_rows_group_requests_by_position_and_weight_hits_by_tokens() -> None:
    rows = [
        RequestRow(run=r, n=n, kind="step", ok=True, prompt_tokens=100 * (n + 1),
                   output_tokens=11, cached_tokens=100 * n, ttft=0.01, e2e=0.11)
        for r in range(2) for n in range(4)
    ]  # fmt: skip
    first, second = reduce_depths(rows, buckets=2)
    assert (first.label, first.requests, second.label) == ("1-2", 4, "3-4")
    assert first.hit_rate == pytest.approx((0 + 100) / (100 + 200))
    assert first.computed_prefill == pytest.approx(100)
    assert first.decode_tps == pytest.approx(10 / 0.1)


def test_a_point_without_prefix_caching_computed_all_of_its_prompt() -> None:
    """vLLM with --no-enable-prefix-caching counts no prefix-cache queries: zero queries for a
    point that sent prompts is every prompt token computed, not none (the H200 replay's
    reference server showed "computed 0" before)."""
    base = dict(concurrency=1, label="off", runs=1, requests=2, completed=2, failed=0,
                wall_s=1.0, prompt_tokens=1000)  # fmt: skip
    off = ReplayPoint(**base, cached_tokens=0, counter_queries=0.0, counter_hits=0.0)
    assert off.computed_prefill == 1000 and off.hit_rate == 0.0
    no_usage = ReplayPoint(**base, counter_queries=0.0, counter_hits=0.0)
    assert no_usage.computed_prefill == 1000
    on = ReplayPoint(**base, cached_tokens=900, counter_queries=1000.0, counter_hits=880.0)
    assert on.computed_prefill == 120 and on.hit_rate == pytest.approx(0.88)
    assert ReplayPoint(**base).computed_prefill is None


def test_replay_against_two_sims_compares_mtp_point_by_point(recorded, tmp_path: Path) -> None:
    _, path, _ = recorded
    timing = Timing(ttft=0.002, itl=0.004)
    mtp = SimConfig(model="m", max_model_len=6000, timing=timing,
                    speculative=Speculative(num_tokens=2, acceptance=1.0))  # fmt: skip
    base = SimConfig(model="m", max_model_len=6000, timing=timing)
    with running_sim(mtp, policy=LONG_ANSWER) as a, running_sim(base, policy=LONG_ANSWER) as b:
        config = ReplayConfig(
            url=a.base_url,
            compare_url=b.base_url,
            labels=("mtp", "base"),
            paths=[path],
            concurrency=[1, 2],
            runs=2,
            max_tokens=24,
            buckets=4,
        )
        report = asyncio.run(run_replay(config))
    requests = len(load_replay(path).requests)
    for endpoint in report.endpoints:
        assert [p.label for p in endpoint.points] == ["c=1", "c=2"]
        for point in endpoint.points:
            assert (point.runs, point.requests, point.failed) == (2, 2 * requests, 0)
            assert point.output_tokens == 24 * 2 * requests
            assert len(point.run_wall_s) == 2 and len(point.depths) == 4
    mtp_point = report.endpoints[0].points[0]
    assert mtp_point.spec_decode is not None
    assert mtp_point.spec_decode.acceptance_rate == pytest.approx(1.0)
    assert report.endpoints[1].points[0].spec_decode is None
    labels = [row.point for row in report.comparison]
    assert labels[0] == "c=1" and "c=1 depth 1-" in labels[1] and "c=2" in labels
    text = render_markdown(report)
    assert "mtp/base" in text and "2 run(s) a point" in text
    try:
        import matplotlib  # noqa: F401  (the optional bench extra)
    except ImportError:
        return
    write_plot(report, tmp_path / "replay.png")
    assert (tmp_path / "replay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_run_at_a_time_each_requests_cache_hits_come_from_the_counters(
    recorded, tmp_path: Path
) -> None:
    _, path, _ = recorded
    out = tmp_path / "r.json"
    with running_sim(SimConfig(model="m", max_model_len=6000), policy=LONG_ANSWER) as sim:
        app = typer.Typer()
        register(app)
        result = CliRunner().invoke(
            app,
            [sim.base_url, "--replay", str(path), "-c", "1", "--replay-max-tokens", "4",
             "--json", str(out), "--markdown", str(tmp_path / "r.md"), "-q"],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    (point,) = report["endpoints"][0]["points"]
    (rows,) = report["endpoints"][0]["requests"]
    assert all(r["cache_source"] == "counters" for r in rows)
    assert rows[0]["cached_tokens"] == 0  # a fresh server: nothing cached yet
    run = load_replay(path)
    for before, after, request in zip(rows, rows[1:], run.requests[1:], strict=False):
        if (
            request.kind == "step"
            and after["n"] == before["n"] + 1
            and run.requests[before["n"]].messages
            == request.messages[: len(run.requests[before["n"]].messages)]
        ):
            # the previous prompt is this one's prefix: all its full blocks but the last token
            assert after["cached_tokens"] >= before["prompt_tokens"] - 32
    cached = sum(r["cached_tokens"] for r in rows)
    prompt = sum(r["prompt_tokens"] for r in rows)
    assert point["counter_hits"] == cached and point["counter_queries"] == prompt
    assert 0.5 < cached / prompt < 1
    assert "hit rate" in (tmp_path / "r.md").read_text()


def test_pilot_replay_export_writes_the_file_and_refuses_an_unknown_run(
    recorded, tmp_path: Path
) -> None:
    from pilot.front.cli import app

    db, _, run_id = recorded
    url = f"sqlite:///{db}"
    ok = CliRunner().invoke(app, ["replay-export", run_id[:6], "--db", url, "-o", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    written = tmp_path / f"{run_id}.jsonl.gz"
    assert "compaction(s)" in ok.output and load_replay(written).name == run_id
    unknown = CliRunner().invoke(app, ["replay-export", "zzzz", "--db", url, "-o", str(tmp_path)])
    assert unknown.exit_code == 1 and "zzzz" in unknown.output
    assert "Traceback" not in unknown.output
    nothing = CliRunner().invoke(app, ["replay-export", "--db", url])
    assert nothing.exit_code == 2 and "give run ids or --last N" in nothing.output


def test_the_prefix_cache_bench_runs_and_reads_the_servers_hit_rate(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out, replay = tmp_path / "f.json", tmp_path / "r.jsonl.gz"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.prefix_cache", "--steps", "14", "--window", "4096",
         "--replay", str(replay), "--json", str(out)],
        cwd=root, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["status"] == "succeeded" and figures["compactions"] >= 1
    assert figures["cached_tokens"] + figures["computed_tokens"] == figures["prompt_tokens"]
    assert 0.5 < figures["hit_rate"] < 1
    assert load_replay(replay).compactions == figures["compactions"]
