"""The agent session carries only what an agent may know; the recorder is the only writer."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dbaops.agents.base import AgentNotFound, AgentSession, Budget, load_agent
from dbaops.agents.reference import oracle_agent
from dbaops.clock import ScenarioClock
from dbaops.record.kinds import Record, ToolCallRecord
from dbaops.scenario.loader import load_scenario
from dbaops.tools.base import Tool, ToolResult, ToolSpec
from dbaops.tools.recording import ToolRecorder, call_detail

pytestmark = pytest.mark.anyio


def _tool(name: str, handler: Any) -> Tool:
    return Tool(spec=ToolSpec(name=name, description=name), handler=handler)


def _session(tools: dict[str, Tool], ended: anyio.Event) -> AgentSession:
    return AgentSession.create(
        task="do it",
        mode="bounded",
        budget=Budget(turns=5, time_s=60.0),
        clock=ScenarioClock(),
        tools=tools,
        ended=ended,
    )


async def test_the_session_exposes_no_internals() -> None:
    ended = anyio.Event()
    session = _session({}, ended)
    assert not hasattr(session, "__dict__") and not hasattr(session, "extras")
    with pytest.raises((AttributeError, TypeError)):  # frozen, slotted: nothing can be added
        session.scenario = object()  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        session.tools["x"] = _tool("x", print)  # type: ignore[index]
    assert not hasattr(session.clock, "restart") and not hasattr(session.ended, "set")
    ended.set()
    assert session.ended.is_set()


def test_oracles_are_built_by_the_harness_only() -> None:
    with pytest.raises(AgentNotFound, match="scripted oracle"):
        load_agent("reference")
    sc, _, _ = load_scenario("pg-sf-01")
    assert oracle_agent(sc, "shallow").name == "shallow"


async def test_a_cancelled_call_is_recorded_with_what_it_had_done() -> None:
    records: list[Record] = []
    started = anyio.Event()

    async def slow(args: dict[str, Any]) -> ToolResult:
        call_detail().update(statements=[{"sql": args["sql"]}])
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    recorder = ToolRecorder(records.append, ScenarioClock())
    tool = recorder.wrap(_tool("execute_sql", slow))
    async with anyio.create_task_group() as tg:
        tg.start_soon(tool.handler, {"sql": "ALTER TABLE t ADD COLUMN c int"})
        await started.wait()
        tg.cancel_scope.cancel()
    (rec,) = records
    assert isinstance(rec, ToolCallRecord) and rec.status == "cancelled" and not rec.ok
    assert rec.args["sql"].startswith("ALTER TABLE")
    assert rec.detail["statements"] == [{"sql": "ALTER TABLE t ADD COLUMN c int"}]


async def test_after_the_end_only_the_report_and_the_mailbox_remain() -> None:
    records: list[Record] = []
    ended = anyio.Event()

    async def ok(args: dict[str, Any]) -> ToolResult:
        return ToolResult(observation="fine")

    recorder = ToolRecorder(records.append, ScenarioClock(), ended=ended, on_report=ended.set)
    sql = recorder.wrap(_tool("execute_sql", ok))
    report = recorder.wrap(_tool("submit_report", ok))
    assert (await sql.handler({"sql": "SELECT 1"})).ok
    assert (await report.handler({"summary": "done"})).ok  # a bounded report ends the session
    assert ended.is_set() and recorder.reports == 1
    refused = await sql.handler({"sql": "SELECT 2"})
    assert not refused.ok and "session has ended" in refused.observation
    assert [r.status for r in records if isinstance(r, ToolCallRecord)] == [
        "completed",
        "completed",
        "refused",
    ]
