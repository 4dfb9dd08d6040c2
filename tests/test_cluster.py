"""The embedded cluster's snapshot/restore keeps WAL archiving working."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from dbaops.dbms.postgres.cluster import PostgresCluster

pytestmark = pytest.mark.anyio


async def _archiver(cluster: PostgresCluster) -> tuple[int, int]:
    conn = await cluster.connect()
    try:
        row = await conn.fetchrow("SELECT archived_count, failed_count FROM pg_stat_archiver")
        assert row is not None
        return int(row[0]), int(row[1])
    finally:
        await conn.close()


async def _switch_and_wait_archived(cluster: PostgresCluster) -> tuple[int, int]:
    before, _ = await _archiver(cluster)
    conn = await cluster.connect()
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS t (x int); INSERT INTO t VALUES (1)")
        await conn.execute("SELECT pg_switch_wal()")
    finally:
        await conn.close()
    with anyio.fail_after(30):
        while True:
            archived, failed = await _archiver(cluster)
            if archived > before or failed > 0:
                return archived, failed
            await anyio.sleep(0.2)


async def test_wal_archiving_keeps_working_after_repeated_restores() -> None:
    cluster = await PostgresCluster.open("archive-test")
    try:
        await cluster.start()
        await _switch_and_wait_archived(cluster)
        await cluster.capture_snapshot("s")
        for _ in range(2):  # the same segment names come back after every restore
            await cluster.restore_snapshot("s")
            archived, failed = await _switch_and_wait_archived(cluster)
            assert failed == 0
            assert archived >= 1
    finally:
        await cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


async def test_a_second_concurrent_run_on_the_same_cluster_is_refused(tmp_path: Path) -> None:
    from dbaops.dbms.postgres.cluster import ClusterError
    from dbaops.execution.runner import RunOptions, run_scenario
    from dbaops.record.kinds import RunEnd
    from dbaops.record.trace import read_trace

    scenario = Path(__file__).parent / "scenarios" / "t-snapshot.yaml"
    holder = await PostgresCluster.open("t-snapshot")
    holder.acquire()  # as a run in progress would
    try:
        with pytest.raises(ClusterError, match="in use by another dbaops run"):
            await run_scenario(scenario, RunOptions(time_scale=0.5, runs_dir=tmp_path))
    finally:
        holder.release()
    (run_dir,) = list((tmp_path / "t-snapshot").iterdir())
    ends = [r for r in read_trace(run_dir) if isinstance(r, RunEnd)]
    assert ends and ends[0].status == "failed" and "in use" in (ends[0].reason or "")


async def test_a_preparation_starts_from_a_pristine_cluster() -> None:
    cluster = await PostgresCluster.open("reinit-test")
    try:
        await cluster.start()
        conn = await cluster.connect()
        await conn.execute("ALTER SYSTEM SET work_mem = '64kB'")
        await conn.execute("SELECT pg_create_physical_replication_slot('left_over')")
        await conn.close()
        cluster.edit_config("postgresql.conf", [], ["default_transaction_read_only = on"], None)
        await cluster.reinitialize()
        conn = await cluster.connect()
        try:
            assert await conn.fetchval("SHOW work_mem") == "4MB"
            assert await conn.fetchval("SHOW default_transaction_read_only") == "off"
            assert await conn.fetchval("SELECT count(*) FROM pg_replication_slots") == 0
        finally:
            await conn.close()
    finally:
        await cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


async def test_a_snapshot_one_cluster_captured_is_restored_by_another_of_its_group() -> None:
    """Campaign workers of one scenario share its snapshots: a restore on another cluster
    rebases the data directory (socket and archive directories), so the copy is its own."""
    a = await PostgresCluster.open("group-a", snapshot_group="shared-group")
    b = await PostgresCluster.open("group-b", snapshot_group="shared-group")
    assert a.snapshot_root == b.snapshot_root and a.root != b.root
    try:
        await a.start()
        conn = await a.connect()
        try:
            await conn.execute("CREATE TABLE made_on_a (x int); INSERT INTO made_on_a VALUES (7)")
        finally:
            await conn.close()
        async with a.snapshot_lock(exclusive=True):
            await a.capture_snapshot("s")
        await a.stop()
        async with b.snapshot_lock(exclusive=False):
            assert b.has_snapshot("s")
            await b.restore_snapshot("s")
        conf = (b.datadir / "postgresql.conf").read_text()
        assert str(b.root) in conf and str(a.root) not in conf
        conn = await b.connect()
        try:
            assert await conn.fetchval("SELECT x FROM made_on_a") == 7
            assert await conn.fetchval("SHOW data_directory") == str(b.datadir)
        finally:
            await conn.close()
        archived_before = set(a.archive_dir.glob("*"))
        _, failed = await _switch_and_wait_archived(b)
        assert failed == 0 and any(b.archive_dir.iterdir())
        assert set(a.archive_dir.glob("*")) == archived_before  # nothing written into a's
    finally:
        for c in (a, b):
            await c.stop()
            shutil.rmtree(c.root, ignore_errors=True)
        shutil.rmtree(a.snapshot_root, ignore_errors=True)
