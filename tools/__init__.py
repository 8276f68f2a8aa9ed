"""Tools: what the agent may do in its workspace, and nothing more.

Imports neither ``pilot`` nor ``brain``.
"""

from tools.base import Artifact, Tool, ToolContext, ToolError, ToolResult
from tools.registry import ToolRegistry, UnknownToolError, default_registry
from tools.workspace import Workspace, WorkspaceEscape, command_env

__all__ = [
    "Artifact",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "UnknownToolError",
    "Workspace",
    "WorkspaceEscape",
    "command_env",
    "default_registry",
]
