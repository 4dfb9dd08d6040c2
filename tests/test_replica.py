"""The replica profile: a real streaming standby made by pg_basebackup, kept in snapshots."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import asyncpg
import polars as pl
import pytest

from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.evaluation.score import score_run
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import ToolCallRecord
from dbaops.record.tables import read_samples
from dbaops.record.trace import read_trace

SCENARIOS = Path(__file__).parent / "scenarios"

pytestmark = pytest.mark.anyio


async def _replayed(standby: PostgresCluster, value: int) -> None:
    """Wait until the standby has replayed the row ``value``."""
    with anyio.fail_after(60):
        while True:
            try:
                conn = await standby.connect()
                try:
                    if await conn.fetchval("SELECT count(*) FROM t WHERE x = $1", value):
                        return
                finally:
                    await conn.close()
            except (OSError, asyncpg.PostgresError):
                pass
            await anyio.sleep(0.2)


async def test_a_standby_streams_survives_snapshots_and_follows_a_new_primary_port() -> None:
    cluster = await PostgresCluster.open("replica-test")
    try:
        await cluster.start()
        conn = await cluster.connect()
        await conn.execute(
            "DROP TABLE IF EXISTS t; CREATE TABLE t (x int); INSERT INTO t VALUES (1)"
        )
        await conn.close()
        standby = await cluster.create_standby("standby1", {"hot_standby_feedback": "off"})
        assert standby.port != cluster.port
        await _replayed(standby, 1)
        probe = await standby.connect()
        assert await probe.fetchval("SELECT pg_is_in_recovery()") is True
        assert await probe.fetchval("SHOW hot_standby_feedback") == "off"
        await probe.close()
        primary = await cluster.connect()
        rows = await primary.fetch("SELECT application_name, state FROM pg_stat_replication")
        await primary.close()
        assert [(r[0], r[1]) for r in rows] == [("standby1", "streaming")]

        await cluster.capture_snapshot("s")
        # A later process opens the same cluster: both servers get new ports, the standby is
        # pointed at the primary's, and replication resumes from the restored state.
        await cluster.stop()
        await standby.stop()
        again = await PostgresCluster.open("replica-test")
        assert again.standby is not None
        await again.restore_snapshot("s")
        assert again.standby is not None and await again.standby.is_running()
        conn = await again.connect()
        await conn.execute("INSERT INTO t VALUES (2)")
        await conn.close()
        await _replayed(again.standby, 2)
        cluster = again
    finally:
        if cluster.standby is not None:
            await cluster.standby.stop(mode="immediate")
        await cluster.stop(mode="immediate")
        shutil.rmtree(cluster.root, ignore_errors=True)


async def test_a_scenario_with_a_replica_runs_parts_checks_workloads_and_tools_on_the_standby(
    tmp_path: Path,
) -> None:
    path = SCENARIOS / "t-replica.yaml"
    noop = await run_scenario(path, RunOptions(time_scale=0.1, runs_dir=tmp_path), agent="noop")
    assert noop.status == "completed"
    assert score_run(noop.run_dir).outcome_pass is False  # replay stays paused
    ref = await run_scenario(path, RunOptions(time_scale=0.1, runs_dir=tmp_path), agent="reference")
    assert ref.status == "completed", ref.reason
    verdict = score_run(ref.run_dir)
    assert verdict.outcome_pass is True, verdict.terminal_acceptance
    # Restarting the standby is not G4 (restarting the primary).
    assert verdict.safe_pass is True, verdict.safety
    calls = [r for r in read_trace(ref.run_dir) if isinstance(r, ToolCallRecord)]
    first = next(c for c in calls if c.tool == "execute_sql")
    assert first.args["server"] == "standby" and "paused" in first.observation
    # The standby's log is recorded beside the primary's, and read_log reaches it.
    assert "read-only connections" in (ref.run_dir / "standby.log").read_text()
    log_call = next(c for c in calls if c.tool == "read_log")
    assert log_call.args["server"] == "standby" and "recovery has paused" in log_call.observation
    samples = read_samples(ref.run_dir)
    assert samples.filter(pl.col("workload") == "reads").height > 0
