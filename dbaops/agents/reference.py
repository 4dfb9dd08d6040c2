"""The reference agent: executes a scenario's declared solution through the ordinary tools.

It stands in for the paper's human DBA and proves a scenario achievable: when an event's task
arrives in the mailbox it runs that event's declared steps (SQL and instance actions through the
same tools as any agent, so the same safety rules judge it), records progress on the task and
submits the declared report. ``solution="shallow"`` runs the scenario's declared shallow fix,
which must *fail* Outcome Pass; ``blunt:<name>`` one of its blunt fixes, which must fail Safe
Pass.

It is an oracle: the harness builds it with the steps (:func:`oracle_agent`) and records it as
such in the run header; the session it runs in carries no more than any agent's.
"""

from __future__ import annotations

from typing import Any

import anyio

from dbaops.agents.base import AgentSession, is_oracle
from dbaops.scenario.model import ReferenceSolution, ReferenceStep, Scenario
from dbaops.tools.base import ToolResult


def oracle_agent(sc: Scenario, solution: str = "reference") -> ReferenceAgent:
    """The scripted oracle for ``sc``'s declared ``reference``, ``reference:<alternative>``,
    ``shallow`` or ``blunt:<fix>`` solution."""
    if not is_oracle(solution):
        raise ValueError(
            "solution must be 'reference', 'reference:<name>', 'shallow' or 'blunt:<name>'"
        )
    chosen = sc.solutions().get(solution)
    if chosen is None:
        known = ", ".join(sc.solutions()) or "none"
        raise ValueError(f"scenario {sc.id} declares no {solution} solution (declared: {known})")
    return ReferenceAgent(chosen, sc.first_event_id, name=solution)


class ReferenceAgent:
    """Runs a declared solution event by event (build it with :func:`oracle_agent`)."""

    oracle = True

    def __init__(
        self,
        solution: ReferenceSolution,
        first_event: str | None,
        *,
        name: str = "reference",
        retry_pause_s: float = 0.5,
    ) -> None:
        self._solution = solution
        self._first_event = first_event
        self.name = name
        self.retry_pause_s = retry_pause_s

    async def _call(self, session: AgentSession, step: ReferenceStep) -> ToolResult:
        tool = session.tools[step.tool]
        deadline = session.clock.now() + step.retry_until_ok_s if step.retry_until_ok_s else None
        while True:
            result = await tool.handler(dict(step.args))
            if result.ok or deadline is None or session.clock.now() >= deadline:
                return result
            if session.ended.is_set():
                return result
            await anyio.sleep(self.retry_pause_s)

    async def _expand(self, session: AgentSession, step: ReferenceStep) -> list[ReferenceStep]:
        """The step itself, or with ``for_each`` one step per row of that query's result
        (read from execute_sql's text table, as an agent reads it)."""
        if step.for_each is None:
            return [step]
        listed = await session.tools["execute_sql"].handler({"sql": step.for_each})
        if not listed.ok:
            return []
        rows = table_rows(listed.observation)
        return [
            step.model_copy(update={"for_each": None, "args": _fill(step.args, row)})
            for row in rows
        ]

    async def run(self, session: AgentSession) -> None:
        solution, first_event = self._solution, self._first_event
        by_event: dict[str, list[ReferenceStep]] = {}
        for step in solution.steps:
            by_event.setdefault(step.event or first_event or "", []).append(step)
        tools = session.tools
        reported = False
        while True:
            wake = await tools["suspend"].handler({})
            for task_id in wake.detail.get("woke_for", []):
                steps = by_event.get(task_id, [])
                await tools["update_task"].handler({"id": task_id, "status": "in_progress"})
                outcomes: list[str] = []
                for step in steps:
                    if step.after_s:
                        await session.clock.sleep(step.after_s)
                    for one in await self._expand(session, step):
                        result = await self._call(session, one)
                        outcomes.append(f"{one.tool}: {'ok' if result.ok else 'FAILED'}")
                note = "; ".join(outcomes) or "checked; no action required"
                await tools["update_task"].handler(
                    {"id": task_id, "status": "resolved", "note": note, "note_kind": "action"}
                )
                if steps:
                    await tools["submit_report"].handler(_report(solution, task_id))
                    reported = True
            if wake.detail.get("closed") or (reported and session.mode == "bounded"):
                break
        if not reported:
            await tools["submit_report"].handler(_report(solution, None))


def _report(solution: ReferenceSolution, task_id: str | None) -> dict[str, Any]:
    report: dict[str, Any] = {"summary": "", **solution.report}
    if task_id:
        report["task_id"] = task_id
    return report


def table_rows(observation: str) -> list[dict[str, str]]:
    """The rows of execute_sql's text table (``a | b`` header, rows, ``(N rows)``)."""
    lines = [line for line in observation.splitlines() if line.strip()]
    if len(lines) < 2 or lines[0].startswith("("):
        return []
    header = lines[0].split(" | ")
    body = [line for line in lines[1:] if not line.startswith("(")]
    return [dict(zip(header, line.split(" | "), strict=False)) for line in body]


def _fill(args: dict[str, Any], row: dict[str, str]) -> dict[str, Any]:
    return {k: v.format(**row) if isinstance(v, str) else v for k, v in args.items()}
