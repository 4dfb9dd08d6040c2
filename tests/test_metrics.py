"""Metric sampler against the real cluster, and the pure query functions on hand-made frames."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import asyncpg
import polars as pl
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.sampler import (
    REGISTRY,
    MetricSampler,
    UnknownMetricError,
    format_metric_list,
    format_series,
    list_metrics,
    query_series,
    short_queryid,
)
from dbaops.record.layout import RunDir
from dbaops.record.tables import METRIC_SCHEMA, ParquetParts, read_metrics

# -- helpers -------------------------------------------------------------------------------


def _values(df: pl.DataFrame, metric: str, label: str | None = None) -> list[float]:
    sel = df.filter(pl.col("metric") == metric)
    if label is not None:
        sel = sel.filter(pl.col("label") == label)
    return sel.sort("t_s")["value"].to_list()


async def _poll(
    sampler: MetricSampler, cond: Callable[[pl.DataFrame], bool], limit_s: float = 60.0
) -> pl.DataFrame:
    """Wait until ``cond`` holds on the sampler's rows (polling, no fixed sleeps)."""
    with anyio.fail_after(limit_s):
        while True:
            df = sampler.snapshot()
            if cond(df):
                return df
            await anyio.sleep(0.05)


# -- live sampling ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sampler_records_load_locks_and_excludes_itself(
    pg_cluster: PostgresCluster, fresh_db: str, tmp_path: Path
) -> None:
    db = fresh_db
    run_dir = RunDir(tmp_path)
    setup = await pg_cluster.connect(database=db)
    load = await pg_cluster.connect(database=db, application_name="load")
    holder = await pg_cluster.connect(database=db, application_name="holder")
    waiter = await pg_cluster.connect(database=db, application_name="waiter")
    await setup.execute(
        "CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL);"
        "INSERT INTO acct SELECT g, 0 FROM generate_series(1, 500) g;"
        "CREATE TABLE hot (id int PRIMARY KEY, v int);"
        "INSERT INTO hot SELECT g, 0 FROM generate_series(1, 10) g;"
    )
    sink = ParquetParts(run_dir.metrics_dir, run_dir.path / "metrics.parquet", METRIC_SCHEMA)
    clock = ScenarioClock(time_scale=0.1)  # 1 s scenario interval would be 0.1 s wall ...
    sampler = MetricSampler(
        lambda: pg_cluster.connect(database=db),
        clock,
        sink,
        database=db,
        interval_s=1.0,
        min_wall_interval_s=0.25,  # ... but the wall floor makes it 0.25 s (2.5 scenario s)
        top_n=5,
        create_pgss=True,
        flush_every=3,
    )
    stop = anyio.Event()

    async def run_load() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            # trailing tag, as workloads write it (PostgreSQL 18 drops leading comments)
            await load.execute("UPDATE acct SET bal = bal + 1 WHERE id = $1 /*q:bump*/", i % 500)
            if i % 10 == 0:
                await load.execute("INSERT INTO acct VALUES ($1, 0)", 1000 + i)
            await anyio.sleep(0.002)

    async def run_waiter() -> None:
        await waiter.execute("SELECT count(*) FROM hot")  # queues behind ACCESS EXCLUSIVE

    async with anyio.create_task_group() as tg:
        tg.start_soon(sampler.run)
        tg.start_soon(run_load)
        await _poll(sampler, lambda df: len(_values(df, "sampler.up")) >= 1)
        await holder.execute("BEGIN; LOCK TABLE hot IN ACCESS EXCLUSIVE MODE")
        tg.start_soon(run_waiter)
        t_open = clock.now()
        expected = await setup.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND application_name <> 'pgwatch'"
        )
        n_sampler = await setup.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgwatch'"
        )
        assert n_sampler == 1

        def ready(df: pl.DataFrame) -> bool:
            later = df.filter(pl.col("t_s") > t_open)
            return (
                len(_values(df, "sampler.up")) >= 10  # ~3 s wall at 0.25 s
                and max(_values(df, "locks.waiting", "mode=AccessShareLock"), default=0) > 0
                and max(_values(df, "table.n_dead_tup", "table=public.acct"), default=0) > 0
                and expected in _values(later, "activity.connections")
                and any("tag=bump" in lb for lb in df["label"].unique().to_list())
            )

        df = await _poll(sampler, ready)
        await holder.execute("ROLLBACK")  # releases the waiter
        stop.set()
        await _poll(sampler, lambda d: d.height > df.height)  # sampler not stuck on locks
        tg.cancel_scope.cancel()
    for conn in (setup, load, holder, waiter):
        await conn.close()

    stored = read_metrics(run_dir.path)
    final = sampler.snapshot()
    assert stored.height == final.height  # final flush on cancellation
    assert stored.schema == pl.Schema(METRIC_SCHEMA)
    assert set(stored["metric"].unique()) <= set(REGISTRY)
    assert "activity.parallel_workers" in set(stored["metric"].unique())  # a pool held or not

    # sampling cadence: bounded by the wall floor under time compression
    times = sorted(stored.filter(pl.col("metric") == "sampler.up")["t_s"].to_list())
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) >= 0.2 / clock.time_scale
    # counters: commits never decrease and grow under load (backends flush their statistics
    # at most once per second, so single 0.25 s steps may show no change)
    commits = _values(stored, "db.xact_commit")
    assert len(commits) >= 10 and commits == sorted(commits) and commits[-1] > commits[0] + 50
    rates = query_series(stored, ["db.xact_commit"], rate=True)
    assert rates.height == len(commits) - 1 and (rates["value"] >= 0).all()
    assert max(rates["value"].to_list()) > 0
    assert rates["unit"][0] == "xacts/s"
    # lock waits with labels
    assert max(_values(stored, "locks.waiting_relation", "table=public.hot")) >= 1
    assert max(_values(stored, "activity.waiting", "wait_event_type=Lock")) >= 1
    assert max(_values(stored, "activity.count", "state=idle in transaction")) >= 1
    assert max(_values(stored, "locks.waiting_by_type", "locktype=relation")) >= 1
    assert max(_values(stored, "activity.oldest_xact_age_s")) > 0
    # the sampler's own session is never counted: states sum to connections, and that
    # matched the independently counted non-sampler backends while they were all open
    per_t = (
        stored.filter(pl.col("metric") == "activity.count")
        .group_by("t_s")
        .agg(pl.col("value").sum())
        .join(
            stored.filter(pl.col("metric") == "activity.connections").select("t_s", "value"),
            on="t_s",
        )
    )
    assert per_t.height >= 10 and (per_t["value"] == per_t["value_right"]).all()
    # tables: dead tuples after updates, live rows, file sizes
    assert max(_values(stored, "table.n_dead_tup", "table=public.acct")) > 0
    assert max(_values(stored, "table.n_tup_upd", "table=public.acct")) > 0
    assert min(_values(stored, "table.size_bytes", "table=public.hot")) >= 8192
    assert _values(stored, "db.size_bytes")[-1] > 1_000_000
    # statements: deltas of the tagged update, labelled by short queryid and tag
    bump = stored.filter(
        (pl.col("metric") == "statements.calls") & pl.col("label").str.contains("tag=bump")
    )
    assert bump.height >= 1 and (bump["value"] > 0).all()
    assert bump["label"][0].startswith("queryid=")
    calls_rate = query_series(stored, ["statements.calls{tag=bump}"], step_s=10.0, rate=True)
    assert (calls_rate["value"] > 0).all() and calls_rate["unit"][0] == "calls/s"
    assert not stored.filter(pl.col("label").str.contains("dbaops")).height
    # cost of a sample
    cost = sampler.cost_summary()
    print(f"\nsampler cost per sample: {cost}")
    assert cost["samples"] >= 10 and cost["p50_ms"] < 250
    print(format_series(query_series(stored, ["db.xact_commit"], rate=True), max_rows=20))


@pytest.mark.anyio
async def test_sampler_survives_terminated_connection_and_refused_reconnects(
    pg_cluster: PostgresCluster, fresh_db: str
) -> None:
    db = fresh_db
    admin = await pg_cluster.connect()
    clock = ScenarioClock()
    sampler = MetricSampler(
        lambda: pg_cluster.connect(database=db),
        clock,
        None,
        database=db,
        interval_s=0.1,
        min_wall_interval_s=0.1,
        backoff_max_s=0.4,
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            await _poll(sampler, lambda df: len(_values(df, "sampler.up")) >= 3)
            old_pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgwatch'"
            )
            await admin.execute(f"ALTER DATABASE {db} WITH ALLOW_CONNECTIONS false")
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'pgwatch'"
            )
            assert killed == 1
            t_kill = clock.now()
            # reconnects are refused for now: failed attempts are recorded as gaps
            await _poll(sampler, lambda df: _values(df, "sampler.up").count(0.0) >= 2)
            await admin.execute(f"ALTER DATABASE {db} WITH ALLOW_CONNECTIONS true")
            df = await _poll(
                sampler,
                lambda d: (
                    d.filter(
                        (pl.col("metric") == "sampler.up")
                        & (pl.col("value") == 1.0)
                        & (pl.col("t_s") > t_kill)
                    ).height
                    >= 3
                ),
            )
            new_pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgwatch'"
            )
            tg.cancel_scope.cancel()
    finally:
        await admin.execute(f"ALTER DATABASE {db} WITH ALLOW_CONNECTIONS true")
        await admin.close()
    assert new_pid is not None and new_pid != old_pid
    assert sampler.reconnects >= 1 and sampler.failures >= 2
    gaps = df.filter((pl.col("metric") == "sampler.up") & (pl.col("value") == 0.0))["t_s"]
    assert gaps.min() >= t_kill  # type: ignore[operator]
    after = df.filter((pl.col("metric") == "db.xact_commit") & (pl.col("t_s") > gaps.max()))  # type: ignore[operator]
    assert after.height >= 3


@pytest.mark.anyio
async def test_sampler_without_pg_stat_statements(
    pg_cluster: PostgresCluster, fresh_db: str
) -> None:
    clock = ScenarioClock()
    sampler = MetricSampler(
        lambda: pg_cluster.connect(database=fresh_db), clock, None, database=fresh_db
    )
    assert await sampler.sample_once()
    assert await sampler.sample_once()
    caps = sampler.capabilities
    assert caps is not None and not caps.pgss and caps.version_num >= 150000
    df = sampler.snapshot()
    assert not df.filter(pl.col("metric").str.starts_with("statements.")).height
    assert df.filter(pl.col("metric") == "db.xact_commit").height == 2
    await sampler.flush()
    await sampler._close()


@pytest.mark.anyio
async def test_sampler_reports_gap_when_server_unreachable() -> None:
    async def refuse() -> asyncpg.Connection:
        raise ConnectionRefusedError("no server")

    sampler = MetricSampler(refuse, ScenarioClock(), None, database="x", backoff_max_s=0.01)
    assert not await sampler.sample_once()
    assert not await sampler.sample_once()
    assert _values(sampler.snapshot(), "sampler.up") == [0.0, 0.0]


# -- pure query functions --------------------------------------------------------------------


def _frame(rows: list[tuple[float, str, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=METRIC_SCHEMA, orient="row")


def _hand_frame() -> pl.DataFrame:
    rows: list[tuple[float, str, str, float]] = []
    commits = [0, 10, 30, 30, 5]  # a reset between t=3 and t=4
    for t in range(5):
        rows.append((float(t), "sampler.up", "", 1.0))
        rows.append((float(t), "db.xact_commit", "", float(commits[t])))
        rows.append((float(t), "activity.count", "state=active", float(2 * t + 1)))
        rows.append((float(t), "activity.count", "state=idle", 7.0))
    rows.append((1.0, "statements.calls", "queryid=ab,tag=x", 4.0))
    rows.append((2.0, "statements.calls", "queryid=ab,tag=x", 6.0))
    rows.append((4.0, "statements.calls", "queryid=ab,tag=x", 2.0))
    return _frame(rows)


def _pairs(df: pl.DataFrame, label: str = "") -> list[tuple[float, float]]:
    sel = df.filter(pl.col("label") == label)
    return list(zip(sel["t_s"].to_list(), sel["value"].to_list(), strict=True))


def test_query_series_raw_and_window() -> None:
    df = query_series(_hand_frame(), ["db.xact_commit"], window=(1.0, 3.0))
    assert _pairs(df) == [(1.0, 10.0), (2.0, 30.0), (3.0, 30.0)]
    assert df.columns == ["t_s", "metric", "label", "value", "unit"]
    assert df["unit"].to_list() == ["xacts"] * 3


def test_query_series_counter_rate() -> None:
    frame = _hand_frame()
    per_sample = query_series(frame, ["db.xact_commit"], rate=True)
    assert _pairs(per_sample) == [(1.0, 10.0), (2.0, 20.0), (3.0, 0.0), (4.0, 5.0)]
    assert per_sample["unit"][0] == "xacts/s"
    stepped = query_series(frame, ["db.xact_commit"], step_s=2.0, rate=True)
    # [0,2): +10 over 1 s; [2,4): +20 +0 over 2 s; [4,6): reset, +5 over 1 s
    assert _pairs(stepped) == [(0.0, 10.0), (2.0, 10.0), (4.0, 5.0)]
    # the sample before the window still provides the first increase
    windowed = query_series(frame, ["db.xact_commit"], window=(2.0, 4.0), rate=True)
    assert _pairs(windowed) == [(2.0, 20.0), (3.0, 0.0), (4.0, 5.0)]


def test_query_series_resample_without_rate() -> None:
    frame = _hand_frame()
    gauge = query_series(frame, ["activity.count{active}"], step_s=2.0)
    assert _pairs(gauge, "state=active") == [(0.0, 2.0), (2.0, 6.0), (4.0, 9.0)]
    assert set(gauge["label"]) == {"state=active"}
    counter = query_series(frame, ["db.xact_commit"], step_s=2.0)
    assert _pairs(counter) == [(0.0, 10.0), (2.0, 30.0), (4.0, 5.0)]
    delta = query_series(frame, ["statements.calls"], step_s=2.0)
    assert _pairs(delta, "queryid=ab,tag=x") == [(0.0, 4.0), (2.0, 6.0), (4.0, 2.0)]
    # gauges are unchanged by rate=True
    same = query_series(frame, ["activity.count"], step_s=2.0, rate=True)
    assert _pairs(same, "state=idle") == [(0.0, 7.0), (2.0, 7.0), (4.0, 7.0)]
    assert same["unit"][0] == "sessions"
    # window-aligned buckets
    aligned = query_series(frame, ["activity.count{active}"], window=(1.0, 4.0), step_s=2.0)
    assert _pairs(aligned, "state=active") == [(1.0, 4.0), (3.0, 8.0)]


def test_query_series_delta_rate_uses_sample_timeline() -> None:
    frame = _hand_frame()
    per_sample = query_series(frame, ["statements.calls"], rate=True)
    assert _pairs(per_sample, "queryid=ab,tag=x") == [(1.0, 4.0), (2.0, 6.0), (4.0, 2.0)]
    # [2,4) is covered by samples at 2 and 3 (1 s each): 6 calls / 2 s; the query was not
    # in the top N at t=3, which counts as no calls
    stepped = query_series(frame, ["statements.calls"], step_s=2.0, rate=True)
    assert _pairs(stepped, "queryid=ab,tag=x") == [(0.0, 4.0), (2.0, 3.0), (4.0, 2.0)]
    assert stepped["unit"][0] == "calls/s"


def test_query_series_wildcards_and_unknown_names() -> None:
    frame = _hand_frame()
    df = query_series(frame, ["activity.*", "db.xact_commit"])
    assert set(df["metric"]) == {"activity.count", "db.xact_commit"}
    assert query_series(frame, ["table.n_dead_tup"]).height == 0  # known, no data
    with pytest.raises(UnknownMetricError) as err:
        query_series(frame, ["db.xact_comit", "locks.wating"])
    msg = str(err.value)
    assert "db.xact_comit" in msg and "db.xact_commit" in msg
    assert "locks.waiting" in err.value.suggestions["locks.wating"]
    with pytest.raises(UnknownMetricError):
        query_series(frame, ["nosuch.*"])
    with pytest.raises(ValueError):
        query_series(frame, ["db.xact_commit"], step_s=0)


def test_list_metrics_and_format_series() -> None:
    frame = _hand_frame()
    infos = {i.name: i for i in list_metrics(frame)}
    assert set(infos) == {"sampler.up", "db.xact_commit", "activity.count", "statements.calls"}
    assert infos["db.xact_commit"].kind == "counter" and infos["db.xact_commit"].unit == "xacts"
    assert infos["activity.count"].labels == ["state=active", "state=idle"]
    assert infos["statements.calls"].kind == "delta"
    everything = list_metrics(None, include_absent=True, registry=REGISTRY)
    assert len(everything) == len(REGISTRY)
    assert all(i.description for i in everything)
    listing = format_metric_list(list_metrics(frame)).splitlines()
    assert "activity.count (gauge) [sessions] {state=active, state=idle}: " in listing[0]
    assert any(ln.startswith("db.xact_commit (counter) [xacts]: ") for ln in listing)

    text = format_series(query_series(frame, ["activity.count"]), max_rows=6)
    lines = text.splitlines()
    assert lines[0].startswith("activity.count{state=active} [sessions] n=5 min=1 max=9")
    assert "(showing 3 of 5)" in lines[0]
    assert lines[1].split() == ["0.0:1", "2.0:5", "4.0:9"]
    assert format_series(frame.clear()) == "(no data)"
    many = _frame([(0.0, "table.n_live_tup", f"table=t{i}", 1.0) for i in range(10)])
    text = format_series(query_series(many, ["table.n_live_tup"]), max_rows=4)
    assert "8 more series omitted" in text


def test_short_queryid_matches_postgres_to_hex() -> None:
    assert short_queryid(-1) == "ffffffff"
    assert short_queryid(255) == "ff"
    assert short_queryid(0x1234567890ABCDEF) == "12345678"


@pytest.mark.anyio
async def test_sampler_times_business_sessions_waiting_on_the_agents_locks(
    pg_cluster: PostgresCluster, fresh_db: str, tmp_path: Path
) -> None:
    """A session of the agent's role holds a lock; another role's session waits on it:
    ``locks.blocked_by_agent`` counts it (0 while nobody waits on the agent)."""
    from dbaops.dbms.postgres.passwords import give_passwords

    db, agent = fresh_db, f"agent_{uuid.uuid4().hex[:6]}"
    setup = await pg_cluster.connect(database=db)
    await setup.execute(
        f"CREATE ROLE {agent} LOGIN; CREATE TABLE hot (id int); GRANT ALL ON hot TO {agent}"
    )
    await give_passwords(setup, pg_cluster.secret, [agent])
    holder = await pg_cluster.connect(user=agent, database=db)
    waiter = await pg_cluster.connect(database=db, application_name="checkout-service")
    run_dir = RunDir(tmp_path)
    sink = ParquetParts(run_dir.metrics_dir, run_dir.path / "metrics.parquet", METRIC_SCHEMA)
    sampler = MetricSampler(
        lambda: pg_cluster.connect(database=db), ScenarioClock(time_scale=0.1), sink,
        database=db, interval_s=1.0, min_wall_interval_s=0.1, agent_role=agent,
    )  # fmt: skip

    def waits(df: pl.DataFrame) -> list[float]:
        return _values(df, "locks.blocked_by_agent")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            quiet = await _poll(sampler, lambda df: len(waits(df)) >= 2)
            await holder.execute("BEGIN; LOCK TABLE hot IN ACCESS EXCLUSIVE MODE")
            tg.start_soon(waiter.execute, "SELECT count(*) FROM hot")
            blocked = await _poll(sampler, lambda df: max(waits(df), default=0) >= 1)
            await holder.execute("ROLLBACK")
            tg.cancel_scope.cancel()
        assert max(waits(quiet)) == 0
        assert max(waits(blocked)) == 1
    finally:
        for conn in (holder, waiter):
            await conn.close()
        await setup.execute("DROP TABLE hot")  # its grant to the role goes with it
        await setup.close()
        admin = await pg_cluster.connect()
        await admin.execute(f"DROP ROLE {agent}")
        await admin.close()


@pytest.mark.anyio
async def test_the_agent_cannot_read_what_the_judge_measures_of_it() -> None:
    """``query_metrics`` lists and serves the server's metrics but not the judge's count of
    sessions waiting on the agent's own locks."""
    from dbaops.dbms.dialect import engine_dialect
    from dbaops.tools.metrics_tool import metrics_tool

    pg_dialect = engine_dialect("postgres")
    frame = pl.DataFrame(
        {"t_s": [1.0, 1.0], "metric": ["locks.blocked_by_agent", "activity.connections"],
         "label": ["", ""], "value": [3.0, 12.0]},
        schema=METRIC_SCHEMA,
    )  # fmt: skip
    clock = ScenarioClock()
    clock.restart(10.0)
    tool = metrics_tool(lambda: frame, lambda: pl.DataFrame(), clock, dialect=pg_dialect)
    listing = await tool.handler({})
    asked = await tool.handler({"names": ["locks.blocked_by_agent"]})
    served = await tool.handler({"names": ["activity.connections"], "window": [0, 10]})
    assert "activity.connections" in listing.observation
    assert "blocked_by_agent" not in listing.observation
    assert not asked.ok and "unknown metric" in asked.observation
    assert served.ok and "12" in served.observation
