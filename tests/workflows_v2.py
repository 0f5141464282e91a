"""A "new build" of the prompt workflow for tests/test_versioning.py, in a module of its own:
the workflow sandbox re-imports the module that defines a workflow, so it holds nothing else."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.contracts import QueryInput, QueryResult
    from durable_agent.names import Workflows
from workflows.query import QueryWorkflow


@workflow.defn(name=Workflows.QUERY)
class QueryWorkflowV2(QueryWorkflow):
    """The new build's prompt workflow: a timer before the loop. Replaying an old prompt's
    history on it would fail (a timer where the history has none): only Worker Versioning keeps
    old prompts away from it."""

    @workflow.run
    async def run(self, inp: QueryInput) -> QueryResult:
        await workflow.sleep(0.01)
        return await super().run(inp)
