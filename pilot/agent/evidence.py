"""When a phase may be called done: the rules, judged on facts the run's events recorded.

A small model says "done" when it is not: it finishes without a call, stops in a loop, edits a
comment, deletes the test it had to satisfy, or half writes a feature whose check already
passed before it began. A phase therefore succeeds only on evidence, never on the model's
word alone (``workflows/README.md``, "When a phase succeeds"):

- **A phase with a check** needs a change to the workspace and the check passing on it. When
  the check failed before any change (its ``check_baseline``), that is enough: failed before,
  passes after. When it passed from the start, passing proves nothing, so the model's
  ``finish`` is needed too (``check_after_edit`` does not end such a phase), and every test
  file the phase's prompt names outside code spans must be among the changed files.
- **A phase with ``require_change`` and no check** needs a change and the model's finish.
- **A survey** (a phase whose tools change nothing and can read) needs the model's finish
  with a summary that names a file the run read (or changed).
- **Any other phase** (tools that may change files, and neither a check nor
  ``require_change``) needs the model's finish: give it a check for more.
- **Never evidence:** no change where one is needed; a change that deletes or skips a test or
  a doctest, or one that only touches comments (``change_guard``).

The verdict is recorded as a ``phase_evidence`` event with the facts it rests on, so
``pilot show`` and the report say what each success stands on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from tools.definitions import is_test_path

SKIP_MARKERS = (
    "pytest.mark.skip",
    "pytest.skip(",
    "unittest.skip",
    "@skip",
    "pytest.mark.xfail",
    "doctest: +skip",
    "raise unittest.SkipTest",
    "raise SkipTest",
)
"""Text an added line may hold that skips a test instead of passing it."""
_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)|^\s*class\s+(Test\w*)")
_DOCTEST = re.compile(r"^\s*>>>")


@dataclass(frozen=True)
class PhaseFacts:
    """What the events say about a phase when it asks to end."""

    has_check: bool
    require_change: bool
    baseline_passed: bool | None
    """The check before any change (None: not recorded, a run from an older pilot)."""
    check_passed: bool
    """The check passes on the workspace as it is now."""
    finish_called: bool
    summary: str = ""
    changed: bool = False
    diff: str = ""
    """The unified diff from the phase's start (empty when unknown or unchanged)."""
    files_read: tuple[str, ...] = ()
    """Files the run read or changed, as the calls named them."""
    survey: bool = False
    """The phase's tools change nothing and can read: its work is its summary."""
    named_tests: tuple[str, ...] = ()
    """Test files the phase's prompt names in its prose (:func:`prose_test_files`)."""


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    rule: str
    items: list[str] = field(default_factory=list)
    reason: str = ""
    """Why not (empty when accepted), told to the model as well."""


def judge(facts: PhaseFacts) -> Verdict:
    """The phase's verdict under the rules of the module docstring."""
    guard = change_guard(facts.diff) if facts.changed else None
    files = changed_files(facts.diff)
    changed_item = f"changed: {', '.join(files[:6]) or 'the workspace'}"
    if facts.has_check:
        if facts.baseline_passed is None:
            rule, before = "check passes after the change", "not recorded before the change"
        elif facts.baseline_passed:
            rule, before = (
                "check passed from the start: passes after the change, and finish",
                ("passed before any change"),
            )
        else:
            rule, before = (
                "check failed before the change and passes after it",
                ("failed before any change"),
            )
        items = [f"check {before}", changed_item if facts.changed else "no change"]
        if not facts.changed:
            return Verdict(False, rule, items, "no file differs from the phase's start")
        if guard is not None:
            return Verdict(False, rule, items, guard)
        if not facts.check_passed:
            return Verdict(False, rule, items, "the check does not pass")
        items.append("check passes after the change")
        if facts.baseline_passed:
            left = [t for t in facts.named_tests if t not in files]
            if left:
                return Verdict(
                    False,
                    rule,
                    items,
                    f"the task names {', '.join(left)}, and the change leaves it as it was: the "
                    "check passed before any change, so it cannot show the work is done; the "
                    "test the task asks for there can",
                )
            if facts.named_tests:
                items.append(f"named tests changed: {', '.join(facts.named_tests)}")
        if facts.baseline_passed is not False and not facts.finish_called:
            return Verdict(
                False,
                rule,
                items,
                "the check passed before the change too; the "
                "phase ends when the model calls finish",
            )
        if facts.finish_called:
            items.append("finish called")
        return Verdict(True, rule, items)
    if facts.require_change:
        rule = "a change to the workspace, and finish"
        if not facts.changed:
            return Verdict(False, rule, ["no change"], "no file differs from the phase's start")
        if guard is not None:
            return Verdict(False, rule, [changed_item], guard)
        return Verdict(facts.finish_called, rule, [changed_item, "finish called"])
    if not facts.survey:
        rule = "the model's finish, and no change that only deletes, skips or comments"
        if facts.changed and guard is not None:
            return Verdict(False, rule, [changed_item], guard)
        return Verdict(
            facts.finish_called,
            rule,
            [changed_item if facts.changed else "no change asked", "finish called"],
        )
    rule = "a survey: a summary naming files the run read"
    named = files_named(facts.summary, facts.files_read)
    if named:
        return Verdict(True, rule, [f"summary names {', '.join(named[:6])}", "finish called"])
    if not facts.summary.strip():
        why = "the summary is empty"
    elif not facts.files_read:
        why = "the run read no file, so the summary cannot rest on one"
    else:
        why = "the summary names no file the run read"
    return Verdict(False, rule, [f"files read: {len(facts.files_read)}"], why)


def files_named(summary: str, files: tuple[str, ...] | list[str]) -> list[str]:
    """The files of ``files`` that ``summary`` names, by path or by file name."""
    named = []
    for path in files:
        clean = path.strip().removeprefix("./")
        name = PurePosixPath(clean).name
        if not clean or clean in (".", "/") or len(name) < 3:
            continue
        if clean in summary or ("." in name and re.search(rf"\b{re.escape(name)}\b", summary)):
            named.append(clean)
    return named


_CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
_PY_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.py)\b")


def prose_test_files(prompt: str) -> tuple[str, ...]:
    """The test files a phase's prompt names outside code spans ("Add a test of it to
    test_x.py"): the change the phase asks for includes them. A path inside backticks is a
    command's argument (the test run), not a file to change."""
    prose = _CODE_SPAN.sub(" ", prompt)
    found: list[str] = []
    for m in _PY_PATH.finditer(prose):
        path = m.group(1).removeprefix("./")
        if is_test_path(path) and path not in found:
            found.append(path)
    return tuple(found)


def changed_files(diff: str) -> list[str]:
    """The paths a unified diff touches (its ``+++``/``---`` lines, deletions included)."""
    out: list[str] = []
    for line in diff.splitlines():
        if line.startswith(("+++ b/", "--- a/")):
            path = line[6:]
            if path not in out:
                out.append(path)
    return out


def change_guard(diff: str) -> str | None:
    """Why a change cannot count as the phase's work, or None: it deletes or skips a test or a
    doctest, or every line it changes is a comment or blank."""
    removed_tests: list[tuple[str, str]] = []
    added_tests: set[str] = set()
    removed_doctests = added_doctests = 0
    code_lines = 0
    path = ""
    for line in diff.splitlines():
        if line.startswith("diff --git"):
            path = line.rsplit(" b/", 1)[-1]
            continue
        if line.startswith(("+++", "---", "@@", "index ", "new file", "deleted file", "similar")):
            continue
        if not line.startswith(("+", "-")):
            continue
        sign, text = line[0], line[1:]
        if text.strip() and not text.strip().startswith("#"):
            code_lines += 1
        match = _TEST_DEF.match(text)
        if match:
            name = match.group(1) or match.group(2)
            if sign == "-":
                removed_tests.append((name, path))
            else:
                added_tests.add(name)  # a test moved to another file is no deletion
        if _DOCTEST.match(text):
            if sign == "-":
                removed_doctests += 1
            else:
                added_doctests += 1
        lowered = text.lower()
        if sign == "+" and any(marker.lower() in lowered for marker in SKIP_MARKERS):
            return f"the change skips a test instead of passing it ({path}: {text.strip()})"
    gone = [f"{name} ({path})" for name, path in removed_tests if name not in added_tests]
    if gone:
        return f"the change deletes a test it should satisfy: {', '.join(gone[:4])}"
    if removed_doctests > added_doctests:
        return f"the change deletes {removed_doctests - added_doctests} doctest line(s)"
    if diff.strip() and code_lines == 0:
        return "the change only touches comments or blank lines"
    return None
