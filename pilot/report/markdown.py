"""The morning report as Markdown: the facts of ``pilot.report.facts``, written out as text."""

from __future__ import annotations

from collections import Counter

from pilot.front.lines import format_duration
from pilot.report.facts import (
    COMPACTION,
    LOOP_DETECTED,
    OVERVIEW_COLUMNS,
    QUESTION,
    Report,
    RunReport,
    endpoint_text,
    hms,
    overview_rows,
    plural,
    stamp,
)


def _md(text: object) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(report: Report) -> str:
    out: list[str] = []
    generated = stamp(report.generated_at)
    if report.since is not None:
        out.append(f"# Marathon report: {len(report.runs)} run(s) since {stamp(report.since)}")
    else:
        out.append("# Marathon report")
    out.append("")
    out.append(
        f"Generated {generated} from the run store's recorded events and git; nothing here is "
        "the model's own account."
    )
    out.append("")
    if report.since is not None or len(report.runs) > 1:
        counts = Counter(run.status for run in report.runs)
        out.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no runs")
        out.append("")
        if report.runs:
            out.append("| " + " | ".join(OVERVIEW_COLUMNS) + " |")
            out.append("|" + "---|" * len(OVERVIEW_COLUMNS))
            for row in overview_rows(report):
                out.append("| " + " | ".join(_md(c) if c else "" for c in row) + " |")
            out.append("")
    for run in report.runs:
        out.extend(_run_markdown(run))
    return "\n".join(out).rstrip() + "\n"


def _run_markdown(run: RunReport) -> list[str]:
    out = [f"## Run {run.run_id}: {run.workflow}: {run.status}", ""]
    out.append(f"**Outcome:** {run.status}" + (f": {run.reason}" if run.reason else ""))
    out.append("")
    facts = []
    if run.first_at and run.last_at:
        facts.append(f"- Time: {stamp(run.first_at)} to {stamp(run.last_at)}")
        facts.append(
            f"- Wall {format_duration(run.wall_s)}; driven {format_duration(run.active_s)} "
            f"(working {format_duration(run.working_s)}, waiting on the server "
            f"{format_duration(run.waiting_s)}); not running "
            f"{format_duration(max(0.0, run.wall_s - run.active_s))}"
        )
    else:
        facts.append(f"- Created {stamp(run.created_at)}; no events recorded")
    facts.append(
        f"- Steps {run.steps}; tokens {run.prompt_tokens} in / {run.completion_tokens} out"
        + (f"; model {run.model}" if run.model else "")
    )
    if endpoints := endpoint_text(run):
        facts.append(f"- {endpoints[0].upper()}{endpoints[1:]}")
    if run.git is not None:
        facts.append(f"- Workspace {run.git.workspace}, branch `{run.git.branch}`")
    if run.sandbox:
        facts.append(f"- Sandbox: {run.sandbox}")
    if run.params:
        params = ", ".join(f"{k}={v}" for k, v in run.params.items())
        facts.append(f"- Params: {_md(params)}")
    out.extend([*facts, ""])

    if run.phases:
        out += ["### Phases", "", "| # | phase | outcome | steps | check attempts | note |"]
        out.append("|---|---|---|---|---|---|")
        for p in run.phases:
            note = p.reason or p.summary
            attempts = f"{p.check_attempts} ({p.checks_passed} passed)" if p.check_attempts else ""
            out.append(
                f"| {p.index + 1} | {_md(p.name)} | {p.outcome} | {p.steps} | {attempts} | "
                f"{_md(note)} |"
            )
        out.append("")
        judged = [p for p in run.phases if p.evidence]
        if judged:
            out += ["### Evidence", ""]
            out += [f"- {_md(p.name)}: {_md(p.evidence)}" for p in judged]
            out.append("")
    if run.call_modes or run.call_choices:
        out += ["### Call modes", ""]
        out += [f"- {_md(line)}" for line in run.call_modes]
        out += [f"- chosen: {_md(line)}" for line in run.call_choices]
        out.append("")
    if run.checks:
        out += ["### Checks", ""]
        for c in run.checks:
            verdict = "passed" if c.passed else ("timed out" if c.timed_out else "failed")
            out.append(
                f"- {c.phase_name} attempt {c.attempt}: `{c.command}` {verdict} "
                f"(exit {c.exit_code}, {c.duration_s:.1f}s)"
            )
            if not c.passed and c.output_head:
                out.append("")
                out.extend(f"      {line}" for line in c.output_head)
                out.append("")
        out.append("")
    if run.tests:
        out += ["### Tests run", "", "| time | by | command | result |", "|---|---|---|---|"]
        for t in run.tests:
            who = f"model (step {t.step})" if t.source == "tool" and t.step else t.source
            result = "timed out" if t.timed_out else f"exit {t.exit_code}"
            result = f"{'pass' if t.passed else 'FAIL'} ({result})"
            out.append(f"| {hms(t.at)} | {who} | `{_md(t.command)}` | {result} |")
        out.append("")
    if run.git is not None:
        git = run.git
        out += ["### Changes", ""]
        if git.note:
            out += [f"_{git.note}_", ""]
        short = (git.base_head or "?")[:10]
        out.append(f"{len(git.commits)} commit(s) on `{git.branch}` since {short}:")
        out.extend(f"- {c.sha[:10]} {c.subject}" for c in git.commits)
        if git.branch_tip and git.head and git.branch_tip != git.head:
            out.append(
                f"- (the branch has moved since the run: now {git.branch_tip[:10]}, "
                f"run recorded {git.head[:10]})"
            )
        out.append("")
        if git.stat:
            out.append(
                "Diff of the workspace, first to last snapshot: "
                f"{plural(git.files_changed, 'file')}, +{git.insertions} -{git.deletions}"
            )
            out += ["", "```", git.stat, "```", ""]
        elif not git.note:
            out += ["No change to the workspace.", ""]
    if run.tools:
        out += ["### Tool calls", "", "| tool | calls | errors | not run |", "|---|---|---|---|"]
        for t in run.tools:
            out.append(f"| {t.name} | {t.calls} | {t.errors} | {t.not_executed} |")
        out.append("")
        for failure in run.tool_failures[:15]:
            step = f"step {failure.step} " if failure.step is not None else ""
            out.append(f"- {step}`{failure.name}` failed: {_md(failure.first_line)}")
        if len(run.tool_failures) > 15:
            out.append(f"- ... and {len(run.tool_failures) - 15} more (`pilot show {run.run_id}`)")
        if run.interrupted_tools:
            out.append(f"- started, never finished: {', '.join(run.interrupted_tools)}")
        out.append("")
    out += _harness_markdown(run)
    out += _server_markdown(run)
    if run.next_commands:
        out += ["### Next", ""]
        out.extend(f"- `{command}`" for command in run.next_commands)
        out.append("")
    return out


def _harness_markdown(run: RunReport) -> list[str]:
    out = ["### Interventions", ""]
    out.append(
        f"- Repairs of malformed tool calls: {len(run.repairs)}; compactions: {run.compactions}; "
        f"loops caught: {run.loops_caught}; questions: {len(run.questions)}; "
        f"workspace restores: {len(run.restores)}"
    )
    for step, repair in run.repairs[:10]:
        out.append(f"  - step {step}: {_md(repair)}")
    if run.nudges:
        nudges = ", ".join(f"{reason} x{n}" for reason, n in sorted(run.nudges.items()))
        out.append(f"- Nudges: {nudges}")
    for question in run.questions:
        out.append(f"- Question at {hms(question.at)}: {_md(question.detail)}")
    others = Counter(
        e.type for e in run.unknown_events if e.type not in (QUESTION, COMPACTION, LOOP_DETECTED)
    )
    if others:
        listed = ", ".join(f"{t} x{n}" for t, n in sorted(others.items()))
        out.append(f"- Other recorded events: {listed}")
    if run.unreadable_events:
        out.append(f"- Unreadable events (kept, not interpreted): {run.unreadable_events}")
    out.append("")
    return out


def _server_markdown(run: RunReport) -> list[str]:
    if not run.server_notes and not run.downtime:
        return ["### Server", "", "No server trouble recorded.", ""]
    out = ["### Server", ""]
    out.append(
        f"Waited on the server {format_duration(run.waiting_s)} over {len(run.waiting)} "
        f"outage(s); the brain recorded {run.server_deaths} death(s), {run.server_restarts} "
        f"restart(s), downtime {format_duration(run.downtime_s)}."
    )
    out.append("")
    for note in run.server_notes[:30]:
        who = "run" if note.source == "run" else f"brain `{note.source}`"
        detail = f": {_md(note.detail)}" if note.detail else ""
        out.append(f"- {hms(note.at)} {who} {note.type}{detail}")
    if len(run.server_notes) > 30:
        out.append(f"- ... and {len(run.server_notes) - 30} more")
    out.append("")
    return out
