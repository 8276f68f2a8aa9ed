"""When a phase may be called done: the rules, judged on facts the run's events recorded.

A small model says "done" when it is not: it finishes without a call, stops in a loop, edits a
comment, deletes the test it had to satisfy, or half writes a feature whose check already
passed before it began. A phase therefore succeeds only on evidence, never on the model's
word alone (``workflows/README.md``, "When a phase succeeds"):

- **A phase with a check** needs a change to the workspace and the check passing on it. When
  the check failed before any change (its ``check_baseline``), that is enough: failed before,
  passes after. When it passed from the start, passing proves nothing, so the model's
  ``finish`` is needed too (``check_after_edit`` does not end such a phase), and every test
  file the phase's prompt asks a test to be added to must gain a test function or class.
- **A phase with ``require_change`` and no check** needs a change and the model's finish.
- **A survey** (a phase whose tools change nothing and can read) needs the model's finish
  with a summary that names a file the run read (or changed).
- **Any other phase** (tools that may change files, and neither a check nor
  ``require_change``) needs the model's finish: give it a check for more.
- **Never evidence:** no change where one is needed; a change that deletes or skips a test,
  deletes or rewrites a doctest example (a renamed definition may carry its new name into
  them), or only touches comments (``change_guard``).

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
    read = read_diff(facts.diff)
    guard = guard_of(read, bool(facts.diff.strip())) if facts.changed else None
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
        if facts.baseline_passed and facts.named_tests:
            left = [t for t in facts.named_tests if not read.gains_a_test(t)]
            if left:
                return Verdict(
                    False,
                    rule,
                    items,
                    f"the task names {', '.join(left)}, and the change adds no test there: the "
                    "check passed before any change, so it cannot show the work is done; a "
                    "test of the change, in that file, can",
                )
            items.append(f"a test added to {', '.join(facts.named_tests)}")
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


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")
_ASKS_FOR_A_TEST = re.compile(
    r"\b(?:add|write|create|put)\b.*\btests?\b", re.IGNORECASE | re.DOTALL
)


def prose_test_files(prompt: str) -> tuple[str, ...]:
    """The test files a phase's prompt asks a test to be added to, outside code spans ("Add a
    test of it to test_x.py"): the change the phase asks for includes one there. A path in a
    sentence that asks for no test ("refactor tests/test_x.py") is not counted, nor one inside
    backticks (a command's argument: the test run)."""
    prose = _CODE_SPAN.sub(" ", prompt)
    found: list[str] = []
    for sentence in _SENTENCE_END.split(prose):
        if not _ASKS_FOR_A_TEST.search(sentence):
            continue
        for m in _PY_PATH.finditer(sentence):
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


@dataclass
class DiffFacts:
    """What a unified diff does to tests, doctests and definitions (:func:`read_diff`)."""

    removed_tests: list[tuple[str, str]] = field(default_factory=list)
    """(name, path) of each ``def test_*`` / ``class Test*`` line removed."""
    added_tests: dict[str, set[str]] = field(default_factory=dict)
    """Per path, the test names added."""
    removed_examples: list[tuple[str, str]] = field(default_factory=list)
    """(example, path) of each doctest ``>>>`` line removed, stripped."""
    added_examples: dict[str, set[str]] = field(default_factory=dict)
    """Per path, the doctest ``>>>`` lines added, stripped."""
    renames: list[tuple[str, str]] = field(default_factory=list)
    """(old, new) for each definition whose ``def``/``class`` line lost one name and gained
    another: a rename the whole change may carry into tests and examples."""
    skipped: str | None = None
    """The first added line that skips a test, with its path."""
    code_lines: int = 0

    def tests_added(self) -> set[str]:
        return set().union(*self.added_tests.values()) if self.added_tests else set()

    def examples_added(self) -> set[str]:
        return set().union(*self.added_examples.values()) if self.added_examples else set()

    def renamed(self, text: str, kept: set[str]) -> bool:
        """Whether ``text`` (a removed test name or example) is in ``kept`` once a rename the
        change made is applied to it."""
        return any(old in text and text.replace(old, new) in kept for old, new in self.renames)

    def gains_a_test(self, path: str) -> bool:
        """Whether the test file ``path`` gains a test function or class it did not have (a
        docstring example there is copied code, not a test the runner collects)."""
        removed = {name for name, where in self.removed_tests if where == path}
        return bool(self.added_tests.get(path, set()) - removed)


_DEFINITION = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")


def read_diff(diff: str) -> DiffFacts:
    """The tests, doctest examples and definitions a unified diff removes and adds."""
    facts = DiffFacts()
    removed_defs: list[str] = []
    added_defs: list[str] = []
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
            facts.code_lines += 1
        match = _TEST_DEF.match(text)
        if match:
            name = match.group(1) or match.group(2)
            if sign == "-":
                facts.removed_tests.append((name, path))
            else:
                facts.added_tests.setdefault(path, set()).add(name)
        elif (defined := _DEFINITION.match(text)) is not None:
            (removed_defs if sign == "-" else added_defs).append(defined.group(1))
        if _DOCTEST.match(text):
            example = text.strip()
            if sign == "-":
                facts.removed_examples.append((example, path))
            else:
                facts.added_examples.setdefault(path, set()).add(example)
        lowered = text.lower()
        if (
            sign == "+"
            and facts.skipped is None
            and any(marker.lower() in lowered for marker in SKIP_MARKERS)
        ):
            facts.skipped = f"{path}: {text.strip()}"
    lost = [name for name in removed_defs if name not in added_defs]
    gained = [name for name in added_defs if name not in removed_defs]
    if len(lost) == len(gained):
        facts.renames = list(zip(lost, gained, strict=True))
    return facts


def change_guard(diff: str) -> str | None:
    """Why a change cannot count as the phase's work, or None: it deletes or skips a test, it
    deletes or rewrites a doctest example (a check that runs the example it changed proves
    nothing), or every line it changes is a comment or blank. A definition renamed by the
    change may carry its new name into tests and examples."""
    return guard_of(read_diff(diff), bool(diff.strip()))


def guard_of(facts: DiffFacts, changed_lines: bool) -> str | None:
    """:func:`change_guard` on a diff already read (``changed_lines``: it is not empty)."""
    if facts.skipped is not None:
        return f"the change skips a test instead of passing it ({facts.skipped})"
    tests, examples = facts.tests_added(), facts.examples_added()
    gone = [
        f"{name} ({path})"
        for name, path in facts.removed_tests
        if name not in tests and not facts.renamed(name, tests)
    ]
    if gone:
        return f"the change deletes a test it should satisfy: {', '.join(gone[:4])}"
    rewritten = [
        f"{text} ({path})"
        for text, path in facts.removed_examples
        if text not in examples and not facts.renamed(text, examples)
    ]
    if rewritten:
        return (
            "the change deletes or rewrites a doctest example instead of satisfying it: "
            f"{', '.join(rewritten[:3])}; fix the code or the expected result, not the example"
        )
    if changed_lines and facts.code_lines == 0:
        return "the change only touches comments or blank lines"
    return None
