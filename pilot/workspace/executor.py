"""The loop's seams over the real world: tools from the registry, and the git workspace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pilot import events as ev
from pilot.agent.images import refs_from_artifacts
from pilot.agent.seams import CheckOutcome
from pilot.failpoints import kill_at
from pilot.private_files import inside, make_private, write_private
from pilot.redact import redact_file, redact_text
from pilot.workspace.snapshot import (
    GitRepo,
    restore_snapshot,
    snapshot_diff,
    take_snapshot,
    unwatched,
)
from pilot.workspace.watch import TreeWatch
from tools.base import ToolContext, ToolResult, tool_blocks, tool_known_writes
from tools.registry import ToolRegistry
from tools.workspace import Workspace


@dataclass
class RegistryExecutor:
    """Runs tools from a registry in one workspace, with the workflow's settings."""

    registry: ToolRegistry
    workspace_root: Path
    artifacts_dir: Path
    settings: dict[str, dict]
    env_allowlist: list[str]
    sandbox: str
    work_branch: str | None
    base_commit: str | None = None
    redact: Sequence[str] = ()
    """The workflow's own redaction patterns: files the pilot keeps are redacted as events."""
    run_id: str | None = None
    hidden: Sequence[Path] = ()
    """The pilot's state, kept out of the sandbox (``tools.sandbox.wrap``)."""

    def __post_init__(self) -> None:
        self._workspace = Workspace(self.workspace_root)
        self._written: list[str] | None = None

    def take_written(self) -> list[str] | None:
        """The paths the last tool changed, when it is a ``known_writes`` tool (None: unknown,
        the snapshot refreshes the whole tree); asked once, by the snapshot after it."""
        written, self._written = self._written, None
        return written

    def context(self, call_id: str | None, time_left: float | None = None) -> ToolContext:
        return ToolContext(
            workspace=self._workspace,
            artifacts_dir=self.artifacts_dir,
            settings=self.settings,
            env_allowlist=self.env_allowlist,
            sandbox=self.sandbox,  # type: ignore[arg-type]
            work_branch=self.work_branch,
            call_id=call_id,
            base_commit=self.base_commit,
            run_id=self.run_id,
            hidden=self.hidden,
            time_left=time_left,
        )

    def schemas(self, names: list[str]) -> list[dict[str, Any]]:
        return self.registry.openai_tools(names)

    def known(self, name: str) -> bool:
        return name in self.registry

    def mutates(self, name: str) -> bool:
        return bool(self.registry.get(name).mutates)

    def edits(self, name: str) -> bool:
        tool = self.registry.get(name)
        return bool(tool.mutates) and tool_known_writes(tool)

    def blocks(self, name: str) -> bool:
        return tool_blocks(self.registry.get(name))

    def invoke(
        self,
        name: str,
        arguments: dict[str, Any],
        call_id: str,
        time_left: float | None = None,
    ) -> ev.ToolFinished:
        self._written = None
        self._workspace.written.clear()
        context = self.context(call_id, time_left)
        result: ToolResult = self.registry.invoke(name, arguments, context)
        if name in self.registry and tool_known_writes(self.registry.get(name)):
            self._written = list(self._workspace.written)
        self._keep_private(result)
        kill_at("tool_returned")
        return ev.ToolFinished(
            call_id=call_id,
            name=name,
            output=result.output,
            is_error=result.is_error,
            truncated=result.truncated,
            artifacts=list(result.artifacts),
            images=refs_from_artifacts(result.artifacts, self.workspace_root),
        )

    def _keep_private(self, result: ToolResult) -> None:
        """The tool's artifacts in the state directory: text redacted as the events are (a
        command's full output can print a token), every file 0600."""
        for artifact in result.artifacts:
            path = Path(artifact.path)
            if not inside(path, self.artifacts_dir) or not path.is_file():
                continue
            try:
                if not (artifact.media_type or "").startswith("image/"):
                    redact_file(path, self.redact)
                make_private(path)
            except OSError:
                continue

    def keep_full_output(self, call_id: str, text: str) -> str | None:
        """Long results go to ``.marathon/outputs/`` in the workspace, which git ignores (a
        ``.gitignore`` of ``*`` in ``.marathon/``, so no file of the repository's own ``.git``
        is written): readable with read_file, never in a snapshot or a commit."""
        root = self.workspace_root
        ignore = root / ".marathon" / ".gitignore"
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in call_id)[:80]
        path = root / ".marathon" / "outputs" / f"{safe}.txt"
        try:
            # The agent's commands can write the workspace: the pilot (never sandboxed) must
            # not write through a link they planted to a file outside.
            if not _no_links_below(root, ignore) or not _no_links_below(root, path):
                return None
            if not ignore.exists():
                ignore.parent.mkdir(parents=True, exist_ok=True)
                write_private(ignore, b"# Marathon's kept tool outputs: never committed\n*\n")
            path.parent.mkdir(parents=True, exist_ok=True)
            if not _no_links_below(root, path):
                return None
            write_private(path, redact_text(text, self.redact).encode("utf-8", "replace"))
        except OSError:
            return None
        return str(path.relative_to(root))

    def run_check(self, command: str, timeout: float, call_id: str) -> CheckOutcome:
        from tools.base import ToolError
        from tools.shell import run_command

        self._written = None  # a command may write anywhere

        try:
            outcome = run_command(command, self.context(call_id), timeout=timeout)
        except ToolError as exc:
            return CheckOutcome(exit_code=None, output=f"Error: {exc}", timed_out=False)
        return CheckOutcome(
            exit_code=outcome.returncode, output=outcome.output, timed_out=outcome.timed_out
        )


def _no_links_below(root: Path, path: Path) -> bool:
    """Whether no existing component of ``path`` below ``root`` is a symbolic link."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return False
    return True


@dataclass
class GitWorkspace:
    repo: GitRepo
    run_id: str
    written: Callable[[], list[str] | None] = field(default=lambda: None)
    """The paths changed since the last snapshot, when known (``RegistryExecutor.take_written``)."""

    watch_changes: bool = True
    """False: every command's snapshot refreshes the whole tree (``bench/snapshots.py``)."""
    watch: TreeWatch | None = field(default=None, init=False, repr=False)
    """The kernel's list of changed paths (``pilot.workspace.watch``), started at the first
    snapshot of this sitting: from the second on, a command's snapshot hashes only what it
    changed (the first, and any the watch cannot vouch for, refreshes the whole tree)."""
    _watching: bool = field(default=False, init=False, repr=False)

    def snapshot(self, message: str) -> tuple[str, str | None]:
        kill_at("result_committed")
        paths = self.written()
        if self._watching and self.watch is not None:
            seen = self.watch.take()  # always taken: the next one counts from here
            if paths is None:  # a file tool's own list is exact; a command's is the kernel's
                paths = seen
        elif not self._watching and self.watch_changes:
            self._watching = True  # before this snapshot: what changes after it is seen
            self.watch = TreeWatch.start(self.repo.root, partial(unwatched, self.repo, self.run_id))
        taken = take_snapshot(self.repo, self.run_id, message, paths=paths), self.repo.head()
        kill_at("snapshot_taken")
        return taken

    def restore(self, snapshot: str, head: str | None) -> None:
        restore_snapshot(self.repo, self.run_id, snapshot, head)
        self.close()
        self._watching = False  # the next snapshot refreshes the whole tree, and watches anew

    def close(self) -> None:
        """Stop watching (the run's sitting is over)."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def changed(self, since: str, now: str) -> bool:
        """Whether two snapshots hold different trees (a change undone again is no change),
        build artefacts aside: the ``.pyc`` files a test run leaves are no change to the code."""
        if self.repo.git("rev-parse", f"{since}^{{tree}}") == self.repo.git(
            "rev-parse", f"{now}^{{tree}}"
        ):
            return False
        return bool(snapshot_diff(self.repo, since, now, "--name-only"))

    def diff(self, since: str, now: str) -> str:
        """The change between two snapshots as a patch, build artefacts aside: what a phase's
        evidence is judged on (a deleted test, a comment-only edit: ``pilot.agent.evidence``)."""
        return snapshot_diff(self.repo, since, now, "--patch")
