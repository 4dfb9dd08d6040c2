"""OLAP jobs with result checks, and running against an external server given by DSN."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dbaops.agents.base import AgentSession
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.evaluation.score import score_run
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import PhaseRecord, RunHeader, ToolCallRecord
from dbaops.record.layout import RunDir
from dbaops.record.tables import read_samples
from dbaops.record.trace import read_trace
from dbaops.tools.knowledge import describe_corpus

pytestmark = pytest.mark.anyio
SCENARIOS = Path(__file__).parent / "scenarios"


async def test_olap_job_result_is_checked_against_the_prepared_reference(tmp_path: Path) -> None:
    result = await run_scenario(
        SCENARIOS / "t-olap.yaml", RunOptions(time_scale=0.25, runs_dir=tmp_path)
    )
    assert result.status == "completed"
    jobs = read_samples(result.run_dir).filter(pl.col("workload") == "reports").sort("scheduled_s")
    assert jobs["scheduled_s"].to_list() == [-1.0, 2.0, 14.0]  # -1: in the warm-up
    assert jobs["outcome"].to_list() == ["on_time", "on_time", "on_time"]
    assert jobs["correct"].to_list() == [True, True, False]  # the fault at t=8 changed the data
    sc = score_run(result.run_dir).service_compliance.workloads["reports"]
    assert not sc.passed and "incorrect" in (sc.reason or "")


async def test_olap_job_with_a_reference_query_is_checked_on_the_state_when_it_runs(
    tmp_path: Path,
) -> None:
    result = await run_scenario(
        SCENARIOS / "t-olap-at-run.yaml", RunOptions(time_scale=0.25, runs_dir=tmp_path)
    )
    assert result.status == "completed"
    jobs = read_samples(result.run_dir).filter(pl.col("workload") == "reports").sort("scheduled_s")
    assert jobs["outcome"].to_list() == ["on_time", "on_time", "on_time"]
    # right on the prepared state, wrong from the stale view after new orders, right once
    # the view is refreshed: the reference follows the state, not the prepared snapshot
    assert jobs["correct"].to_list() == [True, False, True]


async def test_olap_scheduler_cancels_a_slow_attempt_and_resubmits_it_until_due(
    tmp_path: Path,
) -> None:
    result = await run_scenario(
        SCENARIOS / "t-olap-resubmit.yaml", RunOptions(time_scale=0.25, runs_dir=tmp_path)
    )
    assert result.status == "completed"
    jobs = read_samples(result.run_dir).sort("workload")
    once, resubmitted = jobs.rows(named=True)
    # without resubmission the cancelled attempt is the unit: an error, and the server
    # stopped the query (the cancel request ended pg_sleep long before its 30 s)
    assert once["outcome"] == "error" and "cancelled after 1500 ms" in once["error"]
    assert once["retries"] == 0
    # the cancel request reached the server: it stopped the query (the server log says so)
    log = RunDir(result.run_dir).server_log.read_text()
    assert log.count("canceling statement due to user request") >= 2
    # the scheduler resubmitted until an attempt ran after the fix: on time, judged on it
    assert resubmitted["outcome"] == "on_time" and resubmitted["retries"] >= 1
    assert resubmitted["error"] is None
    sc = score_run(result.run_dir).service_compliance.workloads
    assert sc["resubmitted"].passed and not sc["once"].passed


class RestartAttempt:
    """Tries to restart the instance; on an external server that must be unavailable."""

    name = "restart-attempt"

    async def run(self, session: AgentSession) -> None:
        await session.tools["manage_instance"].handler({"action": "restart"})
        await session.tools["manage_instance"].handler({"action": "status"})
        await session.ended.wait()


async def test_external_server_by_dsn_reports_instance_control_unavailable(
    tmp_path: Path, pg_cluster: PostgresCluster
) -> None:
    # (the fixture's roles then log in with the DSN's password too)
    dsn = f"postgresql://postgres:{pg_cluster.password('postgres')}@127.0.0.1:{pg_cluster.port}/postgres"
    result = await run_scenario(
        SCENARIOS / "t-lock-stall.yaml",
        RunOptions(time_scale=0.1, runs_dir=tmp_path, dsn=dsn, metrics=False),
        agent=RestartAttempt(),
    )
    assert result.status == "completed"
    records = read_trace(result.run_dir)
    header = next(r for r in records if isinstance(r, RunHeader))
    assert header.backend["kind"] == "external"
    # the corpus the agent's knowledge tool searched is part of the run's provenance
    assert header.knowledge_base == describe_corpus()
    assert score_run(result.run_dir).knowledge_base == describe_corpus().summary()
    phases = [r.phase for r in records if isinstance(r, PhaseRecord)]
    assert "build_fixture" in phases and "snapshot_capture" not in phases
    restart, status = [
        r for r in records if isinstance(r, ToolCallRecord) and r.tool == "manage_instance"
    ]
    assert not restart.ok and "unavailable" in restart.observation
    assert status.ok and "PostgreSQL" in status.observation
    assert await pg_cluster.is_running()  # the user's server was not touched
