"""The morning report as one self-contained HTML page: inline CSS, inline SVG, no scripts.

The page must open on an air-gapped machine, so nothing is fetched: no fonts, no stylesheets,
no plotting library. The timeline plot (steps over wall time, server downtime shaded, phase
boundaries marked) is SVG written here. Only renders ``pilot.report.facts.Report``; reads nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from html import escape

from pilot.front.lines import format_duration
from pilot.report.facts import (
    OVERVIEW_COLUMNS,
    Interval,
    Report,
    RunReport,
    endpoint_text,
    hms,
    overview_rows,
    plural,
    stamp,
)

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
       max-width: 1100px; color: #1b1f24; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-top: 1px solid #d0d7de;
       padding-top: 18px; } h3 { font-size: 15px; margin-bottom: 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
code, pre { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; }
.muted { color: #57606a; }
.status { font-weight: 600; padding: 1px 6px; border-radius: 4px; }
.succeeded { background: #dafbe1; color: #116329; }
.failed, .limit, .cancelled, .interrupted, .unfinished { background: #ffebe9; color: #a40e26; }
.paused, .running, .queued, .in { background: #fff8c5; color: #7d4e00; }
.fail { color: #a40e26; font-weight: 600; } .pass { color: #116329; }
svg.timeline { background: #fff; border: 1px solid #d0d7de; }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: -2px;
          margin-right: 4px; }
"""

_W, _H = 900, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 50, 20, 22, 34


def render_html(report: Report) -> str:
    title = "Marathon report"
    if report.since is not None:
        title += f": {len(report.runs)} run(s) since {stamp(report.since)}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">Generated {escape(stamp(report.generated_at))} from the run '
        "store's recorded events and git; nothing here is the model's own account.</p>",
    ]
    if report.since is not None or len(report.runs) > 1:
        parts.append(_overview(report))
    for run in report.runs:
        parts.append(_run_section(run))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _overview(report: Report) -> str:
    counts = Counter(run.status for run in report.runs)
    line = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no runs"
    rows = []
    for run, row in zip(report.runs, overview_rows(report), strict=True):
        cells = [f'<td><a href="#run-{escape(run.run_id)}">{escape(row[0])}</a></td>']
        cells.append(f"<td>{escape(row[1])}</td>")
        cells.append(f'<td><span class="status {escape(run.status)}">{escape(row[2])}</span></td>')
        cells += [f"<td>{escape(c)}</td>" for c in row[3:-1]]
        cells.append(f"<td><code>{escape(row[-1])}</code></td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "".join(f"<th>{escape(c)}</th>" for c in OVERVIEW_COLUMNS)
    return (
        f'<p>{escape(line)}</p><table class="summary"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _run_section(run: RunReport) -> str:
    rid = escape(run.run_id)
    out = [
        f'<section class="run" id="run-{rid}" data-status="{escape(run.status)}">',
        f'<h2>Run {rid}: {escape(run.workflow)} <span class="status {escape(run.status)}">'
        f"{escape(run.status)}</span></h2>",
        f"<p><b>Outcome:</b> {escape(run.status)}"
        + (f": {escape(run.reason)}" if run.reason else "")
        + "</p>",
    ]
    facts = []
    if run.first_at and run.last_at:
        facts.append(f"{stamp(run.first_at)} to {stamp(run.last_at)}")
        facts.append(
            f"wall {format_duration(run.wall_s)}; driven {format_duration(run.active_s)} "
            f"(working {format_duration(run.working_s)}, waiting on the server "
            f"{format_duration(run.waiting_s)})"
        )
    facts.append(
        f"{run.steps} steps; tokens {run.prompt_tokens} in / {run.completion_tokens} out"
        + (f"; model {run.model}" if run.model else "")
    )
    if endpoints := endpoint_text(run):
        facts.append(endpoints)
    if run.git is not None:
        facts.append(f"workspace {run.git.workspace}, branch {run.git.branch}")
    if run.sandbox:
        facts.append(f"sandbox: {run.sandbox}")
    out.append("<ul>" + "".join(f"<li>{escape(f)}</li>" for f in facts) + "</ul>")
    if run.step_times or run.phase_marks:
        out.append(timeline_svg(run))
    out.append(_phases(run))
    out.append(_tests(run))
    out.append(_changes(run))
    out.append(_tools(run))
    out.append(_interventions(run))
    out.append(_server(run))
    if run.next_commands:
        out.append("<h3>Next</h3><ul>")
        out += [f"<li><code>{escape(c)}</code></li>" for c in run.next_commands]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _table(headers: list[str], rows: list[list[str]], css: str = "") -> str:
    """Cells are already-escaped HTML."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _phases(run: RunReport) -> str:
    if not run.phases:
        return ""
    rows = []
    for p in run.phases:
        attempts = f"{p.check_attempts} ({p.checks_passed} passed)" if p.check_attempts else ""
        rows.append(
            [
                str(p.index + 1),
                escape(p.name),
                f'<span class="status {escape(p.outcome.split()[0])}">{escape(p.outcome)}</span>',
                str(p.steps),
                attempts,
                escape(p.reason or p.summary),
            ]
        )
    html = "<h3>Phases</h3>" + _table(
        ["#", "phase", "outcome", "steps", "check attempts", "note"], rows, "phases"
    )
    judged = [p for p in run.phases if p.evidence]
    if judged:
        items = "".join(f"<li>{escape(p.name)}: {escape(p.evidence)}</li>" for p in judged)
        html += f"<h3>Evidence</h3><ul class='evidence'>{items}</ul>"
    modes = [*run.call_modes, *(f"chosen: {line}" for line in run.call_choices)]
    if modes:
        items = "".join(f"<li>{escape(line)}</li>" for line in modes)
        html += f"<h3>Call modes</h3><ul class='call-modes'>{items}</ul>"
    for c in run.checks:
        verdict = "passed" if c.passed else ("timed out" if c.timed_out else "failed")
        css = "pass" if c.passed else "fail"
        html += (
            f"<p>{escape(c.phase_name)} check, attempt {c.attempt}: <code>{escape(c.command)}"
            f'</code> <span class="{css}">{verdict}</span> (exit {c.exit_code}, '
            f"{c.duration_s:.1f}s)</p>"
        )
        if not c.passed and c.output_head:
            html += f"<pre>{escape(chr(10).join(c.output_head))}</pre>"
    return html


def _tests(run: RunReport) -> str:
    if not run.tests:
        return "<h3>Tests run</h3><p class='muted'>No test command or check was run.</p>"
    rows = []
    for t in run.tests:
        who = f"model (step {t.step})" if t.source == "tool" and t.step else t.source
        code = "timed out" if t.timed_out else f"exit {t.exit_code}"
        verdict = f'<span class="{"pass" if t.passed else "fail"}">' + (
            f"{'pass' if t.passed else 'FAIL'}</span> ({code})"
        )
        rows.append([hms(t.at), escape(who), f"<code>{escape(t.command)}</code>", verdict])
    return "<h3>Tests run</h3>" + _table(["time", "by", "command", "result"], rows, "tests")


def _changes(run: RunReport) -> str:
    git = run.git
    if git is None:
        return ""
    html = "<h3>Changes</h3>"
    if git.note:
        html += f"<p class='muted'><i>{escape(git.note)}</i></p>"
    html += f"<p>{len(git.commits)} commit(s) on <code>{escape(git.branch)}</code>:</p>"
    if git.commits:
        html += (
            "<ul class='commits'>"
            + "".join(
                f"<li><code>{escape(c.sha[:10])}</code> {escape(c.subject)}</li>"
                for c in git.commits
            )
            + "</ul>"
        )
    if git.stat:
        html += (
            f"<p>Diff, first to last snapshot: {plural(git.files_changed, 'file')}, "
            f"+{git.insertions} -{git.deletions}</p><pre>{escape(git.stat)}</pre>"
        )
    return html


def _tools(run: RunReport) -> str:
    if not run.tools:
        return ""
    rows = [[escape(t.name), str(t.calls), str(t.errors), str(t.not_executed)] for t in run.tools]
    html = "<h3>Tool calls</h3>" + _table(["tool", "calls", "errors", "not run"], rows, "tools")
    if run.tool_failures:
        items = "".join(
            f"<li>{'step ' + str(f.step) + ' ' if f.step is not None else ''}"
            f"<code>{escape(f.name)}</code>: {escape(f.first_line)}</li>"
            for f in run.tool_failures[:15]
        )
        html += f"<ul class='failures'>{items}</ul>"
    return html


def _interventions(run: RunReport) -> str:
    items = [
        f"repairs {len(run.repairs)}",
        f"compactions {run.compactions}",
        f"loops caught {run.loops_caught}",
        f"questions {len(run.questions)}",
        f"workspace restores {len(run.restores)}",
    ]
    html = f"<h3>Interventions</h3><p>{escape('; '.join(items))}</p>"
    details = [f"step {step}: {repair}" for step, repair in run.repairs[:10]]
    details += [f"question at {hms(q.at)}: {q.detail}" for q in run.questions]
    if details:
        html += "<ul>" + "".join(f"<li>{escape(d)}</li>" for d in details) + "</ul>"
    return html


_LABEL_ROW = 13
_CHAR_W = 6.5
"""Row height and a generous character width of the 11 px labels, to keep them apart."""


def label_rows(marks: Sequence[tuple[datetime, str]], x: Callable[[datetime], float]) -> list[int]:
    """The row of each phase label: the first row where it starts after the end of that row's
    last label (so labels of phases started close together never overlap)."""
    ends: list[float] = []
    rows = []
    for at, name in marks:
        left = x(at) + 3
        row = next((i for i, end in enumerate(ends) if left >= end + 4), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = left + len(name) * _CHAR_W
        rows.append(row)
    return rows


def _server(run: RunReport) -> str:
    if not run.server_notes and not run.downtime:
        return "<h3>Server</h3><p class='muted'>No server trouble recorded.</p>"
    html = (
        f"<h3>Server</h3><p>Waited on the server {format_duration(run.waiting_s)} over "
        f"{len(run.waiting)} outage(s); the brain recorded {run.server_deaths} death(s), "
        f"{run.server_restarts} restart(s), downtime {format_duration(run.downtime_s)}.</p>"
    )
    items = []
    for note in run.server_notes[:30]:
        who = "run" if note.source == "run" else f"brain {note.source}"
        detail = f": {note.detail}" if note.detail else ""
        items.append(f"<li>{escape(hms(note.at))} {escape(who)} {escape(note.type + detail)}</li>")
    return html + "<ul>" + "".join(items) + "</ul>"


# -- the timeline plot ---------------------------------------------------------------------------


def timeline_svg(run: RunReport) -> str:
    """Cumulative steps against wall time; waiting, downtime and pauses shaded; phases marked."""
    start = run.first_at or (run.step_times[0] if run.step_times else run.created_at)
    end = run.last_at or start
    span = max((end - start).total_seconds(), 1.0)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    top_steps = max(run.steps, 1)

    def x(at: datetime) -> float:
        offset = min(max((at - start).total_seconds(), 0.0), span)
        return round(_LEFT + offset / span * plot_w, 1)

    def y(steps: int) -> float:
        return round(_TOP + plot_h - steps / top_steps * plot_h, 1)

    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" data-run="{escape(run.run_id)}" data-steps="{run.steps}" '
        f'role="img" aria-label="steps over time for run {escape(run.run_id)}">'
    ]

    def band(interval: Interval, css: str, color: str, opacity: float, half: str = "") -> None:
        """Shade an interval; ``half`` puts it in the upper or lower half so overlaps show."""
        x0, x1 = x(interval.start), x(interval.end)
        width = max(x1 - x0, 1.0)
        top, height = _TOP, plot_h
        if half:
            height = plot_h / 2
            top = _TOP if half == "upper" else _TOP + height
        tip = f"{interval.label}: {format_duration(interval.seconds)}"
        parts.append(
            f'<rect class="{css}" x="{x0}" y="{top}" width="{round(width, 1)}" '
            f'height="{height}" fill="{color}" fill-opacity="{opacity}">'
            f"<title>{escape(tip)}</title></rect>"
        )

    for interval in run.pauses:
        band(interval, "paused", "#8c959f", 0.25)
    for interval in run.waiting:
        band(interval, "waiting", "#fb8f44", 0.45, "upper")
    for interval in run.downtime:
        band(interval, "downtime", "#cf222e", 0.3, "lower")

    # Axes, ticks and labels.
    base_y = _TOP + plot_h
    parts.append(
        f'<line x1="{_LEFT}" y1="{base_y}" x2="{_LEFT + plot_w}" y2="{base_y}" stroke="#57606a"/>'
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{base_y}" stroke="#57606a"/>'
    )
    for i in range(5):
        at = start + (end - start) * (i / 4)
        tx = x(at)
        anchor = "start" if i == 0 else ("end" if i == 4 else "middle")
        parts.append(
            f'<line x1="{tx}" y1="{base_y}" x2="{tx}" y2="{base_y + 4}" stroke="#57606a"/>'
            f'<text x="{tx}" y="{base_y + 16}" font-size="11" text-anchor="{anchor}" '
            f'fill="#57606a">{escape(_hm(at, span))}</text>'
        )
    for value in sorted({0, top_steps // 2, top_steps}):
        ty = y(value)
        parts.append(
            f'<text x="{_LEFT - 6}" y="{ty + 4}" font-size="11" text-anchor="end" '
            f'fill="#57606a">{value}</text>'
            f'<line x1="{_LEFT}" y1="{ty}" x2="{_LEFT + plot_w}" y2="{ty}" stroke="#eaeef2"/>'
        )
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP - 8}" font-size="11" fill="#57606a">steps</text>'
        f'<text x="{_LEFT + plot_w}" y="{_H - 2}" font-size="11" text-anchor="end" '
        f'fill="#57606a">wall time ({escape(format_duration(span))})</text>'
    )

    # Phase boundaries; a label that would run into the previous one goes a row lower.
    for (at, name), row in zip(run.phase_marks, label_rows(run.phase_marks, x), strict=True):
        px = x(at)
        parts.append(
            f'<line class="phase" x1="{px}" y1="{_TOP}" x2="{px}" y2="{base_y}" '
            f'stroke="#8250df" stroke-dasharray="4 3"><title>{escape(name)}</title></line>'
            f'<text x="{px + 3}" y="{_TOP + 11 + row * _LABEL_ROW}" font-size="11" '
            f'fill="#8250df">{escape(name)}</text>'
        )

    # The step curve, as stairs: the count rises at each assistant message.
    points = [(x(start), y(0))]
    count = 0
    for at in run.step_times:
        px = x(at)
        points.append((px, y(count)))
        count += 1
        points.append((px, y(count)))
    points.append((x(end), y(count)))
    path = " ".join(f"{px},{py}" for px, py in points)
    parts.append(
        f'<polyline class="steps" points="{path}" fill="none" stroke="#0969da" stroke-width="2"/>'
    )
    parts.append("</svg>")
    legend = (
        '<div class="legend muted">'
        '<span><i class="swatch" style="background:#0969da"></i>steps</span>'
        '<span><i class="swatch" style="background:#fb8f44;opacity:.6"></i>run waiting on '
        "the server (upper half)</span>"
        '<span><i class="swatch" style="background:#cf222e;opacity:.4"></i>server down '
        "(brain, lower half)</span>"
        '<span><i class="swatch" style="background:#8c959f;opacity:.5"></i>not running '
        "(paused)</span>"
        '<span><i class="swatch" style="border-left:2px dashed #8250df"></i>phase start</span>'
        "</div>"
    )
    return "<h3>Timeline</h3>" + "".join(parts) + legend


def _hm(value: datetime, span: float) -> str:
    return value.astimezone().strftime("%H:%M:%S" if span < 600 else "%H:%M")
