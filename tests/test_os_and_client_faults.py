"""OS-level faults on the embedded server and client behaviours of a workload, on real servers."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import asyncpg
import polars as pl
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.dialect import engine_dialect
from dbaops.dbms.postgres.cluster import ClusterError, PostgresCluster
from dbaops.dbms.postgres.passwords import give_passwords
from dbaops.dbms.postgres.volumes import volume_support_problem
from dbaops.evaluation.score import server_crashed
from dbaops.execution.actors import FaultError, run_fault
from dbaops.record.kinds import ActorRecord
from dbaops.scenario.faults import (
    EditConfig,
    FileSizeLimit,
    HoldTransaction,
    LoadActor,
    SignalProcess,
    SqlFault,
    TablespaceVolume,
)
from dbaops.scenario.loader import ScenarioError, load_scenario
from dbaops.scenario.model import OltpWorkload
from dbaops.testing.actors import RecordList, cluster_actor_context
from dbaops.workloads.drivers import OltpDriver
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import WorkloadLibrary

PG_CRASH = engine_dialect("postgres").crash_markers

pytestmark = pytest.mark.anyio


@pytest.fixture
async def own_cluster() -> AsyncIterator[PostgresCluster]:
    """A cluster of its own: these faults edit its files and crash it."""
    cluster = await PostgresCluster.open("os-faults")
    await cluster.start()
    try:
        admin = await cluster.connect()
        try:
            for role in ("app_rw", "batch"):
                await admin.execute(f"DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN")
            await give_passwords(admin, cluster.secret, ["app_rw", "batch"])
        finally:
            await admin.close()
        yield cluster
    finally:
        await cluster.stop(mode="immediate")
        shutil.rmtree(cluster.root, ignore_errors=True)


async def _setting(cluster: PostgresCluster, name: str) -> tuple[str, str | None]:
    conn = await cluster.connect()
    try:
        row = await conn.fetchrow(
            "SELECT setting || coalesce(unit, ''), sourcefile FROM pg_settings WHERE name = $1",
            name,
        )
        assert row is not None
        return str(row[0]), row[1]
    finally:
        await conn.close()


async def test_an_interrupted_concurrent_index_build_is_made_for_real(
    own_cluster: PostgresCluster,
) -> None:
    """pg-hc-02's construction: CREATE INDEX CONCURRENTLY under a lock_timeout, while an old
    snapshot is held, builds and validates the index, then times out waiting for the
    snapshot (55P03): the index stays ready but invalid, whatever the machine's speed."""
    setup = await own_cluster.connect()
    try:
        await setup.execute(
            "DROP TABLE IF EXISTS public.cic_orders;"
            "CREATE TABLE public.cic_orders AS SELECT g AS id, g % 500 AS amount "
            "FROM generate_series(1, 50000) g"
        )
    finally:
        await setup.close()
    ctx = cluster_actor_context(own_cluster, RecordList())
    cic = SqlFault(
        application_name="deploy",
        settings={"lock_timeout": "1s"},
        expect_sqlstate="55P03",
        sql="CREATE INDEX CONCURRENTLY cic_orders_amount_idx ON public.cic_orders (amount, id)",
    )
    async with anyio.create_task_group() as tg:
        old_snapshot = HoldTransaction(
            application_name="analyst_notebook",
            isolation="repeatable_read",
            statements=["SELECT 1"],
        )
        await tg.start(run_fault, old_snapshot, ctx)
        await run_fault(cic, ctx)
        tg.cancel_scope.cancel()
    conn = await own_cluster.connect()
    try:
        row = await conn.fetchrow(
            "SELECT indisvalid, indisready FROM pg_index "
            "WHERE indexrelid = 'public.cic_orders_amount_idx'::regclass"
        )
        assert row is not None and (row["indisvalid"], row["indisready"]) == (False, True)
        await conn.execute("DROP INDEX public.cic_orders_amount_idx")
    finally:
        await conn.close()
    # Without the old snapshot the build succeeds, which the step refuses: the incident's
    # statement must fail as it did.
    with pytest.raises(FaultError, match="was to fail with SQLSTATE 55P03"):
        await run_fault(cic, ctx)
    # Another failure than the expected one is an error of the step.
    with pytest.raises(asyncpg.PostgresError):
        await run_fault(
            SqlFault(sql="SELECT * FROM public.no_such_table", expect_sqlstate="55P03"), ctx
        )


async def test_server_timers_are_written_in_scenario_time(own_cluster: PostgresCluster) -> None:
    from dbaops.execution.scaled_settings import apply_scaled_settings

    sc = load_scenario("pg-sf-01")[0]
    sc = sc.model_copy(
        update={
            "database": sc.database.model_copy(
                update={"scaled_settings": {"max_standby_streaming_delay": 30.0}}
            )
        }
    )
    trace = RecordList()
    await apply_scaled_settings(sc, cluster_actor_context(own_cluster, trace), 0.05, trace)
    value, source = await _setting(own_cluster, "max_standby_streaming_delay")
    assert value == "1500ms" and source is not None and source.endswith("/postgresql.conf")
    await apply_scaled_settings(sc, cluster_actor_context(own_cluster, trace), 1.0, trace)
    assert (await _setting(own_cluster, "max_standby_streaming_delay"))[0] == "30000ms"
    await run_fault(
        EditConfig(file="postgresql.conf", comment_out=r"^max_standby_streaming_delay = "),
        cluster_actor_context(own_cluster, trace),
    )


async def test_a_hand_edit_of_postgresql_conf_takes_effect_on_reload(
    own_cluster: PostgresCluster,
) -> None:
    trace = RecordList()
    await run_fault(
        EditConfig(file="postgresql.conf", append=["work_mem = '64kB'"]),
        cluster_actor_context(own_cluster, trace),
    )
    value, source = await _setting(own_cluster, "work_mem")
    assert value == "64kB" and source is not None and source.endswith("/postgresql.conf")
    # Commenting the line out and reloading restores the default.
    await run_fault(
        EditConfig(file="postgresql.conf", comment_out=r"^work_mem = '64kB'"),
        cluster_actor_context(own_cluster, trace),
    )
    assert (await _setting(own_cluster, "work_mem"))[0] == "4096kB"


async def test_a_pg_hba_rule_on_top_rejects_a_role_and_spares_the_harness(
    own_cluster: PostgresCluster,
) -> None:
    await run_fault(
        EditConfig(file="pg_hba.conf", prepend=["host all app_rw 127.0.0.1/32 reject"]),
        cluster_actor_context(own_cluster, RecordList()),
    )
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="rejects"):
        await own_cluster.connect(user="app_rw")
    conn = await own_cluster.connect(user="batch")  # other roles and the harness still connect
    await conn.close()


async def test_killing_a_backend_crashes_the_server_and_the_crash_is_not_the_agents(
    own_cluster: PostgresCluster,
) -> None:
    victim = await own_cluster.connect(user="batch", application_name="victim")
    trace = RecordList()
    await run_fault(
        SignalProcess(signal="KILL", application_name="victim"),
        cluster_actor_context(own_cluster, trace),
    )
    signalled = [r for r in trace.items if isinstance(r, ActorRecord)]
    assert [r.status for r in signalled] == ["signalled"]
    assert signalled[0].pids == [victim.get_server_pid()]
    with anyio.fail_after(60):  # the postmaster restarts every session, then accepts again
        while True:
            try:
                conn = await own_cluster.connect()
                break
            except (OSError, asyncpg.PostgresError):
                await anyio.sleep(0.2)
    await conn.close()
    victim.terminate()
    pid = signalled[0].pids[0]
    line = f"LOG:  server process (PID {pid}) was terminated by signal 9: Killed"
    assert server_crashed(trace.items, [line], PG_CRASH) == (False, None)
    other = "LOG:  server process (PID 1) was terminated by signal 11: Segmentation fault"
    assert server_crashed(trace.items, [line, other], PG_CRASH)[0] is True


async def test_a_signal_that_matches_no_process_is_a_fault_error(
    own_cluster: PostgresCluster,
) -> None:
    with pytest.raises(FaultError, match="no 'client backend' process matches"):
        await run_fault(
            SignalProcess(signal="STOP", application_name="nobody"),
            cluster_actor_context(own_cluster, RecordList()),
        )


async def test_os_faults_need_the_servers_machine(own_cluster: PostgresCluster) -> None:
    ctx = cluster_actor_context(own_cluster, RecordList())
    ctx.host = None  # an external server (--dsn): no files, no processes
    with pytest.raises(FaultError, match="needs the server's machine"):
        await run_fault(EditConfig(file="postgresql.conf", append=["x = 1"]), ctx)


def test_malformed_os_faults_and_client_behaviours_are_refused_at_load(tmp_path: Path) -> None:
    base = (Path(__file__).parent / "scenarios" / "t-snapshot.yaml").read_text()
    cases = {
        "kind: edit_config, file: pg_ident.conf": "file: Input should be 'postgresql.conf'",
        "kind: signal_process, signal: HUP": "signal: Input should be 'KILL'",
    }
    for fault, expected in cases.items():
        path = tmp_path / "s.yaml"
        path.write_text(
            base.replace("preparation:", f"preparation:\n  activation:\n    - {{{fault}}}", 1)
        )
        with pytest.raises(ScenarioError) as info:
            load_scenario(path)
        assert expected in str(info.value), str(info.value)


LIBRARY = WorkloadLibrary.model_validate(
    {
        "id": "t",
        "database": "postgres",
        "schema": "",
        "roles": [{"name": "app_rw"}],
        "transactions": {
            "slow": {"role": "app_rw", "statements": [{"sql": "SELECT pg_sleep(3600)"}]},
            "broken": {"role": "app_rw", "statements": [{"sql": "SELECT 1 / 0"}]},
            "quick": {"role": "app_rw", "statements": [{"sql": "SELECT 1"}]},
        },
    }
)


async def _drive(
    pg_cluster: PostgresCluster,
    client: dict[str, object],
    app: str,
    template: str = "slow",
    start_s: float | None = None,
) -> pl.DataFrame:
    admin = await pg_cluster.connect()
    try:
        await admin.execute("DO $$BEGIN CREATE ROLE app_rw LOGIN; EXCEPTION WHEN OTHERS THEN END$$")
        await give_passwords(admin, pg_cluster.secret, ["app_rw"])
    finally:
        await admin.close()
    spec = OltpWorkload.model_validate(
        {
            "name": "w",
            "application_name": app,
            "mix": {template: 1},
            "rate_per_s": 4,
            "arrival": "fixed",
            "deadline_ms": 100,
            "timeout_ms": 2000,
            "connections": 2,
            "start_s": start_s,
            "stop_s": 1.0,
            "client": client,
        }
    )
    endpoint = pg_cluster.endpoint()
    clock = ScenarioClock()
    sink = SampleSink(None, recent_s=3600.0)
    driver = OltpDriver(spec, LIBRARY, {}, endpoint, clock, sink, seed=1)
    clock.restart(0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sink.run_flusher)
        await driver.run()
        tg.cancel_scope.cancel()
    return sink.recent(float("-inf"))


async def _running(pg_cluster: PostgresCluster, app: str) -> int:
    conn = await pg_cluster.connect()
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                "AND state = 'active' AND query LIKE '%pg_sleep%'",
                app,
            )
        )
    finally:
        await conn.close()


async def test_a_client_that_abandons_slow_attempts_retries_at_once_and_leaves_queries_running(
    pg_cluster: PostgresCluster,
) -> None:
    app = "abandoning-client"
    frame = await _drive(
        pg_cluster,
        {"attempt_timeout_ms": 150, "on_attempt_timeout": "abandon", "immediate_retries": 2},
        app,
    )
    assert frame.height >= 3  # arrivals at 0.25, 0.5 and 0.75 s
    assert set(frame["error"].to_list()) == {"client_attempt_timeout"}
    assert set(frame["retries"].to_list()) == {2}
    # The server never heard of the abandonment: the abandoned pg_sleep calls are still there
    # (more of them than the pool has connections), until they end by themselves.
    try:
        assert await _running(pg_cluster, app) > 2
    finally:
        admin = await pg_cluster.connect()
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            app,
        )
        await admin.close()


async def test_a_client_that_cancels_slow_attempts_leaves_nothing_running(
    pg_cluster: PostgresCluster,
) -> None:
    app = "cancelling-client"
    frame = await _drive(
        pg_cluster,
        {"attempt_timeout_ms": 150, "on_attempt_timeout": "cancel", "immediate_retries": 1},
        app,
    )
    assert set(frame["error"].to_list()) == {"client_attempt_timeout"}
    assert set(frame["retries"].to_list()) == {1}
    with anyio.fail_after(120):  # the queries would sleep for an hour without the cancel
        while True:
            if await _running(pg_cluster, app) == 0:
                break
            await anyio.sleep(0.1)  # a condition on the server: polled


async def test_a_leaking_client_ramps_its_idle_connections_up_to_its_maximum(
    pg_cluster: PostgresCluster,
) -> None:
    app = "leaking-client"
    spec_client = {"leak": {"per_s": 20, "max": 5, "state": "idle_in_transaction"}}
    admin = await pg_cluster.connect()
    try:
        seen: list[list[float]] = []

        async def watch() -> None:
            while True:
                rows = await admin.fetch(
                    "SELECT extract(epoch FROM backend_start)::float8 AS t FROM "
                    "pg_stat_activity WHERE application_name = $1 "
                    "AND state = 'idle in transaction'",
                    app,
                )
                seen.append(sorted(r["t"] for r in rows))
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await _drive(pg_cluster, spec_client, app)
            tg.cancel_scope.cancel()
    finally:
        await admin.close()
    assert max(len(s) for s in seen) == 5  # it stops at its maximum
    # ...and ramps: the client waited 1/per_s between connections (on the server's clock)
    starts = max(seen, key=len)
    assert all(b - a >= 0.9 / 20 for a, b in itertools.pairwise(starts))


async def test_a_prefilled_pool_opens_every_connection_before_its_first_unit(
    pg_cluster: PostgresCluster,
) -> None:
    """A pool with ``prefill`` connects all its slots when the workload starts (sessions that
    exist before a fault copy what the fault set), not one slot per unit as the load needs."""
    app = "prefilled-pool"
    admin = await pg_cluster.connect()
    try:
        before_units: list[int] = []
        clock_started = anyio.Event()

        async def watch() -> None:
            await clock_started.wait()
            while True:
                n = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app
                )
                before_units.append(int(n))
                await anyio.sleep(0.02)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            clock_started.set()
            # no unit arrives before 0.9 s of the 1 s run: the sessions seen are the prefill
            frame = await _drive(pg_cluster, {"prefill": True}, app, "quick", start_s=0.9)
            tg.cancel_scope.cancel()
    finally:
        await admin.close()
    assert max(before_units) == 2  # both of the pool's connections
    assert frame.filter(pl.col("outcome") == "error").height == 0
    with pytest.raises(ValueError, match="prefill needs a pool"):
        OltpWorkload.model_validate(
            {
                "name": "w",
                "mix": {"quick": 1},
                "rate_per_s": 1,
                "deadline_ms": 10,
                "connect_per_unit": True,
                "client": {"prefill": True},
            }  # fmt: skip
        )


async def test_a_server_error_under_an_attempt_timeout_is_the_units_error_not_a_crash(
    pg_cluster: PostgresCluster,
) -> None:
    frame = await _drive(
        pg_cluster,
        {"attempt_timeout_ms": 150, "on_attempt_timeout": "abandon", "immediate_retries": 2},
        "erroring-client",
        template="broken",
    )
    assert frame.height >= 3
    assert set(frame["sqlstate"].to_list()) == {"22012"}  # division by zero, no retries
    assert set(frame["retries"].to_list()) == {0}


async def test_a_frozen_backend_is_resumed_before_the_harness_stops_the_server(
    own_cluster: PostgresCluster,
) -> None:
    frozen = await own_cluster.connect(user="batch", application_name="frozen")
    await run_fault(
        SignalProcess(signal="STOP", application_name="frozen"),
        cluster_actor_context(own_cluster, RecordList()),
    )
    with pytest.raises(TimeoutError):  # it answers nothing while stopped
        await frozen.fetchval("SELECT 1", timeout=1)
    own_cluster.resume_stopped()
    again = await own_cluster.connect(user="batch", application_name="after")
    await again.close()
    frozen.terminate()
    await own_cluster.stop()  # a fast shutdown that does not wait on a stopped process
    assert not await own_cluster.is_running()


async def test_under_a_file_size_limit_a_table_cannot_grow_and_the_server_keeps_running(
    own_cluster: PostgresCluster,
) -> None:
    await run_fault(FileSizeLimit(mb=40), cluster_actor_context(own_cluster, RecordList()))
    conn = await own_cluster.connect()
    try:
        await conn.execute("CREATE TABLE big (x text)")
        with pytest.raises(asyncpg.PostgresError, match="could not extend file") as info:
            await conn.execute(
                "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 60000)"
            )
        assert "File too large" in str(info.value)
        assert info.value.sqlstate == "XX000"  # EFBIG is not mapped to disk_full (53100)
        assert await conn.fetchval("SELECT 1") == 1  # the server keeps running
    finally:
        await conn.close()
    # An agent's restart keeps the limit (it is the volume's, not the process's).
    await own_cluster.restart()
    assert own_cluster.file_size_limit_bytes == 40 * 1024 * 1024
    await run_fault(FileSizeLimit(mb=None), cluster_actor_context(own_cluster, RecordList()))
    conn = await own_cluster.connect()
    try:
        await conn.execute(
            "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 60000)"
        )
    finally:
        await conn.close()


async def _fill(conn: asyncpg.Connection) -> asyncpg.PostgresError:
    """Insert into ``archive`` until the volume is full; returns the error that stopped it."""
    while True:
        try:
            await conn.execute(
                "INSERT INTO archive SELECT repeat('x', 500) FROM generate_series(1, 2000)"
            )
        except asyncpg.PostgresError as exc:
            return exc


async def test_a_tablespace_volume_fills_for_real_and_snapshots_carry_it(
    own_cluster: PostgresCluster,
) -> None:
    try:
        await run_fault(
            TablespaceVolume(name="archive_space", size_mb=12),
            cluster_actor_context(own_cluster, RecordList()),
        )
        assert own_cluster.volumes.is_mounted("archive_space")
        conn = await own_cluster.connect()
        try:
            await conn.execute("CREATE TABLE archive (x text) TABLESPACE archive_space")
            # Its free-space and visibility maps exist before it fills (a VACUUM on a full
            # volume could not create them: that is how a real full disk behaves, too).
            await conn.execute("INSERT INTO archive VALUES ('x')")
            await conn.execute("VACUUM archive")
            full = await _fill(conn)
            assert full.sqlstate == "53100"  # disk_full, not the file-size limit's XX000
            assert "No space left on device" in str(full)
            assert await conn.fetchval("SELECT 1") == 1  # the server keeps running
            rows = await conn.fetchval("SELECT count(*) FROM archive")
        finally:
            await conn.close()
        await own_cluster.capture_snapshot("full")
        conn = await own_cluster.connect()
        try:
            await conn.execute("DELETE FROM archive")  # room again, in the live volume only
            await conn.execute("VACUUM archive")
            await conn.execute("INSERT INTO archive SELECT repeat('x', 500)")
        finally:
            await conn.close()
        await own_cluster.restore_snapshot("full")  # the very same full volume comes back
        conn = await own_cluster.connect()
        try:
            assert await conn.fetchval("SELECT count(*) FROM archive") == rows
            assert (await _fill(conn)).sqlstate == "53100"
        finally:
            await conn.close()
        await own_cluster.stop()
        await own_cluster.unmount_volumes()  # what a run's end does
        assert not own_cluster.volumes.is_mounted("archive_space")
        await own_cluster.start()  # a start mounts the volume again before the server runs
        conn = await own_cluster.connect()
        try:
            assert await conn.fetchval("SELECT count(*) FROM archive") == rows
        finally:
            await conn.close()
        await own_cluster.reinitialize()  # a new preparation starts with no volume
        assert own_cluster.volumes.names() == []
    finally:
        await own_cluster.stop(mode="immediate")
        own_cluster.volumes.remove_all()


async def test_tablespace_volume_input_errors(
    own_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="name"):
        TablespaceVolume(name="Archive-Space", size_mb=12)
    with pytest.raises(ValueError, match="size_mb"):
        TablespaceVolume(name="archive_space", size_mb=1)
    with pytest.raises(ValueError, match="server"):
        TablespaceVolume.model_validate({"name": "a", "size_mb": 12, "server": "standby"})
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert volume_support_problem() == "a loop-mounted volume needs root (run dbaops as root)"
    with pytest.raises(ClusterError, match="needs root"):
        await run_fault(
            TablespaceVolume(name="archive_space", size_mb=12),
            cluster_actor_context(own_cluster, RecordList()),
        )
    monkeypatch.undo()
    path = tmp_path / "vol.yaml"
    path.write_text(
        (Path(__file__).parent.parent / "timelines" / "pg-sf-07.yaml")
        .read_text()
        .replace(
            "  construction:\n",
            "  construction:\n    - kind: tablespace_volume\n      name: cold\n      size_mb: 12\n",
            1,
        )
    )
    with pytest.raises(
        ScenarioError, match="tablespace volume cannot be used with database.replica"
    ):
        load_scenario(path)


async def _await_records(trace: RecordList, count: int, status: str) -> list[ActorRecord]:
    """The actor records of ``status`` once there are ``count`` of them (a guard, not a
    timing assertion: the condition is what the test waits for)."""
    with anyio.fail_after(120):
        while True:
            found = [r for r in trace.items if isinstance(r, ActorRecord) and r.status == status]
            if len(found) >= count:
                return found
            await anyio.sleep(0.1)


async def test_a_reconnecting_load_survives_a_restart_and_a_terminated_session(
    own_cluster: PostgresCluster,
) -> None:
    trace = RecordList()
    ctx = cluster_actor_context(own_cluster, trace)
    load = LoadActor(
        role="batch", application_name="heartbeat", statements=["SELECT 1"], pause_ms=20,
        reconnect=True,
    )  # fmt: skip
    async with anyio.create_task_group() as tg:
        await tg.start(run_fault, load, ctx)
        await own_cluster.restart()  # as a capacity change at t=300 does
        second = (await _await_records(trace, 2, "started"))[1]
        assert second.detail == {"session": 0, "reconnected": True}
        admin = await own_cluster.connect()
        try:
            await admin.execute("SELECT pg_terminate_backend($1)", second.pids[0])
        finally:
            await admin.close()
        third = (await _await_records(trace, 3, "started"))[2]
        assert third.pids != second.pids
        ended = await _await_records(trace, 2, "ended")
        assert all("error" in r.detail for r in ended)
        tg.cancel_scope.cancel()
    # Without reconnect, a restart ends the load (its end is on record with the error).
    trace = RecordList()
    ctx = cluster_actor_context(own_cluster, trace)
    once = load.model_copy(update={"reconnect": False})
    async with anyio.create_task_group() as tg:
        await tg.start(run_fault, once, ctx)
        await own_cluster.restart()
        await _await_records(trace, 1, "ended")
        assert len([r for r in trace.items if isinstance(r, ActorRecord)]) == 2
        tg.cancel_scope.cancel()
