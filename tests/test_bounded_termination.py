"""Bounded runs end when the agent is done (its report or its budget), never at a compressed
horizon: a slow agent is not cut off, and the verification window follows the agent's end."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from dbaops.agents.base import AgentSession
from dbaops.evaluation.score import score_run
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import PhaseRecord, ToolCallRecord
from dbaops.record.trace import read_trace
from dbaops.scenario.loader import load_scenario

pytestmark = pytest.mark.anyio

#: Wall seconds a hosted model typically thinks per call.
THINK_S = 12.0


class SlowDBA:
    """Fixes pg-qt-01 correctly, but thinks THINK_S wall seconds before every call."""

    name = "slow-dba"

    async def run(self, session: AgentSession) -> None:
        for sql in (
            "EXPLAIN SELECT id FROM orders WHERE status = 'pending' ORDER BY created_at LIMIT 50",
            "SELECT reloptions FROM pg_class WHERE relname = 'orders'",
            "VACUUM (ANALYZE) orders",
            "ALTER TABLE orders RESET (autovacuum_enabled)",
        ):
            await anyio.sleep(THINK_S)
            result = await session.tools["execute_sql"].handler({"sql": sql})
            assert result.ok, result.observation
        await anyio.sleep(THINK_S)
        await session.tools["submit_report"].handler(
            {"summary": "stale statistics", "root_cause": "autovacuum off on orders"}
        )


async def test_a_slow_agent_finishes_and_the_run_ends_after_report_and_verification(
    tmp_path: Path,
) -> None:
    result = await run_scenario(
        "pg-qt-01", RunOptions(time_scale=0.1, runs_dir=tmp_path), agent=SlowDBA()
    )
    assert result.status == "completed", result.reason
    verdict = score_run(result.run_dir)
    assert verdict.outcome_pass is True and verdict.ended_by == "report"
    records = read_trace(result.run_dir)
    phases = {r.phase: r for r in records if isinstance(r, PhaseRecord)}
    report = next(r for r in records if isinstance(r, ToolCallRecord) and r.tool == "submit_report")
    sc, _, _ = load_scenario("pg-qt-01")
    assert report.t_scn_end is not None and report.t_scn_end < sc.time_budget_s
    agent_end, timeline_end = phases["agent_end"], phases["timeline_end"]
    assert agent_end.t_scn is not None and timeline_end.t_scn is not None
    assert agent_end.t_scn >= report.t_scn_end
    # The workloads ran for the verification window after the agent ended ...
    assert timeline_end.t_scn - agent_end.t_scn >= sc.evaluation.verification_s
    # ... and the terminal checks were taken after it.
    terminal = [r for r in records if getattr(r, "purpose", None) == "terminal"]
    assert terminal and all((r.t_scn or 0) >= timeline_end.t_scn for r in terminal)


class QuitsAtOnce:
    """Reports nothing and returns: the run does not wait out the time budget for it."""

    name = "quits"

    async def run(self, session: AgentSession) -> None:
        await session.tools["read_mailbox"].handler({})


async def test_an_agent_that_returns_ends_its_session(tmp_path: Path) -> None:
    result = await run_scenario(
        "pg-sf-01", RunOptions(time_scale=0.05, runs_dir=tmp_path), agent=QuitsAtOnce()
    )
    verdict = score_run(result.run_dir)
    assert verdict.ended_by == "agent returned without a report"
    assert verdict.outcome_pass is False
    assert verdict.diagnosis is not None and verdict.diagnosis.passed is False


class WorksPastItsReport:
    """Submits a report, then tries to keep changing the database: the report ended it."""

    name = "works-past-report"

    def __init__(self) -> None:
        self.after: list[bool] = []

    async def run(self, session: AgentSession) -> None:
        await session.tools["submit_report"].handler({"summary": "done"})
        late = await session.tools["execute_sql"].handler(
            {"sql": "ALTER ROLE batch SET idle_in_transaction_session_timeout = '60s'"}
        )
        self.after.append(late.ok)


async def test_the_report_ends_a_bounded_session(tmp_path: Path) -> None:
    agent = WorksPastItsReport()
    result = await run_scenario(
        "pg-sf-01", RunOptions(time_scale=0.05, runs_dir=tmp_path), agent=agent
    )
    assert agent.after == [False]
    calls = [r for r in read_trace(result.run_dir) if isinstance(r, ToolCallRecord)]
    assert [c.status for c in calls] == ["completed", "refused"]
    assert score_run(result.run_dir).ended_by == "report"


class StuckDDL:
    """Issues a DDL that queues behind the idle transaction's locks and never returns."""

    name = "stuck-ddl"

    async def run(self, session: AgentSession) -> None:
        await session.tools["execute_sql"].handler(
            {"sql": "ALTER TABLE inventory ADD COLUMN note text"}
        )


async def test_a_call_in_flight_at_the_end_is_recorded_and_judged(tmp_path: Path) -> None:
    import yaml

    from dbaops.scenario.loader import timelines_dir

    data = yaml.safe_load((timelines_dir() / "pg-sf-01.yaml").read_text())
    data["id"] = "t-sf-01-stuck"
    data["agent"] = {"time_budget_s": 20, "final_round_s": 1, "sql_timeout_s": 600}
    path = tmp_path / "t-sf-01-stuck.yaml"
    path.write_text(yaml.safe_dump(data))
    result = await run_scenario(
        path, RunOptions(time_scale=0.05, runs_dir=tmp_path), agent=StuckDDL()
    )
    assert result.status == "completed", result.reason
    (call,) = [r for r in read_trace(result.run_dir) if isinstance(r, ToolCallRecord)]
    assert call.status == "cancelled" and not call.ok
    assert call.args["sql"].startswith("ALTER TABLE inventory")
    assert call.detail["settings_before"]["lock_timeout"] == "0"
    verdict = score_run(result.run_dir)
    assert "cut off" in (verdict.ended_by or "")
    assert "G7" in verdict.safety.violated_rules  # DDL on a hot table without lock_timeout


def test_the_no_op_waits_where_waiting_can_prove_something() -> None:
    from dbaops.agents.noop import noop_waits

    assert noop_waits("persistent", False, 1.0)  # events come over time
    assert noop_waits("bounded", False, 0.05)  # under compression it costs little
    assert noop_waits("bounded", True, 1.0)  # the environment may heal by itself
    assert not noop_waits("bounded", False, 1.0)  # nothing would change while it waits
