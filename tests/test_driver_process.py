"""The workload driver measures the database, not the harness: it runs in its own process, a
client that falls behind its timetable is recorded as client lag (not as database latency),
and the run's sink stays exact for checks (sync). No assertion here is on wall-clock time:
each bound follows from timestamps the test itself took around a stall it caused, or from a
condition it waited for."""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import time
from pathlib import Path

import anyio
import asyncpg
import polars as pl
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.record.kinds import ClientLagRecord
from dbaops.record.tables import read_samples
from dbaops.scenario.consistency import scenario_problems
from dbaops.scenario.loader import load_scenario
from dbaops.scenario.model import OltpWorkload
from dbaops.workloads.drivers import OltpDriver
from dbaops.workloads.host import (
    _HEADER,
    DriverPlan,
    DriverProcess,
    DriverProcessError,
    _Channel,
    run_workloads,
)
from dbaops.workloads.lag import ClientLagMonitor
from dbaops.workloads.session import StatementCaches, TemplateSession, inline_args, sql_literal
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import TransactionTemplate, WorkloadLibrary

pytestmark = pytest.mark.anyio

LIBRARY = WorkloadLibrary.model_validate(
    {
        "id": "driver-test",
        "database": "postgres",
        "schema": "",
        "transactions": {
            "ping": {"role": "postgres", "statements": [{"sql": "SELECT $1::int", "args": [
                {"const": 1}]}]},
            "note": {"role": "postgres", "statements": [
                {"sql": "INSERT INTO driver_notes (k, v) VALUES ($1, $2)",
                 "args": [{"uniform": [1, 1000]},
                          {"choice": ["O'Brien", "plain", "a $1 b", "back\\slash"]}]}]},
            "pair": {"role": "postgres", "isolation": "repeatable_read", "statements": [
                {"sql": "SELECT $1::int + 1", "args": [{"uniform": [1, 9]}]},
                {"sql": "INSERT INTO driver_notes (k, v) VALUES ($1, 'pair')",
                 "args": [{"previous": 0}]}]},
        },
    }
)  # fmt: skip


def _endpoint(pg: PostgresCluster) -> Endpoint:
    return pg.endpoint()


def _spec(**fields: object) -> OltpWorkload:
    base: dict[str, object] = {
        "name": "w",
        "application_name": "driver-test",
        "mix": {"ping": 1},
        "rate_per_s": 50,
        "arrival": "fixed",
        "deadline_ms": 100,
        "timeout_ms": 10_000,
        "connections": 2,
    }
    return OltpWorkload.model_validate({**base, **fields})


async def _fetch(pg: PostgresCluster, sql: str) -> list[asyncpg.Record]:
    conn = await pg.connect()
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def _notes_table(pg: PostgresCluster) -> None:
    await _fetch(pg, "DROP TABLE IF EXISTS driver_notes")
    await _fetch(pg, "CREATE TABLE driver_notes (k int, v text)")


def _psql_count(pg: PostgresCluster, table: str) -> int:
    """A row count read without this process's event loop (for while the loop is blocked)."""
    out = subprocess.run(
        [pg.binaries.tool("psql"), "-h", pg.host, "-p", str(pg.port), "-U", "postgres",
         "-d", "postgres", "-Atc", f"SELECT count(*) FROM {table}"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PGPASSWORD": pg.password("postgres")},
    )  # fmt: skip
    return int(out.stdout)


async def _drive(pg: PostgresCluster, spec: OltpWorkload, seed: int = 1) -> SampleSink:
    """Run one OLTP driver on this loop until its timetable (``stop_s``) ends."""
    clock = ScenarioClock()
    sink = SampleSink(None, recent_s=3600.0)
    driver = OltpDriver(spec, LIBRARY, {}, _endpoint(pg), clock, sink, seed)
    clock.restart(0.0)
    await driver.run()
    return sink


def _plan(pg: PostgresCluster, clock: ScenarioClock, spec: OltpWorkload) -> DriverPlan:
    return DriverPlan.for_clock(
        clock, workloads=[spec], library=LIBRARY, params={}, primary=_endpoint(pg), seed=1,
        horizon_s=60.0, expected={},
    )  # fmt: skip


class _Rows:
    """A sink watcher that keeps what it sees."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    def observe(self, rows: object) -> None:
        self.seen.extend(rows)  # type: ignore[call-overload]


async def test_a_stalled_client_loop_is_client_lag_not_database_latency(
    pg_cluster: PostgresCluster,
) -> None:
    """The driver runs on this test's loop; a task blocks the loop for 0.3 s. Every unit
    scheduled inside the stall was issued after it: its client lag holds the wait, its
    latency (and so its deadline) does not, and the lag monitor reports the stretch."""
    clock = ScenarioClock()
    sink = SampleSink(None, recent_s=3600.0)
    driver = OltpDriver(_spec(stop_s=1.2), LIBRARY, {}, _endpoint(pg_cluster), clock, sink, 1)
    records: list[ClientLagRecord] = []
    monitor = ClientLagMonitor(records.append, window_s=0.1, bound_ms=50.0)
    sink.watch(monitor)  # as a run watches its sink
    stall: dict[str, float] = {}

    async def block_the_loop() -> None:
        await clock.sleep_until(0.4)
        stall["from"] = clock.now()
        time.sleep(0.3)  # noqa: ASYNC251 - a CPU-bound step on the client's loop (the judge, a parser...)
        stall["to"] = clock.now()

    clock.restart(0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(block_the_loop)
        await driver.run()
    frame = sink.frame()
    done = frame.filter(pl.col("outcome").is_in(["on_time", "late"]))
    assert done.height == frame.height  # nothing failed or was dropped
    stalled = done.filter(pl.col("scheduled_s").is_between(stall["from"], stall["to"]))
    assert stalled.height >= 1
    for row in stalled.iter_rows(named=True):
        waited_ms = (stall["to"] - row["scheduled_s"]) * 1000.0
        assert row["client_lag_ms"] >= waited_ms - 1e-6  # the stall is the client's lag...
        # ...and not the database's latency, which counts from when the client issued it
        assert row["latency_ms"] <= (row["end_s"] - stall["to"]) * 1000.0 + 1e-6
        total_ms = (row["end_s"] - row["scheduled_s"]) * 1000.0
        assert row["latency_ms"] + row["client_lag_ms"] == pytest.approx(total_ms, abs=1e-6)
    monitor.close()
    assert records and all(r.max_ms > 50.0 for r in records)


async def test_the_driver_process_keeps_running_while_the_run_loop_is_blocked(
    pg_cluster: PostgresCluster,
) -> None:
    """Shipments commit while this process's loop is blocked: the driver runs elsewhere. A
    sync then brings every row to the sink and its watcher, and the ledger agrees with them
    (one committed unit per finished sample)."""
    await _notes_table(pg_cluster)
    process = await DriverProcess.spawn()
    await process.ready()
    clock = ScenarioClock()
    clock.restart(0.0)
    plan = _plan(pg_cluster, clock, _spec(mix={"note": 1}))
    sink = SampleSink(None, recent_s=3600.0)
    watcher = _Rows()
    sink.watch(watcher)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_workloads, plan, sink, process)
        with anyio.fail_after(60):
            while sink.total == 0:
                await sink.refresh()
                await anyio.sleep(0.05)
        # This loop is stuck until the database shows new rows: only a driver that does not
        # need this loop can write them (a hang guard of 60 s, not a timing bound).
        before = _psql_count(pg_cluster, "driver_notes")
        give_up = time.monotonic() + 60
        while _psql_count(pg_cluster, "driver_notes") == before and time.monotonic() < give_up:
            time.sleep(0.05)  # noqa: ASYNC251 - this process's loop is deliberately stuck
        assert _psql_count(pg_cluster, "driver_notes") > before
        await sink.refresh()
        frame = sink.frame()
        ok = frame.filter(pl.col("outcome").is_in(["on_time", "late"])).height
        assert sink.ledger.snapshot().entry("note").committed == ok
        assert len(watcher.seen) == sink.total == frame.height
        tg.cancel_scope.cancel()
    assert process._process.returncode == 0  # stopped when asked, after its last batch


async def test_a_failing_driver_process_raises_its_traceback(pg_cluster: PostgresCluster) -> None:
    process = await DriverProcess.spawn()
    plan = _plan(pg_cluster, ScenarioClock(), _spec(mix={"no_such_template": 1}))
    with anyio.fail_after(60), pytest.raises(DriverProcessError, match="no_such_template"):
        await run_workloads(plan, SampleSink(None), process)


async def test_the_driver_process_ends_when_the_run_process_goes_away(
    pg_cluster: PostgresCluster,
) -> None:
    process = await DriverProcess.spawn()
    await process.ready()
    plan = _plan(pg_cluster, ScenarioClock(), _spec())
    await process._channel.send("start", plan.model_dump_json(by_alias=True))
    await process._channel.aclose()  # as when the run's process dies
    with anyio.fail_after(60):
        assert await process._process.wait() == 0


async def test_the_simple_protocol_writes_arguments_as_literals(
    pg_cluster: PostgresCluster,
) -> None:
    await _notes_table(pg_cluster)
    sink = await _drive(pg_cluster, _spec(mix={"note": 1}, protocol="simple", stop_s=0.5))
    frame = sink.frame()
    assert frame.height >= 1 and set(frame["outcome"]) <= {"on_time", "late"}
    values = [r["v"] for r in await _fetch(pg_cluster, "SELECT v FROM driver_notes")]
    assert len(values) == frame.height
    assert set(values) <= {"O'Brien", "plain", "a $1 b", "back\\slash"}


async def test_a_transaction_with_a_previous_result_runs_prepared(
    pg_cluster: PostgresCluster,
) -> None:
    await _notes_table(pg_cluster)
    sink = await _drive(pg_cluster, _spec(mix={"pair": 1}, stop_s=0.5))
    assert set(sink.frame()["outcome"]) <= {"on_time", "late"}
    ks = [r["k"] for r in await _fetch(pg_cluster, "SELECT k FROM driver_notes WHERE v = 'pair'")]
    assert len(ks) == sink.total and all(2 <= k <= 10 for k in ks)  # $1 + 1 of a 1..9 draw


def test_the_simple_protocol_cannot_take_a_previous_result() -> None:
    sc, lib, _ = load_scenario("pg-qt-01")
    oltp = next(w for w in sc.workloads if isinstance(w, OltpWorkload))
    lib = lib.model_copy(update={"transactions": {**lib.transactions, **LIBRARY.transactions}})
    bad = oltp.model_copy(update={"mix": {"pair": 1.0}, "protocol": "simple"})
    sc = sc.model_copy(update={"workloads": [bad]})
    problems = scenario_problems(sc, lib)
    assert any("protocol: simple" in p and "'pair'" in p for p in problems)


def test_arguments_are_inlined_outside_quotes_and_comments() -> None:
    sql = "SELECT $1, '$1', \"c$2\", $2 -- $1\n/* $2 */ FROM t WHERE x = $10"
    args = [*["x'y", None], *range(3, 10), 10]
    assert inline_args(sql, args) == (
        "SELECT 'x''y', '$1', \"c$2\", NULL -- $1\n/* $2 */ FROM t WHERE x = 10"
    )
    assert sql_literal(True) == "true" and sql_literal(2.5) == "2.5"
    with pytest.raises(ValueError):
        sql_literal("nul\x00")


def _row(end_s: float, lag_ms: float | None, workload: str = "w") -> tuple[object, ...]:
    return (workload, "oltp", "u", end_s, end_s, end_s, 1.0, 0, "on_time", None, None, None,
            lag_ms)  # fmt: skip


def test_the_lag_monitor_reports_each_stretch_of_lagging_windows_once() -> None:
    records: list[ClientLagRecord] = []
    monitor = ClientLagMonitor(records.append, window_s=1.0, bound_ms=50.0)
    rows = [_row(0.5, 1.0), _row(1.5, 80.0), _row(2.5, 120.0, "v"), _row(3.5, 2.0),
            _row(4.5, None), _row(5.5, 70.0)]  # fmt: skip
    monitor.observe(rows)  # type: ignore[arg-type]
    assert len(records) == 1  # windows 1 and 2 lag: one record once window 3 is fine
    first = records[0]
    assert (first.since_s, first.window_s, first.units, first.over_bound) == (1.0, 2.0, 2, 2)
    assert first.max_ms == 120.0 and first.workloads == ["v", "w"]
    monitor.close()  # window 5 lags and is still open: reported at the end
    assert len(records) == 2 and records[1].since_s == 5.0
    assert monitor.worst_ms == 120.0


def test_samples_recorded_before_client_lag_read_with_an_empty_column() -> None:
    data = Path(__file__).parent / "data" / "runs-before-record-package"
    run = next((data / "pg-sf-01").iterdir())
    frame = read_samples(run)
    assert frame.height > 0 and "client_lag_ms" in frame.columns
    assert frame["client_lag_ms"].null_count() == frame.height


def test_a_lagging_client_is_noted_in_the_verdict(tmp_path: Path) -> None:
    from dbaops.evaluation.score import score_run

    data = Path(__file__).parent / "data" / "runs-before-record-package" / "pg-sf-01"
    run = tmp_path / "run"
    shutil.copytree(next(data.iterdir()), run)
    assert not any("behind its timetable" in n for n in score_run(run).notes)
    record = ClientLagRecord(t_scn=12.0, since_s=10.0, window_s=2.0, units=40, over_bound=30,
                             p99_ms=180.0, max_ms=240.0, bound_ms=50.0)  # fmt: skip
    trace = run / "trace.jsonl"
    lines = trace.read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if '"kind":"run_end"' in line)
    lines.insert(end, record.model_dump_json() + "\n")  # the harness writes it before the end
    trace.write_text("".join(lines))
    notes = score_run(run).notes
    assert any("behind its timetable in 1 stretch(es) of 2.0 scenario-s" in n for n in notes)


async def _statements_on_one_connection(pg: PostgresCluster, seed: int) -> list[tuple[int, str]]:
    await _notes_table(pg)
    spec = _spec(mix={"note": 1, "pair": 1}, connections=1, rate_per_s=40, stop_s=0.6,
                 arrival="poisson")  # fmt: skip
    sink = await _drive(pg, spec, seed)
    assert set(sink.frame()["outcome"]) <= {"on_time", "late"}
    rows = await _fetch(pg, "SELECT k, v FROM driver_notes ORDER BY ctid")
    return [(r["k"], r["v"]) for r in rows]


async def test_the_same_seed_issues_the_same_statements_on_a_connection(
    pg_cluster: PostgresCluster,
) -> None:
    """One connection runs its units in arrival order: two runs of a seed write the same
    rows in the same order (the last unit may fall on either side of stop_s)."""
    first = await _statements_on_one_connection(pg_cluster, 7)
    again = await _statements_on_one_connection(pg_cluster, 7)
    other = await _statements_on_one_connection(pg_cluster, 8)
    n = min(len(first), len(again))
    assert n >= 5 and first[:n] == again[:n]
    assert other[: min(n, len(other))] != first[: min(n, len(other))]


async def test_the_hot_path_runs_prepared_statements_through_asyncpgs_protocol(
    pg_cluster: PostgresCluster,
) -> None:
    """The installed asyncpg has the protocol call the session uses (an upgrade that drops it
    falls back to the public fetch, and this test says so), and a statement whose result type
    changed under it (ALTER TABLE) is prepared again."""
    conn = await pg_cluster.connect()
    try:
        await conn.execute("DROP TABLE IF EXISTS hot_t; CREATE TABLE hot_t (k int); "
                           "INSERT INTO hot_t VALUES (1)")  # fmt: skip
        stmt = await conn.prepare("SELECT 1")
        assert hasattr(conn._protocol, "bind_execute") and hasattr(stmt, "_state")
        session = TemplateSession(conn)
        template = TransactionTemplate.model_validate(
            {"role": "postgres",
             "statements": [{"sql": "SELECT * FROM hot_t WHERE k = $1", "args": [{"const": 1}]}]}
        )  # fmt: skip
        clock = ScenarioClock()
        await session.run(template, [[1]], clock.mono() + 60, clock)
        (first,) = session._prepared.values()
        await conn.execute("ALTER TABLE hot_t ADD COLUMN extra int")
        await session.run(template, [[1]], clock.mono() + 60, clock)  # fails once, re-prepared
        (again,) = session._prepared.values()
        assert again[0] is not first[0]
    finally:
        await conn.close()


async def test_a_cancelled_receive_never_leaves_the_channel_mid_frame() -> None:
    """A run cancelled while a batch is half received takes the whole batch, and the next
    message still reads (before, the header was lost and the stream read garbage)."""
    ours, theirs = socket.socketpair()
    channel = await _Channel.over(ours)
    batch = ("batch", list(range(20_000)))
    payload = pickle.dumps(batch)
    frame = _HEADER.pack(len(payload)) + payload
    theirs.sendall(frame[:100])  # the header and the start of the payload
    got: list[tuple[object, ...]] = []
    scope = anyio.CancelScope()

    async def receive() -> None:
        with scope:
            got.append(await channel.receive())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            with anyio.fail_after(30):
                while not channel._reader.buffer:  # noqa: ASYNC110 - header read, payload not
                    await anyio.sleep(0.01)
            scope.cancel()  # the run ends now
            await anyio.wait_all_tasks_blocked()
            theirs.sendall(frame[100:])
        assert got == [batch]
        done = pickle.dumps(("done",))
        theirs.sendall(_HEADER.pack(len(done)) + done)
        with anyio.fail_after(30):
            assert await channel.receive() == ("done",)
    finally:
        theirs.close()
        await channel.aclose()


async def test_sessions_of_a_client_share_what_one_learns_about_a_schema_change(
    pg_cluster: PostgresCluster,
) -> None:
    """As an asyncpg pool's connections do: after ALTER TABLE changes a statement's result
    type, the first transaction to run it fails, and the client's other sessions prepare
    again instead of failing once each."""
    admin = await pg_cluster.connect()
    one, two = await pg_cluster.connect(), await pg_cluster.connect()
    try:
        await admin.execute("DROP TABLE IF EXISTS hot_u; CREATE TABLE hot_u (k int); "
                            "INSERT INTO hot_u VALUES (1)")  # fmt: skip
        caches = StatementCaches()
        first, second = TemplateSession(one, caches=caches), TemplateSession(two, caches=caches)
        template = TransactionTemplate.model_validate(
            {"role": "postgres", "isolation": "repeatable_read",
             "statements": [{"sql": "SELECT * FROM hot_u WHERE k = $1", "args": [{"const": 1}]}]}
        )  # fmt: skip
        clock = ScenarioClock()
        for session in (first, second):
            await session.run(template, [[1]], clock.mono() + 60, clock)
        await admin.execute("ALTER TABLE hot_u ADD COLUMN extra int")
        with pytest.raises(asyncpg.InvalidCachedStatementError):
            await first.run(template, [[1]], clock.mono() + 60, clock)
        await second.run(template, [[1]], clock.mono() + 60, clock)  # prepared again: no error
        await first.run(template, [[1]], clock.mono() + 60, clock)
    finally:
        for conn in (admin, one, two):
            await conn.close()


async def test_inline_drivers_fill_the_same_sink(pg_cluster: PostgresCluster) -> None:
    """``drivers_inline`` (debugging) runs the same plan on the caller's loop."""
    clock = ScenarioClock()
    clock.restart(0.0)
    sink = SampleSink(None, recent_s=3600.0)
    watcher = _Rows()
    sink.watch(watcher)
    await run_workloads(_plan(pg_cluster, clock, _spec(stop_s=0.5)), sink, None)
    frame = sink.frame()
    assert frame.height >= 1 and frame["client_lag_ms"].null_count() == 0
    assert sink.ledger.snapshot().entry("ping").committed == frame.height == len(watcher.seen)


async def test_client_lag_is_never_negative(pg_cluster: PostgresCluster) -> None:
    """A timer that fires a little early issues the unit then; its lag is 0, not negative."""
    sink = await _drive(pg_cluster, _spec(rate_per_s=400, connections=4, stop_s=0.5))
    lags = sink.frame()["client_lag_ms"].drop_nulls()
    assert lags.len() > 0 and lags.min() >= 0.0  # type: ignore[operator]
