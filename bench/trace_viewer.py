"""A real run's trace, opened in a real viewer: ``pilot trace`` into Arize Phoenix.

A short run goes through ``pilot run`` against the simulated vLLM: two phases, a tool call that
fails, a check that fails and then passes, and two requests the server answers 503 (waited
out, then answered). Its trace is written as OTLP JSON lines (``--out``, kept under
``bench/figures``) and sent with ``pilot trace --endpoint`` to the viewer's OTLP/HTTP
receiver; then the viewer's own REST listing of the trace's spans is saved, and headless
Chromium takes a screenshot of the trace's page. Every address is on loopback; Chromium
resolves no other host.

Phoenix (``pip install arize-phoenix`` in a venv of its own) is started apart, on loopback,
telemetry off (see bench/README.md)::

    .venv/bin/python -m bench.trace_viewer --viewer http://127.0.0.1:16006
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.chaos_common import make_repo, pilot_cmd, pilot_env, run_id_of
from brain.sim.config import FaultRule, SimConfig
from brain.sim.server import running_sim

FIGURES = Path(__file__).resolve().parent / "figures"
KEY = "trace-viewer"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


TURNS = [
    {"content": "Looking first.", "tool_calls": [call("read_file", path="src/app.py")]},
    {"tool_calls": [call("read_file", path="src/missing.py")]},
    {"tool_calls": [call("finish", summary="src/app.py holds VALUE = 1")]},
    {"tool_calls": [call("edit_file", path="src/app.py", old="VALUE = 1", new="VALUE = 3")]},
    {"tool_calls": [call("finish", summary="bumped")]},
    {
        "when": "Check failed",
        "tool_calls": [call("edit_file", path="src/app.py", old="VALUE = 3", new="VALUE = 2")],
    },
    {"tool_calls": [call("git_commit", message="Set VALUE to 2")]},
    {"tool_calls": [call("finish", summary="VALUE is 2, committed")]},
]


def write_inputs(root: Path, endpoint: str) -> Path:
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump({"conversations": [{"key": KEY, "turns": TURNS}]}))
    workflow = root / "wf.yaml"
    workflow.write_text(
        yaml.safe_dump(
            {
                "name": "bump-value",
                "params": {"repo": {"type": "path", "required": True}},
                "model": {"endpoint": endpoint, "name": "auto", "server_wait": 30},
                "workspace": {"path": "{{ params.repo }}"},
                "tools": ["read_file", "edit_file", "git_commit", "finish"],
                "sandbox": "none",
                "system": f"Conversation {KEY}. Work with the tools.",
                "phases": [
                    {"name": "look", "prompt": "Look around.", "tools": ["read_file", "finish"]},
                    {
                        "name": "change",
                        "prompt": "Set VALUE to 2 and commit.",
                        "check": "grep -q 'VALUE = 2' src/app.py",
                    },
                ],
            },
            sort_keys=False,
        )
    )
    return workflow


def run(root: Path) -> tuple[Path, str]:
    """The run, through ``pilot run``; returns the store and the run id."""
    repo, db = make_repo(root / "repo"), root / "m.db"
    script = root / "script.yaml"
    write_inputs(root, "http://127.0.0.1:1/v1")  # the script first: the sim reads it
    outage = [FaultRule(kind="http_503", at=[4, 5])]
    config = SimConfig(
        model="sim-model", max_model_len=32768, policy=f"script:{script}", faults=outage
    )
    with running_sim(config) as sim:
        workflow = write_inputs(root, sim.openai_base_url)
        args = ["run", str(workflow), "--param", f"repo={repo}", "--db", f"sqlite:///{db}"]
        done = subprocess.run(
            pilot_cmd(*args), env=pilot_env(root / "home"), capture_output=True, text=True
        )
    if done.returncode != 0:
        sys.exit(f"the run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return db, run_id_of(db)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


def listing(viewer: str, trace_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The project's id and the viewer's own records of the trace's spans."""
    [project] = [p for p in get_json(f"{viewer}/v1/projects")["data"] if p["name"] == "default"]
    spans = get_json(f"{viewer}/v1/projects/default/spans?limit=1000")["data"]
    return project["id"], [s for s in spans if s["context"]["trace_id"] == trace_id]


def describe(spans: list[dict[str, Any]]) -> str:
    """The viewer's records as an indented tree: name, its kind, status, key attributes."""
    by_id = {s["context"]["span_id"]: s for s in spans}
    keys = (
        "gen_ai.operation.name",
        "gen_ai.request.model",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.tool.call.id",
        "server.address",
        "server.port",
    )

    def depth(span: dict[str, Any]) -> int:
        parent = span.get("parent_id")
        return 0 if parent not in by_id else 1 + depth(by_id[parent])

    lines = []
    for span in sorted(spans, key=lambda s: (s["start_time"], depth(s))):
        shown = {k: span["attributes"][k] for k in keys if k in span["attributes"]}
        status = span["status_code"] + (
            f" ({span['status_message']})" * bool(span["status_message"])
        )
        lines.append(
            f"{'  ' * depth(span)}{span['name']}  [{span['span_kind']}, {status}]  "
            + json.dumps(shown)
            + (f"  events: {[e['name'] for e in span['events']]}" if span["events"] else "")
        )
    return "\n".join(lines)


def screenshot(url: str, png: Path) -> None:
    subprocess.run(
        [
            "/usr/bin/chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--window-size=1600,1000",
            "--virtual-time-budget=15000",
            f"--screenshot={png}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewer", default="http://127.0.0.1:16006", help="Phoenix's URL.")
    parser.add_argument("--out", type=Path, default=FIGURES, help="Where the figures go.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-trace-viewer-") as tmp:
        db, run_id = run(Path(tmp))
        store = ["--db", f"sqlite:///{db}"]
        trace_file = args.out / "trace-run.otlp.jsonl"
        for extra in (["--out", str(trace_file)], ["--endpoint", args.viewer]):
            done = subprocess.run(
                pilot_cmd("trace", run_id, *store, *extra), capture_output=True, text=True
            )
            print(done.stderr.strip())
            if done.returncode != 0:
                sys.exit(done.returncode)
    trace_id = json.loads(trace_file.read_text().splitlines()[0])["resourceSpans"][0]["scopeSpans"][
        0
    ]["spans"][0]["traceId"]
    project, spans = listing(args.viewer, trace_id)
    text = f"Phoenix's listing of trace {trace_id} ({len(spans)} spans)\n\n{describe(spans)}\n"
    (args.out / "trace-phoenix-listing.txt").write_text(text)
    print(text)
    screenshot(
        f"{args.viewer}/projects/{project}/traces/{trace_id}", args.out / "trace-phoenix.png"
    )
    print(f"wrote {args.out / 'trace-phoenix.png'}")


if __name__ == "__main__":
    main()
