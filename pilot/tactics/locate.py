"""Where a failure points: the functions named on a test run's failing lines.

A phase with ``locate: true`` shows the model, before its first step, the source of the
definitions its prompt names (``Class.method``, a name in backticks) and of the functions its
``context:`` commands' failures call (pytest's ``>`` lines, doctest's "Failed example:"
lines), found by their ``def`` outside the tests. A small model that is told
"the tests fail" rarely reads the right code on its own; with the function in front of it,
the fix is one edit away. Pure text functions: the loop runs the searches with its tools.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize

from tools.definitions import docstring_node

MAX_NAMES = 3
"""Definitions shown at most."""
MAX_SEARCHES = 6
"""Names searched at most (the prompt's first): some name no definition."""
MAX_LINES = 120
"""Lines of one definition shown at most: a function with its docstring, whole, since the model
is asked to rewrite what it is shown."""
TOTAL_LINES = 200
"""Lines of all the definitions shown together: the rest of a small window is the task's."""
LONG_DEFINITION = 36
"""Lines from which a function is shown without its docstring (when the task is not about
docstrings): at about 12 tokens a line, its rewrite whole would take most of a 512-token
answer (naturalsize, 73 lines with 38 of docstring, was copied whole and cut at the limit);
the rewrite keeps the file's docstring. A shorter one keeps its docstring: its examples say
what the function should do."""
FRAME_REACH = 200
"""How far below a ``def`` a traceback's line may be and still be taken as inside it."""

_CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_TARGETS = frozenset(
    {
        "assert",
        "print",
        "len",
        "str",
        "int",
        "float",
        "list",
        "dict",
        "set",
        "tuple",
        "sorted",
        "repr",
        "isinstance",
        "range",
        "type",
        "bool",
        "map",
        "filter",
        "zip",
        "iter",
        "next",
        "super",
        "lambda",
        "raises",
        "parametrize",
    }
)


def failing_names(output: str) -> list[str]:
    """Function names called on the failing lines of pytest or doctest output, in order."""
    lines = output.splitlines()
    failing: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith(">"):
            failing.append(line[1:])
        elif line.strip() == "Failed example:" and i + 1 < len(lines):
            failing.append(lines[i + 1])
    names: list[str] = []
    for line in failing:
        for name in _CALL_RE.findall(line):
            if name in _NOT_TARGETS or name.startswith("test") or name in names:
                continue
            names.append(name)
    return names[:MAX_NAMES]


def focus(names: list[str], prompt: str) -> list[str]:
    """The names the phase's prompt mentions, when it mentions any, else all of them: a
    failing line calls helpers too (``first(rest(interpose(...)))``), and the prompt says
    which function is at fault."""
    named = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}\b", prompt)]
    return named or names


_BACKTICKED_RE = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)(?:\([^`]*\))?`")
# ``Class.method`` as a name, not as a call in an example (``Version.parse("1.2.3")`` shows
# how to reach the bug; on semver's tasks the parser shown first drew a rewrite of its class).
_QUALIFIED_RE = re.compile(r"(?<![\w.`])([A-Z]\w*)\.([A-Za-z_]\w*)\b(?!\(|\.?\w)")


def prompt_names(prompt: str) -> list[str]:
    """The definitions the phase's prompt names: ``Class.method`` written anywhere, and a
    name between backticks (with or without its arguments), in order. What the user names is
    what they want looked at; a name the workspace does not define is dropped by the search."""
    found: list[tuple[int, str]] = []
    for m in _BACKTICKED_RE.finditer(prompt):
        found.append((m.start(), m.group(1)))
    for m in _QUALIFIED_RE.finditer(prompt):
        found.append((m.start(), f"{m.group(1)}.{m.group(2)}"))
    names: list[str] = []
    for _, name in sorted(found):
        if name.rpartition(".")[2].startswith("test") or name in names:
            continue
        names.append(name)
    return names


def method_search(cls: str, name: str) -> str:
    """The shell command listing every ``class`` line and each ``def name(`` in the
    workspace's Python files outside the tests, for :func:`method_hit`."""
    for part in (cls, name):
        if not re.fullmatch(r"[A-Za-z_]\w*", part):
            raise ValueError(f"not a Python name: {part!r}")
    return (
        "grep -rnE --include='*.py' '^[[:space:]]*(class[[:space:]]+[A-Za-z_]"
        f"|(async[[:space:]]+)?def[[:space:]]+{name}[[:space:]]*\\()' ."
        " | grep -v -e '/tests\\?/' -e '/test_' | head -400"
    )


def method_hit(grep_output: str, cls: str, name: str) -> tuple[str, int] | None:
    """(path, line) of ``def name`` inside ``class cls`` from :func:`method_search`'s output:
    the def whose nearest class line above it, less indented, in the same file, is ``cls``."""
    classes: list[tuple[str, int, int, str]] = []
    defs: list[tuple[str, int, int]] = []
    for line in grep_output.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        path, number, text = parts[0].removeprefix("./"), int(parts[1]), parts[2]
        indent = len(text) - len(text.lstrip())
        head = re.match(r"\s*class\s+([A-Za-z_]\w*)", text)
        if head:
            classes.append((path, number, indent, head.group(1)))
        elif re.match(rf"\s*(async\s+)?def\s+{re.escape(name)}\s*\(", text):
            defs.append((path, number, indent))
    for path, number, indent in defs:
        around = [c for c in classes if c[0] == path and c[1] < number and c[2] < indent]
        if around and max(around, key=lambda c: c[1])[3] == cls:
            return path, number
    return None


def definition_search(name: str) -> str:
    """The shell command listing ``def name(`` in the workspace's Python files, tests last."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"not a Python name: {name!r}")
    return (
        f"grep -rnE --include='*.py' '^[[:space:]]*(async[[:space:]]+)?def {name}[[:space:]]*\\(' ."
        " | grep -v -e '/tests\\?/' -e '/test_' | head -10"
    )


def methods_found(grep_output: str) -> int:
    """How many of :func:`definition_search`'s hits are methods (an indented ``def``)."""
    count = 0
    for line in grep_output.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1].isdigit() and parts[2][:1].isspace():
            count += 1
    return count


def prompt_classes(named: list[str]) -> list[str]:
    """The classes among the prompt's names (:func:`prompt_names`): ``LRUCache`` of
    ``LRUCache.__getitem__``, or a CapWords name in backticks, in order."""
    classes: list[str] = []
    for name in named:
        owner = name.rpartition(".")[0].rpartition(".")[2] if "." in name else name
        if owner[:1].isupper() and owner not in classes:
            classes.append(owner)
    return classes


def called_as_method(output: str, name: str) -> bool:
    """Whether a failing line of ``output`` calls ``name`` as an attribute (``x.name(``)."""
    return re.search(rf"\.{re.escape(name)}\s*\(", output) is not None


def first_hit(grep_output: str, *, method: bool = False) -> tuple[str, int] | None:
    """(path, line) of the first ``path:line:text`` line of grep's output; with ``method``,
    the first indented ``def`` (a method) when there is one: ``v.bump()`` fails in the
    class's method, not in a module-level function of the same name."""
    hits = []
    for line in grep_output.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            hits.append((parts[0].removeprefix("./"), int(parts[1]), parts[2]))
    if method:
        indented = [h for h in hits if h[2][:1].isspace()]
        hits = indented or hits
    return (hits[0][0], hits[0][1]) if hits else None


_LOCATION_RE = re.compile(r"^(\S+?\.py):(\d+):", re.MULTILINE)


def frame_hit(output: str, grep_output: str) -> tuple[str, int] | None:
    """(path, line) of the ``def`` whose body a failure's traceback ran in: pytest ends each
    frame with its ``path:line:`` location, and of the definitions grep found, the one in the
    same file that starts last before that line holds it. A name several classes define
    (``FIFOCache.popitem``, ``LRUCache.popitem``) is so taken where it failed, not where grep
    met it first. None when no frame falls in a found definition."""
    defs: list[tuple[str, int]] = []
    for line in grep_output.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            defs.append((parts[0].removeprefix("./"), int(parts[1])))
    frames = [
        (m.group(1).removeprefix("./"), int(m.group(2))) for m in _LOCATION_RE.finditer(output)
    ]
    for path, line in reversed(frames):  # the deepest frame is the last
        if _is_test_path(path):
            continue
        before = [d for d in defs if _same_file(d[0], path) and 0 <= line - d[1] <= FRAME_REACH]
        if before:
            return max(before, key=lambda d: d[1])
    return None


def _same_file(found: str, framed: str) -> bool:
    """A grep path (from the workspace root) and a traceback path (from pytest's rootdir, or
    absolute) name one file."""
    return found == framed or framed.endswith("/" + found) or found.endswith("/" + framed)


def _is_test_path(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py") or "/tests/" in f"/{path}"


def definition_block(text: str) -> str:
    """The definition starting on ``text``'s first line, to its last line (at most
    ``MAX_LINES``), as Python's tokenizer sees it: a signature over several lines whose ``)``
    is at the ``def``'s column (black's style) and a string's lines at any column stay inside."""
    lines = text.splitlines()[:MAX_LINES]
    if not lines:
        return ""
    indent = len(lines[0]) - len(lines[0].lstrip())
    dedented = [line[indent:] if not line[:indent].strip() else line for line in lines]
    block = lines[: _definition_end(dedented)]
    while block and not block[-1].strip():
        block.pop()
    return "\n".join(block)


def _definition_end(lines: list[str]) -> int:
    """How many of ``lines`` (the first a ``def`` or ``class`` at column 0) the definition
    takes: to the last line of its body, seen when a statement comes back to column 0; all of
    them when they end first (the cut is inside it) or do not tokenize."""
    depth = 0
    entered = False
    last = 0  # the last line a token of the definition ends on
    source = "\n".join(lines) + "\n"
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in _LAYOUT and (depth > 0 or not entered):
                last = token.end[0]
            if token.type == tokenize.INDENT:
                depth += 1
                entered = True
            elif token.type == tokenize.DEDENT:
                depth -= 1
            elif token.type == tokenize.NEWLINE and not entered and token.start[0] > 0:
                # A body on the def's own line (``def f(): return 1``) ends with it, unless an
                # indented body follows (then INDENT comes next).
                nxt = _next_code_line(lines, token.start[0])
                if nxt is None or not lines[nxt][:1].isspace():
                    return token.start[0]
            elif entered and depth == 0 and token.type not in _LAYOUT:
                return last
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return len(lines)


_LAYOUT = frozenset(
    {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.DEDENT, tokenize.ENDMARKER}
)


def _next_code_line(lines: list[str], after: int) -> int | None:
    """The index of the first non-blank line after line number ``after`` (1-based)."""
    for index in range(after, len(lines)):
        if lines[index].strip():
            return index
    return None


LOCATED_RE = re.compile(
    r"^The code of ((?:\w+\.)*(\w+)) \((\S+?\.py), line (\d+)(?:; [^\n]*)?\):$", re.MULTILINE
)
"""A :func:`located_header`: the name as shown (group 1), its last part (2), path, line."""


def located_header(name: str, path: str, line: int, notes: list[str]) -> str:
    """The line above a located definition's code: its name, file and first line, then what
    is left out of it, if anything (:data:`LOCATED_RE` reads it back)."""
    return f"The code of {name} ({path}, line {line}{''.join(f'; {n}' for n in notes)}):"


_ABOUT_DOCS_RE = re.compile(r"docstring|doctest|>>>|\bexamples?\b", re.IGNORECASE)


def about_docs(text: str) -> bool:
    """Whether a task (or its failures) is about a docstring: its docstrings stay shown."""
    return bool(_ABOUT_DOCS_RE.search(text))


def without_long_docstring(block: str) -> tuple[str, int]:
    """``block`` (one function as :func:`definition_block` gives it) without its docstring
    when it has ``LONG_DEFINITION`` lines or more, and how many lines were left out (0: the
    block as it was)."""
    if len(block.splitlines()) < LONG_DEFINITION:
        return block, 0
    try:
        tree = ast.parse(textwrap.dedent(block))
    except SyntaxError:
        return block, 0
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(node.body) < 2:
        return block, 0
    first = docstring_node(node)
    if first is None:
        return block, 0
    start, end = first.lineno, first.end_lineno or first.lineno
    lines = block.splitlines()
    return "\n".join(lines[: start - 1] + lines[end:]), end - start + 1
