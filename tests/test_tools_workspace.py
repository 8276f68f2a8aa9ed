"""The workspace boundary: every escape route is refused; the environment is scrubbed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.workspace import Workspace, WorkspaceEscape, command_env, is_git_name, looks_secret


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("print(1)\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return Workspace(root)


def refused(ws: Workspace, path: str, *, for_write: bool = False) -> str:
    with pytest.raises(WorkspaceEscape) as info:
        ws.resolve(path, for_write=for_write)
    return str(info.value)


def test_relative_and_absolute_paths_inside_resolve_to_real_paths(ws: Workspace) -> None:
    assert ws.resolve("src/a.py") == ws.root / "src" / "a.py"
    assert ws.resolve("./src/../src/a.py") == ws.root / "src" / "a.py"
    assert ws.resolve(str(ws.root / "src" / "a.py")) == ws.root / "src" / "a.py"
    assert ws.resolve(".") == ws.root
    assert ws.resolve("") == ws.root
    assert ws.resolve("new/dir/file.txt", for_write=True) == ws.root / "new/dir/file.txt"


def test_dotdot_above_the_root_is_refused(ws: Workspace) -> None:
    msg = refused(ws, "../outside/secret.txt")
    assert "climb above the workspace root" in msg
    refused(ws, "src/../../outside/secret.txt")
    refused(ws, "src/../..")
    refused(ws, "..\\outside\\secret.txt")


def test_absolute_path_outside_is_refused_with_the_rule(ws: Workspace) -> None:
    msg = refused(ws, "/etc/passwd")
    assert "absolute paths must be inside the workspace" in msg
    refused(ws, str(ws.root) + "/../outside/secret.txt")
    refused(ws, str(ws.root) + "2/x")  # a sibling sharing the root's name as a prefix


def test_an_outside_path_whose_tail_is_in_the_workspace_is_named(ws: Workspace) -> None:
    msg = refused(ws, "/elsewhere/src/a.py")
    assert msg.endswith("instead: 'src/a.py'"), msg
    assert refused(ws, "/etc/passwd").endswith("instead"), "nothing named when nothing fits"


def test_a_sandbox_root_before_a_workspace_path_is_read_as_relative(ws: Workspace) -> None:
    assert ws.resolve("/workspace/src/a.py") == ws.root / "src" / "a.py"
    assert ws.resolve("/testbed/src/a.py") == ws.root / "src" / "a.py"
    assert "absolute paths must be inside" in refused(ws, "/workspace/src/missing.py")
    assert "absolute paths must be inside" in refused(ws, "/workspace/../etc/passwd")


def test_symlink_to_outside_is_refused_for_read_and_write(ws: Workspace, tmp_path: Path) -> None:
    (ws.root / "link").symlink_to(tmp_path / "outside")
    (ws.root / "abs_file").symlink_to(tmp_path / "outside" / "secret.txt")
    (ws.root / "rel_file").symlink_to("../outside/secret.txt")
    for path in ("link/secret.txt", "abs_file", "rel_file", "link"):
        assert "outside the workspace" in refused(ws, path)
        refused(ws, path, for_write=True)


def test_symlink_in_the_middle_of_the_chain_is_followed_and_judged(ws: Workspace) -> None:
    (ws.root / "src" / "up").symlink_to("..")
    (ws.root / "src" / "upup").symlink_to("../..")
    assert ws.resolve("src/up/src/a.py") == ws.root / "src" / "a.py"
    refused(ws, "src/upup/outside/secret.txt")
    # '..' after a symlink is physical: src/up/.. is the root's parent.
    refused(ws, "src/up/../outside/secret.txt")


def test_symlink_inside_the_workspace_is_allowed(ws: Workspace) -> None:
    (ws.root / "alias.py").symlink_to("src/a.py")
    (ws.root / "abs_alias.py").symlink_to(ws.root / "src" / "a.py")
    assert ws.resolve("alias.py") == ws.root / "src" / "a.py"
    assert ws.resolve("abs_alias.py") == ws.root / "src" / "a.py"


def test_dangling_symlink_pointing_outside_is_refused_even_for_write(
    ws: Workspace, tmp_path: Path
) -> None:
    (ws.root / "dangling").symlink_to(tmp_path / "outside" / "not-yet")
    refused(ws, "dangling", for_write=True)
    (ws.root / "dangling_in").symlink_to("src/new.py")
    assert ws.resolve("dangling_in", for_write=True) == ws.root / "src" / "new.py"


def test_symlink_loops_are_refused(ws: Workspace) -> None:
    (ws.root / "loop1").symlink_to("loop2")
    (ws.root / "loop2").symlink_to("loop1")
    (ws.root / "self").symlink_to("self")
    assert "symlink loop" in refused(ws, "loop1")
    refused(ws, "self/x", for_write=True)


def test_git_internals_are_refused_in_every_disguise(ws: Workspace) -> None:
    for path in (
        ".git",
        ".git/config",
        "./.git/HEAD",
        ".GIT/config",
        ".Git/hooks/pre-commit",
        ".git./config",
        ".git /config",
        ".g\u200cit/config",
        ".g\u200bit/hooks/x",  # zero-width space
        "\u200b.git/hooks/x",
        ".gi\u2060t/config",  # word joiner
        ".git\ufe0f/config",  # variation selector
        ".g\u00adit/config",  # soft hyphen
        ".\uff27\uff29\uff34/config",  # fullwidth GIT
        ".git::$INDEX_ALLOCATION/config",
        "GIT~1/config",
        "src/.git/config",
        str(Path("src") / ".." / ".git" / "config"),
    ):
        assert ".git directory is off limits" in refused(ws, path, for_write=True), path
    refused(ws, ".git/config")
    # Names that merely start with .git are fine.
    assert ws.resolve(".gitignore", for_write=True) == ws.root / ".gitignore"
    assert ws.resolve(".github/workflows/ci.yml", for_write=True)


def test_symlink_into_git_is_refused(ws: Workspace) -> None:
    (ws.root / "g").symlink_to(".git")
    (ws.root / "hook").symlink_to(".git/hooks/pre-commit")
    refused(ws, "g/config", for_write=True)
    refused(ws, "hook", for_write=True)


def test_nul_bytes_and_home_tilde_are_refused(ws: Workspace) -> None:
    assert "NUL" in refused(ws, "src/a.py\x00.txt")
    assert "'~' is not expanded" in refused(ws, "~/.ssh/id_rsa")
    refused(ws, "~root/.bashrc")
    refused(ws, "~")
    # A tilde elsewhere is just a character.
    assert ws.resolve("backup~", for_write=True) == ws.root / "backup~"


def test_case_insensitive_root_accepts_other_case_and_still_guards_git(tmp_path: Path) -> None:
    root = tmp_path / "Work"
    root.mkdir()
    ws = Workspace(root, case_insensitive=True)
    assert ws.resolve(str(tmp_path / "WORK" / "x.txt"), for_write=True).name == "x.txt"
    refused(ws, ".GiT/config", for_write=True)
    sensitive = Workspace(root, case_insensitive=False)
    refused(sensitive, str(tmp_path / "WORK" / "x.txt"))


def test_case_sensitivity_is_detected_on_this_file_system(tmp_path: Path) -> None:
    (tmp_path / "lower").mkdir()
    ws = Workspace(tmp_path / "lower")
    expected = os.path.exists(str(tmp_path / "LOWER"))
    assert ws.case_insensitive is expected
    digits = tmp_path / "123"
    digits.mkdir()
    assert Workspace(digits).case_insensitive is expected
    assert list(digits.iterdir()) == []  # the probe file is gone


def test_root_reached_through_a_symlink_is_its_real_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    ws = Workspace(tmp_path / "via")
    assert ws.root == real.resolve()
    assert ws.resolve(str(tmp_path / "via" / "f"), for_write=True) == ws.root / "f"


def test_is_git_name() -> None:
    assert is_git_name(".git") and is_git_name(".GIT") and is_git_name(".git. ")
    assert not is_git_name(".gitignore") and not is_git_name("git")


# -- property-based ---------------------------------------------------------------------------

_COMPONENTS = st.sampled_from(
    ["src", "a.py", "..", ".", "", "out", "in", "loop", "dang", "up", ".git", "new", "~", "x"]
)


@pytest.fixture(scope="module")
def tricky_ws() -> Workspace:
    base = Path(tempfile.mkdtemp(prefix="ws-prop-"))
    root = base / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x")
    (root / ".git").mkdir()
    (base / "secret").mkdir()
    (root / "out").symlink_to(base / "secret")
    (root / "in").symlink_to("src")
    (root / "loop").symlink_to("loop")
    (root / "dang").symlink_to(base / "secret" / "nope")
    (root / "src" / "up").symlink_to("../..")
    return Workspace(root)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(_COMPONENTS, max_size=7), absolute=st.booleans(), write=st.booleans())
def test_resolution_never_leaves_the_root_or_enters_git(
    tricky_ws: Workspace, parts: list[str], absolute: bool, write: bool
) -> None:
    path = "/".join(parts)
    if absolute:
        path = str(tricky_ws.root) + "/" + path
    try:
        real = tricky_ws.resolve(path, for_write=write)
    except WorkspaceEscape:
        return
    # The kernel's own answer must agree: the real path is inside the root, not in .git.
    final = Path(os.path.realpath(real))
    assert final == tricky_ws.root or tricky_ws.root in final.parents
    rel = final.relative_to(tricky_ws.root).parts
    assert ".git" not in rel


# -- environment ------------------------------------------------------------------------------


def test_command_env_keeps_the_base_and_drops_secrets() -> None:
    source = {
        "PATH": "/opt/bin:.:/usr/bin",
        "HOME": "/root",
        "OPENAI_API_KEY": "sk-1",
        "GITHUB_TOKEN": "ghp",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "MY_SECRET": "s",
        "DB_PASSWORD": "p",
        "PROJECT_MODE": "dev",
        "PYTHONPATH": "/src",
    }
    env = command_env(["PROJECT_MODE", "*"], home="/h", tmpdir="/t", source=source)
    assert env["PATH"] == "/opt/bin:/usr/bin"  # relative entries dropped
    assert env["HOME"] == "/h" and env["TMPDIR"] == "/t"
    assert env["TERM"] == "dumb" and env["LANG"] == env["LC_ALL"] == "C.UTF-8"
    assert env["PROJECT_MODE"] == "dev" and env["PYTHONPATH"] == "/src"
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_ACCESS_KEY_ID", "MY_SECRET", "DB_PASSWORD"):
        assert name not in env, name
    assert command_env([], source=source).keys().isdisjoint({"PROJECT_MODE", "PYTHONPATH"})


def test_secrets_pass_only_when_named_exactly() -> None:
    env = command_env(["HF_TOKEN"], source={"HF_TOKEN": "hf", "OTHER_TOKEN": "x"})
    assert env["HF_TOKEN"] == "hf" and "OTHER_TOKEN" not in env
    assert looks_secret("AWS_REGION") and looks_secret("npm_token") and not looks_secret("CC")
