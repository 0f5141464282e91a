"""MCP servers (issue 25 item 2): their configuration (`config`), the shapes the workflow and
the worker exchange (`contracts`), the worker's open connections (`connections`, each held by
a `connection.Connection` over a `transports` transport) and the mapping of a tool call's
result to a tool_result (`results`).

`config` and `contracts` are light (pydantic only): the CLI and the workflow import them.
The others import the `mcp` SDK and run on the worker only.
"""
