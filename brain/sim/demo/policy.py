"""The demo agent: a small rule-based "model" that really refactors the sample repository.

It decides every turn from the conversation alone, so it is deterministic and resumable:

1. The current phase is the last user message starting ``Phase <i>/<n>: <name>``.
2. The anchor is that message, or a later user message starting ``Check failed:``.
3. Each phase has a fixed plan of tool calls. A step is done when an assistant message after
   the anchor already made that exact call (same name, same arguments), whatever its result:
   a result starting ``Error:`` is not retried, the plan just moves on, so it never loops.
4. The next step is the first one not done; when all are, it calls ``finish`` again.

Plans (paths relative to the workspace, which is a copy of ``sample_repo``):

* survey: ``list_dir .``, ``read_file billing/lines.py``, ``read_file tests/test_lines.py``,
  ``finish`` with what it found;
* refactor: ``read_file billing/lines.py``, ``edit_file`` adding ``format_amount`` under the
  module docstring, one ``edit_file`` per formatter replacing its duplicated block,
  ``run python -m unittest discover -s tests``, ``git_commit``, ``finish``;
* review: ``git_diff``, ``finish`` with a summary counting the changed lines;
* after ``Check failed:``: ``run`` the tests again (refactor phase only), then ``finish``;
* any other phase, or no phase line: ``finish`` saying there is nothing it knows to do.

Without tools in the request it answers in plain text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from brain.sim.policy import SimChatRequest, SimMessage, SimTurn, parse_phase_line

TEST_COMMAND = "python -m unittest discover -s tests"
MODULE = "billing/lines.py"

_DUPLICATED_BLOCK = (
    "    if isinstance(amount, bool) or not isinstance(amount, (int, float)):\n"
    '        raise TypeError(f"amount must be a number, got {amount!r}")\n'
    "    if amount < 0:\n"
    '        raise ValueError(f"amount must not be negative, got {amount!r}")\n'
    "    cents = round(amount * 100)\n"
    '    text = f"{cents // 100:,}.{cents % 100:02d}"\n'
)
_MODULE_DOCSTRING = '"""Plain-text lines for the billing report."""\n'
_HELPER = (
    _MODULE_DOCSTRING
    + "\n\n"
    + "def format_amount(amount):\n"
    + '    """The amount with thousands separators and two decimals; refuses bad amounts."""\n'
    + _DUPLICATED_BLOCK.replace('    text = f"', '    return f"')
)
_FORMATTER_DOCSTRINGS = {
    "invoice_line": '    """One invoice line: the customer and the amount due."""\n',
    "refund_line": '    """One refund line: the customer and the amount paid back."""\n',
    "credit_line": (
        '    """One credit line: the customer and the amount credited to their account."""\n'
    ),
}


@dataclass(frozen=True)
class Step:
    """One planned call and the sentence said with it."""

    say: str
    name: str
    arguments: dict[str, Any]


def _survey_plan() -> list[Step]:
    return [
        Step(
            "Let me look at the layout of the repository first.",
            "list_dir",
            {"path": ".", "depth": 2},
        ),
        Step("The code lives in billing/lines.py; reading it.", "read_file", {"path": MODULE}),
        Step(
            "Now the tests, to know what behaviour must not change.",
            "read_file",
            {"path": "tests/test_lines.py"},
        ),
    ]


def _refactor_plan() -> list[Step]:
    steps = [
        Step("Re-reading the module before editing it.", "read_file", {"path": MODULE}),
        Step(
            "Adding one helper, format_amount, that validates and formats an amount.",
            "edit_file",
            {"path": MODULE, "old": _MODULE_DOCSTRING, "new": _HELPER},
        ),
    ]
    for function, docstring in _FORMATTER_DOCSTRINGS.items():
        steps.append(
            Step(
                f"Making {function} use the helper instead of its own copy.",
                "edit_file",
                {
                    "path": MODULE,
                    "old": docstring + _DUPLICATED_BLOCK,
                    "new": docstring + "    text = format_amount(amount)\n",
                },
            )
        )
    steps += [
        Step("Running the unit tests.", "run", {"command": TEST_COMMAND, "timeout": 120}),
        Step(
            "Committing the refactor.",
            "git_commit",
            {"message": "Extract format_amount() from the three billing line formatters"},
        ),
    ]
    return steps


def _review_plan() -> list[Step]:
    return [Step("Let me review the whole change.", "git_diff", {"since_start": True})]


def _args_of(call: dict[str, Any]) -> tuple[str, Any] | None:
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (TypeError, ValueError):
        return None
    return str(function.get("name")), arguments


def _tool_results(messages: list[SimMessage]) -> dict[str, str]:
    return {m.tool_call_id: m.text for m in messages if m.role == "tool" and m.tool_call_id}


def _find_result(messages: list[SimMessage], name: str, arguments: dict[str, Any]) -> str | None:
    """The tool result text for the earliest call ``name(arguments)`` in ``messages``."""
    results = _tool_results(messages)
    for message in messages:
        for call in message.tool_calls or []:
            if _args_of(call) == (name, arguments):
                return results.get(str(call.get("id")))
    return None


def _is_error(text: str | None) -> bool:
    return text is None or text.lstrip().startswith("Error")


class DemoPolicy:
    """The rule-based agent of the quick start (see the module docstring for its plans)."""

    def respond(self, request: SimChatRequest) -> SimTurn:
        messages = request.messages
        if not request.tool_names():
            return SimTurn(
                content=(
                    "I am the Marathon demo agent, served by the simulated vLLM server. "
                    "Give me tools and a `Phase i/n: name` prompt and I will refactor the "
                    "sample repository."
                )
            )
        phase_at = None
        phase = None
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.role == "user" and (parsed := parse_phase_line(message.text)):
                phase_at, phase = index, parsed
                break
        if phase is None or phase_at is None:
            return self._finish(
                "No `Phase i/n: name` prompt found; the demo agent only knows the "
                "refactor_repo workflow (survey, refactor, review). Nothing done."
            )
        anchor = phase_at
        check_failed = False
        for index in range(phase_at + 1, len(messages)):
            message = messages[index]
            if message.role == "user" and message.text.lstrip().startswith("Check failed:"):
                anchor, check_failed = index, True
        since = messages[anchor + 1 :]
        name = phase[2]

        if check_failed:
            plan = [
                Step(
                    "The check failed; running the tests to see why.",
                    "run",
                    {"command": TEST_COMMAND, "timeout": 120},
                )
            ]
            plan = plan if name == "refactor" else []
        elif name == "survey":
            plan = _survey_plan()
        elif name == "refactor":
            plan = _refactor_plan()
        elif name == "review":
            plan = _review_plan()
        else:
            return self._finish(f"Phase '{name}' is not one the demo agent knows; nothing to do.")

        done = [
            _args_of(call)
            for message in since
            if message.role == "assistant"
            for call in message.tool_calls or []
        ]
        for number, step in enumerate(plan):
            if (step.name, step.arguments) not in done:
                return self._call(step, reasoning=self._reasoning(name) if number == 0 else None)
        return self._finish(self._summary(name, since, check_failed))

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def _reasoning(phase: str) -> str:
        return {
            "survey": "Survey first: find the duplicated logic and the tests that pin it.",
            "refactor": "Extract the shared block into one helper, edit each formatter, then test.",
            "review": "Read the diff and summarise it for the morning report.",
        }.get(phase, "")

    @staticmethod
    def _call(step: Step, reasoning: str | None = None) -> SimTurn:
        return SimTurn(
            content=step.say,
            reasoning=reasoning or None,
            tool_calls=((step.name, json.dumps(step.arguments, ensure_ascii=False)),),
        )

    @staticmethod
    def _finish(summary: str) -> SimTurn:
        return SimTurn(
            content="Done with this phase.",
            tool_calls=(("finish", json.dumps({"summary": summary}, ensure_ascii=False)),),
        )

    @staticmethod
    def _summary(phase: str, since: list[SimMessage], check_failed: bool) -> str:
        if check_failed:
            result = _find_result(since, "run", {"command": TEST_COMMAND, "timeout": 120})
            if phase == "refactor" and not _is_error(result):
                return "Re-ran the unit tests after the failed check; see the run output above."
            return "The check failed and the demo agent has no other fix to try; stopping here."
        if phase == "survey":
            code = _find_result(since, "read_file", {"path": MODULE})
            functions = re.findall(r"def (\w+)\(", code or "")
            found = ", ".join(functions) if functions else "invoice_line, refund_line, credit_line"
            return (
                f"{MODULE} defines {found}. Each formatter repeats the same amount validation "
                "(type and sign checks) and the same amount formatting. tests/test_lines.py "
                "pins the layout and the refused inputs. Plan: extract one format_amount() "
                "helper and call it from the three formatters; behaviour stays the same."
            )
        if phase == "refactor":
            edits = [
                _find_result(since, "edit_file", step.arguments)
                for step in _refactor_plan()
                if step.name == "edit_file"
            ]
            applied = sum(1 for text in edits if not _is_error(text))
            tests = _find_result(since, "run", {"command": TEST_COMMAND, "timeout": 120})
            verdict = (
                "the unit tests pass"
                if tests and "OK" in tests and "FAILED" not in tests
                else ("the unit test result is in the run output")
            )
            return (
                f"Extracted format_amount() in {MODULE} and made invoice_line, refund_line and "
                f"credit_line use it ({applied} of 4 edits applied); {verdict}; committed."
            )
        diff = _find_result(since, "git_diff", {"since_start": True}) or ""
        added = sum(
            1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")
        )
        removed = sum(
            1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")
        )
        return (
            f"Reviewed the change: {added} lines added, {removed} removed. The three billing "
            "line formatters now share format_amount(), which holds the validation and amount "
            "formatting once; their output and errors are unchanged and covered by the tests."
        )
