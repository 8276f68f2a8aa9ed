"""The morning report as one JSON document (``pilot report --json``), for scripts and dashboards.

Its shape is versioned: ``"schema": "marathon.report/1"``. Every field of ``pilot.report.facts``
is written under its own name (times as ISO 8601 with their zone, counters as objects, pairs as
lists) plus the derived figures the Markdown shows (``working_s``, ``phases_succeeded``,
``compactions``...). Adding a field keeps the version; renaming or removing one, or changing a
value's meaning, raises it: ``tests/test_pilot_cli_json.py`` pins the keys of version 1.
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from pilot.report.facts import Report, RunReport, tests_text

SCHEMA = "marathon.report/1"

_DERIVED = (
    "working_s",
    "downtime_s",
    "compactions",
    "loops_caught",
    "phases_succeeded",
    "unfinished",
)
"""The RunReport properties written beside its fields (the Markdown's figures)."""


def _plain(value: Any) -> Any:
    """A facts value as JSON data: dataclasses by field, datetimes in ISO 8601."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def run_document(run: RunReport) -> dict[str, Any]:
    """One run's facts, its derived figures and its test-runs cell."""
    doc: dict[str, Any] = _plain(run)
    for name in _DERIVED:
        doc[name] = getattr(run, name)
    doc["test_runs"] = tests_text(run)
    return doc


def render_json(report: Report) -> str:
    """The whole report: schema, when, the window or runs asked for, and each run."""
    doc = {
        "schema": SCHEMA,
        "generated_at": report.generated_at.isoformat(),
        "since": report.since.isoformat() if report.since else None,
        "runs": [run_document(run) for run in report.runs],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"
