"""Tools as activities: one module per tool, dispatched by `ToolActivities.run_tool`."""

from activities.tools.registry import TOOL_IMPLS, ToolActivities, execute_tool

__all__ = ["TOOL_IMPLS", "ToolActivities", "execute_tool"]
