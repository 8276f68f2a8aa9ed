"""``pilot trace``: a stored run as an OpenTelemetry trace, checked against real runs.

Runs go through the simulated vLLM over loopback into a real SQLite store; the trace is made by
the real command and read back as the OTLP JSON a collector reads, or received over real
OTLP/HTTP by a receiver that decodes it with OpenTelemetry's own protobuf classes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pilot_harness import call, make_repo, run_in_process, write_script
from pilot_harness import write_workflow as harness_workflow
from typer.testing import CliRunner

from brain.sim.config import FaultRule, SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.front.cli import app
from pilot.run.launch import resume_run
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore
from pilot.trace.ids import hex_trace_id
from pilot.trace.otlp import otlp_json

needs_otel = pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry") is None
    or importlib.util.find_spec("opentelemetry.sdk") is None,
    reason="the otel extra is not installed: pip install 'marathon[otel]'",
)
ERROR = 2
"""OTLP's ``STATUS_CODE_ERROR``."""

SCRIPT = [
    {"content": "Reading.", "tool_calls": [call("read_file", path="app.py")]},
    {"tool_calls": [call("read_file", path="missing.py")]},
    {"tool_calls": [call("finish", summary="app.py holds VALUE")]},
    {"tool_calls": [call("edit_file", path="app.py", old="VALUE = 1", new="VALUE = 3")]},
    {"tool_calls": [call("finish", summary="bumped")]},
    {
        "when": "Check failed",
        "tool_calls": [call("edit_file", path="app.py", old="VALUE = 3", new="VALUE = 2")],
    },
    {"tool_calls": [call("finish", summary="bumped again")]},
]
PHASES = [
    {"name": "look", "prompt": "Look around.", "tools": ["read_file", "finish"]},
    {"name": "change", "prompt": "Bump it.", "check": "grep -q 'VALUE = 2' app.py"},
]


def write_workflow(tmp: Path, endpoint: str, **extra: Any) -> Path:
    return harness_workflow(
        tmp / "wf.yaml", key="trace-run", endpoint=endpoint, phases=PHASES, **extra
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    """A two-phase run with a failing tool and a failing then passing check: (db, id, port)."""
    tmp = tmp_path_factory.mktemp("trace")
    script = write_script(tmp / "s.yaml", "trace-run", SCRIPT)
    config = SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        outcome = run_in_process(
            write_workflow(tmp, sim.openai_base_url), make_repo(tmp / "repo"), tmp / "m.db"
        )
        port = sim.port
    assert outcome.status == "succeeded", outcome.reason
    return tmp / "m.db", outcome.run_id, port


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def export(db: Path, run_id: str, out: Path) -> list[dict[str, Any]]:
    result = invoke("trace", run_id[:6], "--db", f"sqlite:///{db}", "--out", str(out))
    assert result.exit_code == 0, result.output
    return spans_of(out.read_text())


def spans_of(text: str) -> list[dict[str, Any]]:
    """Every span of OTLP JSON lines, with its attributes as a plain dict under ``attrs``."""
    spans = []
    for line in text.splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    span["attrs"] = {
                        a["key"]: plain(a["value"]) for a in span.get("attributes", [])
                    }
                    spans.append(span)
    return spans


def plain(value: dict[str, Any]) -> Any:
    (kind, inner), *_ = value.items()
    if kind == "intValue":
        return int(inner)
    if kind == "arrayValue":
        return [plain(item) for item in inner.get("values", [])]
    return inner


def children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    found = [s for s in spans if s.get("parentSpanId") == parent["spanId"]]
    return sorted(found, key=lambda s: int(s["startTimeUnixNano"]))


def chats_of(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model requests' spans, by step."""
    chats = [s for s in spans if s["name"].startswith("chat ")]
    return sorted(chats, key=lambda s: s["attrs"]["marathon.step"])


def nanos(at: datetime) -> int:
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


@needs_otel
def test_a_run_exports_as_one_tree_of_phases_requests_tools_and_checks(
    finished_run: tuple[Path, str, int], tmp_path: Path
) -> None:
    db, run_id, _ = finished_run
    spans = export(db, run_id, tmp_path / "t.jsonl")
    assert {s["traceId"] for s in spans} == {hex_trace_id(run_id)}
    [root] = [s for s in spans if not s.get("parentSpanId")]
    assert root["name"] == "invoke_agent test-flow"
    assert "marathon.span.open" not in root["attrs"]
    look, change = children(spans, root)
    assert [look["name"], change["name"]] == ["phase look", "phase change"]
    assert [s["name"] for s in children(spans, look)] == [
        "chat test-model",
        "execute_tool read_file",
        "chat test-model",
        "execute_tool read_file",
        "chat test-model",
        "execute_tool finish",
    ]
    names = [s["name"] for s in children(spans, change)]
    assert names.count("check change") == 2 and names.count("chat test-model") == 4
    failed, passed = [s for s in children(spans, change) if s["name"] == "check change"]
    assert failed["status"]["code"] == ERROR and failed["attrs"]["marathon.check.passed"] is False
    assert passed["attrs"]["marathon.check.passed"] is True and "code" not in passed["status"]

    events = EventStore(f"sqlite:///{db}").load_events(run_id)
    requests = [e for e in events if isinstance(e, ev.ModelRequest)]
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    chats = chats_of(spans)
    assert len(chats) == len(requests) == len(answers) == 7
    for span, request, answer in zip(chats, requests, answers, strict=True):
        assert int(span["startTimeUnixNano"]) == nanos(request.at)
        assert int(span["endTimeUnixNano"]) == nanos(answer.at)
    assert int(root["startTimeUnixNano"]) == nanos(events[0].at)
    assert int(root["endTimeUnixNano"]) == nanos(events[-1].at)


@needs_otel
def test_spans_carry_the_genai_attributes_the_call_ids_and_the_server_that_answered(
    finished_run: tuple[Path, str, int], tmp_path: Path
) -> None:
    db, run_id, port = finished_run
    spans = export(db, run_id, tmp_path / "t.jsonl")
    events = EventStore(f"sqlite:///{db}").load_events(run_id)
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    chats = chats_of(spans)
    for span, answer in zip(chats, answers, strict=True):
        attrs = span["attrs"]
        assert span["kind"] == 3  # SPAN_KIND_CLIENT
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == "test-model"
        assert answer.usage is not None and answer.usage.prompt_tokens > 0
        assert attrs["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens
        assert attrs["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
        assert attrs["gen_ai.response.finish_reasons"] == [answer.finish_reason]
        assert (attrs["server.address"], attrs["server.port"]) == ("127.0.0.1", port)
        assert attrs["gen_ai.conversation.id"] == run_id
        assert attrs["marathon.tool_call.ids"] == [c.id for c in answer.tool_calls]

    call_ids = [c.id for a in answers for c in a.tool_calls]
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert [s["attrs"]["gen_ai.tool.call.id"] for s in tools] == call_ids
    for span in tools:
        assert span["attrs"]["gen_ai.operation.name"] == "execute_tool"
        assert span["name"] == f"execute_tool {span['attrs']['gen_ai.tool.name']}"
    [missing] = [s for s in tools if s["status"].get("code") == ERROR]
    assert missing["attrs"]["error.type"] == "tool_error"
    assert "missing.py" in missing["status"]["message"]

    [root] = [s for s in spans if not s.get("parentSpanId")]
    assert root["attrs"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attrs"]["gen_ai.usage.input_tokens"] == sum(
        a.usage.prompt_tokens for a in answers if a.usage
    )
    assert root["attrs"]["marathon.run.status"] == "succeeded"


@needs_otel
def test_ids_come_from_the_run_so_exporting_twice_gives_the_same_bytes(
    finished_run: tuple[Path, str, int], tmp_path: Path
) -> None:
    db, run_id, _ = finished_run
    first = export(db, run_id, tmp_path / "a.jsonl")
    export(db, run_id, tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    ids = [s["spanId"] for s in first]
    assert len(set(ids)) == len(ids) and all(len(i) == 16 and int(i, 16) for i in ids)
    assert hex_trace_id(run_id) != hex_trace_id(run_id + "x")


@needs_otel
def test_a_resumed_run_re_exports_every_span_it_had_closed_unchanged(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.yaml", "trace-run", SCRIPT)
    db, repo = tmp_path / "m.db", make_repo(tmp_path / "repo")
    outage = [FaultRule(kind="http_503", at=list(range(4, 80)))]
    flaky = SimConfig(
        model="test-model", max_model_len=32768, policy=f"script:{script}", faults=outage
    )
    with running_sim(flaky) as sim:
        workflow = write_workflow(tmp_path, sim.openai_base_url, model={"server_wait": 1})
        first = run_in_process(workflow, repo, db)
    assert first.status == "paused", first.reason
    before = {s["spanId"]: s for s in export(db, first.run_id, tmp_path / "a.jsonl")}

    healthy = SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(healthy) as sim:
        store = EventStore(f"sqlite:///{db}")
        outcome = asyncio.run(
            resume_run(Runner(store), store.find_run(first.run_id), endpoint=sim.openai_base_url)
        )
    assert outcome.status == "succeeded", outcome.reason
    after = {s["spanId"]: s for s in export(db, first.run_id, tmp_path / "b.jsonl")}

    closed = [s for s in before.values() if "marathon.span.open" not in s["attrs"]]
    opened = [s for s in before.values() if "marathon.span.open" in s["attrs"]]
    assert len(closed) >= 4 and len(after) > len(before)
    for span in closed:
        assert after[span["spanId"]] == span
    for span in opened:  # the run and the phase it paused in go on, from the same start
        again = after[span["spanId"]]
        assert (again["name"], again["startTimeUnixNano"]) == (
            span["name"],
            span["startTimeUnixNano"],
        )
        assert again.get("parentSpanId") == span.get("parentSpanId")
    cut = [s for s in closed if s["attrs"].get("error.type") == "run_paused"]
    assert [s["name"] for s in cut] == ["chat test-model"], "the request the outage cut short"
    assert {e["name"] for e in cut[0]["events"]} == {"server_unavailable"}
    [paused_in] = [s for s in opened if s["name"].startswith("phase ")]
    marks = [e["name"] for e in after[paused_in["spanId"]]["events"]]
    assert [m for m in marks if m.startswith("run_")] == ["run_paused", "run_resumed"]
    assert "marathon.span.open" not in after[next(iter(after))]["attrs"]


def _write_events(store: EventStore, run_id: str, timed: list[tuple[float, ev.Event]]) -> None:
    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for seq, (seconds, event) in enumerate(timed, start=1):
        stamped = event.model_copy(update={"at": t0 + timedelta(seconds=seconds)})
        store.append(run_id, seq, stamped, totals={})


@needs_otel
def test_a_tool_a_kill_interrupted_ends_where_the_process_stopped_and_its_rerun_is_its_own_span(
    tmp_path: Path,
) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    run_id = store.create_run(
        workflow_name="wf",
        workflow_path="wf.yaml",
        workflow_text="",
        params={},
        workspace="",
        owner=None,
    )
    message = ev.AssistantMessage(
        step=1, tool_calls=[ev.ToolCall(id="call-1", name="run", arguments="{}")]
    )
    _write_events(
        store,
        run_id,
        [
            (
                0,
                ev.RunStarted(
                    workflow="wf",
                    workspace="/w",
                    branch="b",
                    endpoint="http://h:9/v1",
                    system="",
                    phases=["p"],
                    owner="o",
                ),
            ),
            (1, ev.PhaseStarted(index=0, name="p", prompt="")),
            (2, ev.ModelRequest(step=1, messages=2)),
            (3, message),
            (4, ev.ToolStarted(call_id="call-1", name="run", mutates=True)),
            (60, ev.RunResumed(owner="o2")),
            (61, ev.ToolStarted(call_id="call-1", name="run", mutates=True)),
            (65, ev.ToolFinished(call_id="call-1", name="run", output="exit code: 0")),
            (
                70,
                ev.Compaction(
                    pinned=[0],
                    replaced_to=3,
                    replaced_count=2,
                    summary="s",
                    tokens_before=900,
                    tokens_after=300,
                    reason="threshold",
                ),
            ),
        ],
    )
    result = invoke("trace", run_id, "--db", f"sqlite:///{tmp_path / 'm.db'}", "-o", "-")
    assert result.exit_code == 0, result.output
    spans = spans_of(result.stdout)
    killed, rerun = [s for s in spans if s["name"] == "execute_tool run"]
    assert killed["attrs"]["error.type"] == "process_stopped"
    assert int(killed["endTimeUnixNano"]) == int(killed["startTimeUnixNano"])  # nothing after it
    assert rerun["attrs"]["gen_ai.tool.call.id"] == "call-1" and "code" not in rerun["status"]
    assert (int(rerun["endTimeUnixNano"]) - int(rerun["startTimeUnixNano"])) == 4 * 10**9
    [chat] = [s for s in spans if s["name"] == "chat"]
    assert chat["attrs"]["server.address"] == "h" and chat["attrs"]["server.port"] == 9
    [compaction] = [s for s in spans if s["name"] == "compaction"]  # its summary request's time
    assert int(compaction["endTimeUnixNano"]) - int(compaction["startTimeUnixNano"]) == 5 * 10**9
    assert compaction["attrs"]["marathon.compaction.tokens_after"] == 300
    [phase] = [s for s in spans if s["name"] == "phase p"]
    assert phase["attrs"]["marathon.span.open"] is True
    assert [e["name"] for e in phase["events"]] == ["run_resumed"]


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: decodes each request with OpenTelemetry's protobuf classes."""

    received: list[Any]

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).received.append((self.path, self.headers, request))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Any]]]:
    handler = type("Receiver", (_Receiver,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.received
    finally:
        server.shutdown()
        server.server_close()


@needs_otel
def test_endpoint_gets_the_same_spans_over_otlp_http(
    finished_run: tuple[Path, str, int],
    tmp_path: Path,
    receiver: tuple[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, run_id, _ = finished_run
    url, received = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=marathon")
    result = invoke("trace", run_id, "--db", f"sqlite:///{db}", "--endpoint", url)
    assert result.exit_code == 0, result.output
    [(path, headers, request)] = received
    assert path == "/v1/traces"
    assert (headers["Content-Type"], headers["x-team"]) == ("application/x-protobuf", "marathon")
    export(db, run_id, tmp_path / "t.jsonl")
    [line] = (tmp_path / "t.jsonl").read_text().splitlines()
    assert otlp_json(request) == json.loads(line), "the file holds what the wire carried"
    assert len(spans_of(line)) == sum(
        len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans
    )


@needs_otel
def test_without_endpoint_nothing_is_sent_whatever_the_otel_variables_say(
    finished_run: tuple[Path, str, int],
    tmp_path: Path,
    receiver: tuple[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, run_id, _ = finished_run
    url, received = receiver
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.setenv(name, url)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.chdir(tmp_path)
    result = invoke("trace", run_id, "--db", f"sqlite:///{db}")
    assert result.exit_code == 0, result.output
    assert (tmp_path / f"{run_id}.otlp.jsonl").stat().st_size > 0, "the default file"
    assert received == []


@needs_otel
def test_the_file_is_what_opentelemetrys_own_otlp_json_codec_reads_and_writes(
    finished_run: tuple[Path, str, int], tmp_path: Path
) -> None:
    codec = pytest.importorskip("opentelemetry.proto_json.collector.trace.v1.trace_service")
    db, run_id, _ = finished_run
    spans = export(db, run_id, tmp_path / "t.jsonl")
    [line] = (tmp_path / "t.jsonl").read_text().splitlines()
    request = codec.ExportTraceServiceRequest.from_json(line)
    assert request.to_dict() == json.loads(line)
    decoded = [span for r in request.resource_spans for s in r.scope_spans for span in s.spans]
    assert [(d.span_id.hex(), d.trace_id.hex(), d.name) for d in decoded] == [
        (s["spanId"], hex_trace_id(run_id), s["name"]) for s in spans
    ]


@needs_otel
def test_an_endpoint_nobody_listens_on_is_one_clear_error(
    finished_run: tuple[Path, str, int],
) -> None:
    db, run_id, _ = finished_run
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = invoke(
        "trace",
        run_id,
        "--db",
        f"sqlite:///{db}",
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--timeout",
        "2",
    )
    assert result.exit_code == 2
    assert "did not take the trace" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--out", "x.jsonl", "--endpoint", "http://127.0.0.1:4318"], "not both"),
        (["--endpoint", "127.0.0.1:4318"], "is not an http(s) URL"),
    ],
)
def test_bad_options_are_refused_before_anything_is_read(args: list[str], said: str) -> None:
    result = invoke("trace", "abc", "--db", "sqlite:////nonexistent/dir/m.db", *args)
    assert result.exit_code == 2
    assert said in result.output and "Traceback" not in result.output


@needs_otel
def test_an_unknown_run_is_named(finished_run: tuple[Path, str, int]) -> None:
    db, _, _ = finished_run
    result = invoke("trace", "zzzz", "--db", f"sqlite:///{db}")
    assert result.exit_code == 2 and "zzzz" in result.output


_WITHOUT_OTEL = """
import importlib.abc, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
from pilot.front.cli import app
from pilot.run.launch import resume_run
from pilot.run.runner import Runner
app(sys.argv[1:], prog_name="pilot")
"""


def test_without_the_extra_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL, "trace", "abc", "--db", f"sqlite:///{tmp_path}/m.db"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "pip install 'marathon[otel]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_pilot_help_does_not_import_opentelemetry() -> None:
    code = (
        "import sys\n"
        "from pilot.front.cli import app\n"
        "try:\n    app(['--help'], prog_name='pilot')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "trace" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_command_help_names_the_extra() -> None:
    result = invoke("trace", "--help")
    assert result.exit_code == 0
    assert "pip install" in result.output and "'marathon[otel]'" in result.output


@needs_otel
def test_a_run_with_no_events_yet_has_nothing_to_trace(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    run_id = store.create_run(
        workflow_name="wf",
        workflow_path="wf.yaml",
        workflow_text="",
        params={},
        workspace="",
        owner=None,
        status="queued",
    )
    result = invoke("trace", run_id, "--db", f"sqlite:///{tmp_path / 'm.db'}")
    assert result.exit_code == 2
    assert "has no events yet" in result.output and "Traceback" not in result.output


@needs_otel
def test_the_export_bench_runs_and_reports_sane_figures(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    bench = ["bench.trace_export", "--events", "300", "--repeat", "1", "--json", str(out)]
    subprocess.run(
        [sys.executable, "-m", *bench],
        cwd=Path(__file__).resolve().parent.parent,
        check=True,
        capture_output=True,
        timeout=240,
    )
    [row] = json.loads(out.read_text())["rows"]
    assert 290 <= row["events"] <= 310 and row["spans"] > row["events"] / 3
    for key in ("read_ms_per_1k", "build_ms_per_1k", "encode+write_ms_per_1k", "command_s"):
        assert 0 < row[key] < 1e6, (key, row)
    assert row["file_bytes_per_event"] > 100
