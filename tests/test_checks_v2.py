"""Format v2 checks: plan, server log, report, SQLSTATE ratio, metric window, baseline ratio.

Each check kind passes and fails against a real PostgreSQL (or the run data it reads), records
its evidence, and malformed declarations fail at load time naming the field.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import polars as pl
import pytest
import yaml
from pydantic import TypeAdapter

from dbaops.clock import ScenarioClock
from dbaops.dbms.dialect import engine_dialect
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.passwords import give_passwords
from dbaops.dbms.postgres.sampler import MetricSampler
from dbaops.evaluation.report_checks import judge_report_check
from dbaops.evaluation.score import score_run
from dbaops.execution.checks import (
    CheckSources,
    evaluate_check,
    metric_window_stat,
    server_log_matches,
)
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.execution.serverlog import ServerLogFollower
from dbaops.record.kinds import CheckRecord
from dbaops.record.tables import METRIC_SCHEMA, SAMPLE_SCHEMA, ParquetParts
from dbaops.record.trace import read_trace
from dbaops.scenario.checks import CheckSpec, ReportCheck, WorkloadCheck
from dbaops.scenario.loader import ScenarioError, load_scenario
from dbaops.workloads.samples import Outcome
from dbaops.workloads.sink import SampleSink

PG_STAMP = engine_dialect("postgres").log_line_stamp

pytestmark = pytest.mark.anyio

_CHECK: TypeAdapter[Any] = TypeAdapter(CheckSpec)


def check(**fields: Any) -> Any:
    """A check part as a scenario file would declare it."""
    return _CHECK.validate_python(fields)


# -- a small database of orders ------------------------------------------------------------
@dataclass(frozen=True)
class OrdersDb:
    endpoint: Endpoint
    reader: str  # a login role whose per-role settings disable index scans


@pytest.fixture(scope="module")
async def orders_db(pg_cluster: PostgresCluster) -> AsyncIterator[OrdersDb]:
    name = f"checks_v2_{uuid.uuid4().hex[:8]}"
    reader = f"{name}_reader"
    admin = await pg_cluster.connect()
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        setup = await pg_cluster.connect(database=name)
        try:
            await setup.execute(
                "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, "
                "  status text NOT NULL, note text NOT NULL);"
                "INSERT INTO orders SELECT g, g % 2000, "
                "  CASE WHEN g % 50 = 0 THEN 'pending' ELSE 'settled' END, md5(g::text) "
                "  FROM generate_series(1, 20000) g;"
                "CREATE INDEX orders_customer_idx ON orders (customer_id);"
                "ANALYZE orders;"
                f"CREATE ROLE {reader} LOGIN;"
                f"GRANT SELECT ON orders TO {reader};"
                f"ALTER ROLE {reader} SET enable_indexscan = off;"
                f"ALTER ROLE {reader} SET enable_bitmapscan = off;"
            )
            await give_passwords(setup, pg_cluster.secret, [reader])
        finally:
            await setup.close()
        yield OrdersDb(pg_cluster.endpoint(name), reader)
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.execute(f"DROP ROLE {reader}")
    finally:
        await admin.close()


async def _evaluate(
    spec: Any,
    endpoint: Endpoint | None = None,
    clock: ScenarioClock | None = None,
    sink: SampleSink | None = None,
    sources: CheckSources | None = None,
) -> CheckRecord:
    endpoint = endpoint or Endpoint(host="127.0.0.1", port=1, database="unused")
    return await evaluate_check(spec, "terminal", endpoint, clock or ScenarioClock(), sink, sources)


# -- plan checks ---------------------------------------------------------------------------
async def test_plan_check_passes_when_the_lookup_uses_the_index_and_summarises_the_plan(
    orders_db: OrdersDb,
) -> None:
    rec = await _evaluate(
        check(
            check="plan",
            name="lookup_uses_index",
            sql="SELECT * FROM public.orders WHERE customer_id = 42",
            relation="orders",
            has_node=["Index Scan", "Index Only Scan", "Bitmap Heap Scan"],
            lacks_node=["Seq Scan"],
            has_index=["orders_customer_idx"],
        ),
        orders_db.endpoint,
    )
    assert rec.passed is True, rec
    assert rec.observed["relations"] == ["orders"]
    assert rec.observed["indexes"] == ["orders_customer_idx"]
    assert rec.observed["root"]["plan_rows"] > 0
    assert rec.observed["root"]["actual_rows"] is None  # no ANALYZE: estimates only
    assert rec.observed["failed"] == []
    assert "lacks_node ['Seq Scan'] on orders" in rec.expected


async def test_plan_check_fails_on_a_seq_scan_and_names_the_predicate(
    orders_db: OrdersDb,
) -> None:
    rec = await _evaluate(
        check(
            check="plan",
            name="pending_uses_index",
            sql="SELECT * FROM public.orders WHERE status = 'pending'",
            relation="orders",
            lacks_node=["Seq Scan"],
            lacks_index=["orders_customer_idx"],
        ),
        orders_db.endpoint,
    )
    assert rec.passed is False
    assert "Seq Scan" in rec.observed["nodes"]
    assert rec.observed["failed"] == ["lacks_node: Seq Scan on orders"]


async def test_plan_check_on_a_relation_the_plan_does_not_touch_fails(
    orders_db: OrdersDb,
) -> None:
    rec = await _evaluate(
        check(check="plan", name="typo", sql="SELECT 1", relation="order", lacks_node=["Seq Scan"]),
        orders_db.endpoint,
    )
    assert rec.passed is False
    assert rec.observed["failed"] == ["the plan has no node on order"]


async def test_a_plan_check_as_a_role_plans_under_the_roles_own_settings(
    orders_db: OrdersDb,
) -> None:
    def spec(login: bool) -> Any:
        return check(
            check="plan",
            name="reader_plan",
            sql="SELECT * FROM public.orders WHERE customer_id = 42",
            role=orders_db.reader,
            login=login,
            lacks_node=["Seq Scan"],
        )

    # A probe as a role logs in as that role (a SET ROLE from a privileged session could be
    # undone by code the probe runs), so the role's enable_indexscan = off always applies.
    for login in (False, True):
        rec = await _evaluate(spec(login=login), orders_db.endpoint)
        assert rec.passed is False
        assert rec.observed["nodes"] == ["Seq Scan"]


async def test_plan_check_bounds_row_misestimates_with_analyze(orders_db: OrdersDb) -> None:
    def spec(sql: str) -> Any:
        return check(
            check="plan",
            name="estimates",
            sql=sql,
            analyze=True,
            relation="orders",
            max_row_misestimate=10,
        )

    good = await _evaluate(spec("SELECT * FROM public.orders"), orders_db.endpoint)
    # An expression the planner cannot estimate: 0.5 % of the rows assumed, all of them match.
    bad = await _evaluate(spec("SELECT * FROM public.orders WHERE id % 1 = 0"), orders_db.endpoint)
    assert good.passed is True, good
    assert good.observed["root"]["actual_rows"] == 20000
    assert bad.passed is False
    worst = bad.observed["worst_misestimate"]
    assert worst["actual_rows"] == 20000 and worst["factor"] > 10
    assert bad.observed["failed"][0].startswith("max_row_misestimate: Seq Scan on orders")


async def test_plan_check_bounds_estimated_rows_and_reads_the_scan_direction(
    orders_db: OrdersDb,
) -> None:
    """The planner estimates 20,000 rows for the whole table and about 10 for one customer;
    ``ORDER BY id DESC LIMIT 5`` reads the primary key backward."""

    def spec(sql: str, **predicates: Any) -> Any:
        return check(check="plan", name="p", sql=sql, relation="orders", **predicates)

    whole = "SELECT * FROM public.orders"
    one = "SELECT * FROM public.orders WHERE customer_id = 7"
    newest = "SELECT * FROM public.orders ORDER BY id DESC LIMIT 5"
    assert (await _evaluate(spec(whole, min_estimated_rows=10000), orders_db.endpoint)).passed
    low = await _evaluate(spec(one, min_estimated_rows=10000), orders_db.endpoint)
    assert low.passed is False and low.observed["failed"][0].startswith("min_estimated_rows")
    assert (await _evaluate(spec(one, max_estimated_rows=100), orders_db.endpoint)).passed
    assert (await _evaluate(spec(newest, scan_direction="Backward"), orders_db.endpoint)).passed
    forward = await _evaluate(spec(newest, scan_direction="Forward"), orders_db.endpoint)
    assert forward.passed is False and forward.observed["scan_directions"] == ["Backward"]
    with pytest.raises(ValueError, match="need the relation"):
        check(check="plan", name="p", sql=whole, min_estimated_rows=1)


async def test_plan_check_with_analyze_rolls_back_what_the_statement_writes(
    orders_db: OrdersDb,
) -> None:
    rec = await _evaluate(
        check(
            check="plan",
            name="delete_plan",
            sql="DELETE FROM public.orders WHERE customer_id = 7",
            analyze=True,
            has_node=["ModifyTable"],
        ),
        orders_db.endpoint,
    )
    assert rec.passed is True, rec
    conn = await orders_db.endpoint.connect()
    try:
        assert await conn.fetchval("SELECT count(*) FROM orders WHERE customer_id = 7") == 10
    finally:
        await conn.close()


async def test_plan_check_that_cannot_plan_records_the_error(orders_db: OrdersDb) -> None:
    rec = await _evaluate(
        check(check="plan", name="bad", sql="SELECT * FROM no_such_table", has_node=["Seq Scan"]),
        orders_db.endpoint,
    )
    assert rec.passed is False
    assert rec.error is not None and "no_such_table" in rec.error


# -- server-log checks ---------------------------------------------------------------------
async def test_server_log_check_counts_matching_lines_in_its_window(
    pg_cluster: PostgresCluster, orders_db: OrdersDb, tmp_path: Path
) -> None:
    copy = tmp_path / "postgresql.log"
    follower = ServerLogFollower(pg_cluster.log_path, copy)
    marker = f"checks-v2-{uuid.uuid4().hex[:8]}"
    clock = ScenarioClock()
    clock.restart(0.0)
    conn = await orders_db.endpoint.connect()
    try:
        for i in range(3):
            await conn.execute(f"DO $$ BEGIN RAISE LOG '{marker} %', {i}; END $$")
    finally:
        await conn.close()

    def copied() -> str:
        follower.copy_new()
        return copy.read_text() if copy.exists() else ""

    with anyio.fail_after(30):  # the logging collector writes the lines asynchronously
        while copied().count(f"LOG:  {marker}") < 3:  # noqa: ASYNC110 - polling a file
            await anyio.sleep(0.05)
    sources = CheckSources(
        server_log=copy, refresh_server_log=follower.copy_new, log_line_stamp=PG_STAMP
    )

    def spec(**window: Any) -> Any:
        return check(check="server_log", name="markers", pattern=f"LOG:  {marker}", **window)

    recent = await _evaluate(spec(over_s=60, op="==", value=3), clock=clock, sources=sources)
    none_wanted = await _evaluate(spec(over_s=60, op="==", value=0), clock=clock, sources=sources)
    before = await _evaluate(
        spec(since_s=-100, until_s=-1, op=">=", value=1), clock=clock, sources=sources
    )
    assert recent.passed is True, recent
    assert none_wanted.passed is False
    assert none_wanted.observed["count"] == 3
    assert f"{marker} 0" in none_wanted.observed["first"]
    assert f"{marker} 2" in none_wanted.observed["last"]
    assert before.passed is False and before.observed["count"] == 0


def test_server_log_lines_are_placed_in_scenario_time_by_the_run_clock() -> None:
    lines = [
        "2026-01-01 00:00:10.000 UTC [1] app@shop psql ERROR:  deadlock detected",
        "\tcontinued detail line",
        "2026-01-01 00:00:40.500 UTC [1] app@shop psql ERROR:  deadlock detected",
    ]
    wall_start = 1767225600.0  # 2026-01-01 00:00:00 UTC is scenario time 0
    found = server_log_matches(lines, "deadlock|detail", 0, 30, wall_start, 0.5, PG_STAMP)
    # 10 wall seconds at half speed are 20 scenario seconds; 40.5 s is 81 s, outside.
    assert [(t, line.split()[-1]) for t, line in found] == [(20.0, "detected"), (20.0, "line")]


async def test_server_log_check_without_a_recorded_log_fails_with_the_reason() -> None:
    rec = await _evaluate(
        check(check="server_log", name="x", pattern="PANIC", over_s=10, op="==", value=0)
    )
    assert rec.passed is False
    assert rec.error is not None and "no server log" in rec.error


# -- metric-window checks ------------------------------------------------------------------
async def test_metric_check_sees_temp_bytes_written_between_samples(
    orders_db: OrdersDb,
) -> None:
    db = orders_db.endpoint.database
    clock = ScenarioClock()
    sampler = MetricSampler(
        lambda: orders_db.endpoint.connect(), clock, None, database=db, min_wall_interval_s=0
    )
    assert await sampler.sample_once()
    spill = await orders_db.endpoint.connect()
    try:
        await spill.execute("SET work_mem = '64kB'")
        await spill.fetch("SELECT note FROM orders ORDER BY note")  # sorts on disk
    finally:
        await spill.close()

    def temp_bytes(df: pl.DataFrame) -> list[float]:
        return df.filter(pl.col("metric") == "db.temp_bytes")["value"].to_list()

    with anyio.fail_after(30):  # the backend reports its temp files when its stats flush
        while True:
            assert await sampler.sample_once()
            values = temp_bytes(sampler.snapshot())
            if values[-1] > values[0]:
                break
            await anyio.sleep(0.1)
    await sampler.flush()
    sources = CheckSources(metrics=sampler.snapshot)

    def spec(op: str, value: float, stat: str = "increase") -> Any:
        return check(
            check="metric", name="spill", metric="db.temp_bytes", stat=stat, op=op, value=value
        )

    spilled = await _evaluate(spec(">", 0), clock=clock, sources=sources)
    no_spill_wanted = await _evaluate(spec("==", 0), clock=clock, sources=sources)
    per_min = await _evaluate(spec(">", 0, stat="rate_per_min"), clock=clock, sources=sources)
    assert spilled.passed is True, spilled
    assert spilled.observed["increase"] >= 64 * 1024
    assert no_spill_wanted.passed is False
    assert per_min.passed is True
    assert spilled.expected == "increase(db.temp_bytes over 60 s) > 0.0"


def _frame(rows: list[tuple[float, str, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=METRIC_SCHEMA, orient="row")


def test_metric_window_counts_counter_increments_across_a_reset() -> None:
    frame = _frame(
        [(t, "db.temp_bytes", "", v) for t, v in [(0, 100), (10, 200), (20, 50), (30, 150)]]
    )
    # Increments ending in (5, 30]: +100, reset to 50 (counted as 50), +100.
    assert metric_window_stat(frame, "db.temp_bytes", None, "increase", 5, 30) == (250.0, 3)
    rate, _ = metric_window_stat(frame, "db.temp_bytes", None, "rate_per_min", 5, 30)
    assert rate == pytest.approx(250 / 30 * 60)
    assert metric_window_stat(frame, "db.temp_bytes", None, "increase", 31, 60) == (None, 0)


def test_metric_window_sums_gauge_series_unless_a_label_is_named() -> None:
    frame = _frame(
        [
            (0, "activity.count", "state=active", 2),
            (0, "activity.count", "state=idle", 5),
            (1, "activity.count", "state=active", 4),
            (1, "activity.count", "state=idle", 5),
        ]
    )
    assert metric_window_stat(frame, "activity.count", None, "max", 0, 1) == (9.0, 2)
    assert metric_window_stat(frame, "activity.count", "state=active", "mean", 0, 1) == (3.0, 2)


# -- workload checks: SQLSTATE ratio and baselines ----------------------------------------
def _sink_with_units(tmp_path: Path) -> SampleSink:
    """Before t = 20: 100 healthy units of 10 ms. From t = 41: 50 units of 30 ms, 10 refused
    for privileges (42501) and 5 serialization failures (40001)."""
    parts = ParquetParts(tmp_path / "samples", tmp_path / "samples.parquet", SAMPLE_SCHEMA)
    sink = SampleSink(parts)
    for i in range(100):
        t = i * 0.2
        sink.add("api", "oltp", "read", t, t, t + 0.01, 10.0, 0, Outcome.ON_TIME)
    sink.flush()  # the baseline is read back from the recorded parts
    for i in range(50):
        t = 41 + i * 0.35
        code = "42501" if i < 10 else "40001" if i < 15 else None
        outcome = Outcome.ERROR if code else Outcome.ON_TIME
        sink.add("api", "oltp", "read", t, t, t + 0.03, 30.0, 0, outcome, sqlstate=code)
    return sink


def _clock_at(t: float) -> ScenarioClock:
    clock = ScenarioClock()
    clock.restart(t)
    return clock


async def test_sqlstate_ratio_is_the_share_of_units_failing_with_that_code(
    tmp_path: Path,
) -> None:
    sink, clock = _sink_with_units(tmp_path), _clock_at(60)

    def spec(sqlstate: str, op: str, value: float) -> Any:
        return check(check="workload", name="denied", workload="api", stat="sqlstate_ratio",
                     sqlstate=sqlstate, op=op, value=value, over_s=20)  # fmt: skip

    denied = await _evaluate(spec("42501", "<=", 0.01), clock=clock, sink=sink)
    serialization_class = await _evaluate(spec("40", "==", 0.1), clock=clock, sink=sink)
    assert denied.passed is False
    assert denied.observed == {"sqlstate_ratio": pytest.approx(0.2), "n": 50}
    assert denied.expected == "sqlstate_ratio(42501) <= 0.01"
    assert serialization_class.passed is True


async def test_workload_check_relative_to_a_baseline_compares_the_ratio(
    tmp_path: Path,
) -> None:
    sink, clock = _sink_with_units(tmp_path), _clock_at(60)

    def spec(op: str, value: float) -> Any:
        return check(check="workload", name="p95_vs_before", workload="api", stat="p95_ms",
                     op=op, value=value, over_s=20, relative_to="baseline",
                     baseline={"since_s": 0, "until_s": 20})  # fmt: skip

    at_most_twice = await _evaluate(spec("<=", 2), clock=clock, sink=sink)
    at_least_twice = await _evaluate(spec(">=", 2), clock=clock, sink=sink)
    assert at_most_twice.passed is False
    assert at_most_twice.observed["baseline"] == pytest.approx(10.0)
    assert at_most_twice.observed["baseline_n"] == 100  # parts and memory are not both counted
    assert at_most_twice.observed["ratio"] == pytest.approx(3.0)
    assert at_least_twice.passed is True
    assert "x baseline [0, 20) s" in at_least_twice.expected


async def test_a_window_with_fewer_units_than_min_units_is_no_evidence(tmp_path: Path) -> None:
    """The window over t in [40, 60) holds 50 units: a check that needs 60 fails and says
    why, one that needs 50 judges them."""
    sink, clock = _sink_with_units(tmp_path), _clock_at(60)

    def spec(min_units: int) -> Any:
        return check(check="workload", name="served", workload="api", stat="error_ratio",
                     op="<=", value=0.5, over_s=20, min_units=min_units)  # fmt: skip

    thin = await _evaluate(spec(60), clock=clock, sink=sink)
    enough = await _evaluate(spec(50), clock=clock, sink=sink)
    assert thin.passed is False
    assert thin.error is not None and "only 50 units" in thin.error
    assert enough.passed is True and enough.error is None


@pytest.mark.parametrize(
    "stat,op,value,min_units,refused",
    [
        ("on_time_ratio", ">=", 0.99, 60, True),  # one late checkout of 60 decides it
        ("on_time_ratio", ">=", 0.99, 100, False),
        ("on_time_ratio", ">", 0.95, 20, True),
        ("miss_ratio", "<=", 0.05, 20, False),
        ("error_ratio", "<=", 0.0, 5, False),  # every unit must succeed: deliberate
    ],
)
def test_a_ratio_threshold_must_tolerate_one_bad_unit_of_min_units(
    stat: str, op: str, value: float, min_units: int, refused: bool
) -> None:
    fields = {"check": "workload", "name": "w", "workload": "api", "stat": stat, "op": op,
              "value": value, "min_units": min_units}  # fmt: skip
    if refused:
        with pytest.raises(ValueError, match="one bad unit decides it"):
            WorkloadCheck.model_validate(fields)
    else:
        WorkloadCheck.model_validate(fields)


async def test_a_baseline_window_that_has_not_ended_is_not_evidence(tmp_path: Path) -> None:
    sink = _sink_with_units(tmp_path)
    rec = await _evaluate(
        check(check="workload", name="early", workload="api", stat="count", op="<=", value=2,
              relative_to="baseline", baseline={"since_s": 0, "until_s": 100}),
        clock=_clock_at(60),
        sink=sink,
    )  # fmt: skip
    assert rec.passed is False
    assert rec.error is not None and "has not ended" in rec.error


async def test_metric_check_relative_to_a_baseline_compares_the_ratio() -> None:
    # 1 byte/s before the fault, 3 bytes/s over the last 10 s.
    frame = _frame(
        [(float(t), "db.temp_bytes", "", float(t if t <= 50 else 50 + 3 * (t - 50)))
         for t in range(0, 61)]
    )  # fmt: skip
    sources = CheckSources(metrics=lambda: frame)

    def spec(op: str, value: float) -> Any:
        return check(check="metric", name="spill_vs_before", metric="db.temp_bytes",
                     stat="rate_per_s", op=op, value=value, over_s=10, relative_to="baseline",
                     baseline={"since_s": 0, "until_s": 30})  # fmt: skip

    clock = _clock_at(60)
    worse = await _evaluate(spec("<=", 2), clock=clock, sources=sources)
    assert worse.passed is False
    assert worse.observed["baseline"] == pytest.approx(1.0)
    assert worse.observed["ratio"] == pytest.approx(3.0, rel=0.05)


# -- report checks -------------------------------------------------------------------------
REPORTS = [
    {"task_id": "t1", "summary": "first look", "affected_ids": [1], "call_id": "c1", "t_scn": 5},
    {
        "task_id": "t1",
        "summary": "Lock held by batch session 4242; terminated it",
        "affected_ids": ["17", 42, 99],
        "rows_fixed": "30000",
        "call_id": "c2",
        "t_scn": 9,
    },
]


def report_check(**fields: Any) -> ReportCheck:
    spec = check(check="report", name="r", **fields)
    assert isinstance(spec, ReportCheck)
    return spec


@pytest.mark.parametrize(
    ("fields", "passed"),
    [
        ({"field": "affected_ids", "contains_all": [17, 42]}, True),
        ({"field": "affected_ids", "contains_all": [17, 43]}, False),
        ({"field": "affected_ids", "contains_none": [1]}, True),  # only the last report counts
        ({"field": "affected_ids", "contains_none": [1], "reports": "any"}, True),
        ({"field": "affected_ids", "contains_all": [1], "reports": "any"}, True),
        ({"field": "summary", "contains_any": ["batch"]}, True),
        ({"field": "summary", "contains_any": ["42"]}, False),  # whole words: 4242 is not 42
        ({"field": "summary", "matches": r"session \d+"}, True),
        ({"field": "rows_fixed", "op": ">=", "value": 30000}, True),
        ({"field": "rows_fixed", "op": "<", "value": 100}, False),
        ({"field": "summary", "op": ">", "value": 1}, False),  # not a number
        ({"field": "root_cause", "matches": "."}, False),  # no such field
        ({"field": "affected_ids", "contains_all": [1], "task_id": "t2"}, False),
    ],
)
def test_report_check_judges_a_field_of_the_agents_report(
    fields: dict[str, Any], passed: bool
) -> None:
    assert judge_report_check(report_check(**fields), REPORTS).passed is passed


def test_report_check_evidence_names_the_report_and_what_failed() -> None:
    rec = judge_report_check(report_check(field="affected_ids", contains_all=[17, 43]), REPORTS)
    assert rec.observed["call_id"] == "c2"
    assert rec.observed["failed"] == ["contains_all: missing [43]"]
    assert rec.expected == "last report: affected_ids contains all [17, 43]"


def test_a_run_without_a_report_fails_every_report_check() -> None:
    rec = judge_report_check(report_check(field="summary", matches="."), [])
    assert rec.passed is False and rec.error == "no report submitted"


async def test_a_report_check_outside_the_terminal_section_is_not_evaluated_live() -> None:
    rec = await _evaluate(report_check(field="summary", matches="."))
    assert rec.passed is False
    assert rec.error is not None and "judged at scoring" in rec.error


# -- in a run ------------------------------------------------------------------------------
RUN = """\
format: 2
id: t-checks-v2
title: Test - format v2 checks in a run
mode: bounded
agent: {time_budget_s: 20}
database:
  library: shop
  params: {customers: 2000, products: 400, orders: 4000}
preparation:
  warmup_s: 2
  manifestation:
    - check: plan
      name: history_uses_customer_index
      sql: SELECT id FROM public.orders WHERE customer_id = 42
      role: app_rw
      relation: orders
      has_index: [orders_customer_idx]
workloads:
  - {name: reads, type: oltp, mix: {history: 1}, rate_per_s: 5, deadline_ms: 500}
events:
  - id: task
    at: 0
    alert: {title: History is slow}
reference:
  steps:
    - tool: execute_sql
      args: {sql: "DO $$ BEGIN RAISE LOG 'checks-v2 run marker'; END $$"}
  report: {summary: Looked at it, affected_ids: [17, 42]}
evaluation:
  verification_s: 4
  terminal:
    - {check: report, name: names_the_orders, field: affected_ids, contains_all: [17, 42],
       task_id: task}
    - {check: report, name: gives_a_root_cause, field: root_cause, matches: vacuum}
    - {check: server_log, name: marker_logged, pattern: "LOG:  checks-v2 run marker",
       since_s: 0, op: ">=", value: 1}
    - {check: metric, name: commits_flow, metric: db.xact_commit, stat: increase, over_s: 4,
       op: ">", value: 0}
    - {check: workload, name: reads_served, workload: reads, stat: count, over_s: 4,
       op: ">", value: 0}
"""


async def test_new_checks_run_live_and_report_checks_are_judged_at_scoring(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t-checks-v2.yaml"
    path.write_text(RUN)
    result = await run_scenario(
        path, RunOptions(time_scale=0.5, runs_dir=tmp_path / "runs", agent="reference")
    )
    assert result.status == "completed", result.reason
    records = [r for r in read_trace(result.run_dir) if isinstance(r, CheckRecord)]
    by_name = {r.name: r for r in records}
    assert by_name["history_uses_customer_index"].passed is True
    assert by_name["marker_logged"].passed is True, by_name["marker_logged"]
    assert by_name["commits_flow"].passed is True, by_name["commits_flow"]
    assert by_name["reads_served"].passed is True
    # Report checks leave no live record: scoring judges them from the recorded report.
    assert "names_the_orders" not in by_name and "gives_a_root_cause" not in by_name
    verdict = score_run(result.run_dir)
    terminal = {c.name: c for c in verdict.terminal_acceptance.checks}
    assert verdict.terminal_acceptance.missing == []
    assert terminal["names_the_orders"].passed is True
    assert terminal["gives_a_root_cause"].passed is False
    assert terminal["gives_a_root_cause"].observed["failed"] == ["the report has no root_cause"]
    assert verdict.terminal_acceptance.passed is False
    assert score_run(result.run_dir) == verdict  # re-scoring is a pure function of the run


# -- malformed checks fail at load time ----------------------------------------------------
def _scenario(tmp_path: Path, section: str, item: dict[str, Any], **top: Any) -> Path:
    data: dict[str, Any] = {
        "format": 2,
        "id": "t-bad-check",
        "title": "bad check",
        "mode": "bounded",
        "agent": {"time_budget_s": 30},
        "database": {"library": "shop"},
        "workloads": [{"name": "api", "type": "oltp", "mix": {"history": 1},
                       "rate_per_s": 5, "deadline_ms": 200}],
        "events": [{"id": "task", "at": 0, "alert": {"title": "something"}}],
        "evaluation": {},
    }  # fmt: skip
    data.update(top)
    head, tail = section.split(".")
    data.setdefault(head, {}).setdefault(tail, []).append(item)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


PLAN = {"check": "plan", "name": "p", "sql": "SELECT 1"}
LOG = {"check": "server_log", "name": "l", "pattern": "PANIC", "op": "==", "value": 0}
WORKLOAD = {"check": "workload", "name": "w", "workload": "api", "op": "<", "value": 1}
METRIC = {"check": "metric", "name": "m", "op": "<", "value": 1, "over_s": 10}
REPORT = {"check": "report", "name": "r", "field": "summary"}


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({**PLAN, "has_node": ["SeqScan"]},
         ["evaluation.terminal[0].plan.has_node", "unknown plan node type 'SeqScan'",
          "did you mean Seq Scan"]),
        (PLAN, ["evaluation.terminal[0].plan", "needs a predicate: has_node"]),
        ({**PLAN, "sql": "EXPLAIN SELECT 1", "has_node": ["Result"]},
         ["evaluation.terminal[0].plan.sql", "the check adds EXPLAIN"]),
        ({**PLAN, "has_node": ["Result"], "max_row_misestimate": 10},
         ["evaluation.terminal[0].plan.max_row_misestimate", "analyze: true"]),
        ({**PLAN, "has_node": ["Result"], "max_row_misestimate": 0.5, "analyze": True},
         ["plan.max_row_misestimate", "greater than or equal to 1"]),
        ({**LOG, "pattern": "(unclosed", "over_s": 10},
         ["evaluation.terminal[0].server_log.pattern", "invalid regular expression"]),
        (LOG, ["evaluation.terminal[0].server_log", "give a window: over_s"]),
        ({**LOG, "over_s": 10, "since_s": 0}, ["server_log", "not both"]),
        ({**LOG, "since_s": 5, "until_s": 5}, ["server_log", "until_s (5.0) must be after"]),
        ({**WORKLOAD, "stat": "sqlstate_ratio"},
         ["evaluation.terminal[0].workload.sqlstate", "needs the SQLSTATE"]),
        ({**WORKLOAD, "stat": "sqlstate_ratio", "sqlstate": "4250"},
         ["evaluation.terminal[0].workload.sqlstate", "should match pattern"]),
        ({**WORKLOAD, "stat": "error_ratio", "sqlstate": "42501"},
         ["workload.sqlstate", "only stat sqlstate_ratio"]),
        ({**WORKLOAD, "stat": "p95_ms", "relative_to": "baseline"},
         ["evaluation.terminal[0].workload.baseline", "relative_to: baseline needs"]),
        ({**WORKLOAD, "stat": "p95_ms", "baseline": {"since_s": 0, "until_s": 10}},
         ["workload.baseline", "needs relative_to: baseline"]),
        ({**METRIC, "metric": "db.temp_byte", "stat": "increase"},
         ["evaluation.terminal[0].metric: unknown metric 'db.temp_byte' on postgres",
          "did you mean db.temp_bytes"]),
        ({**METRIC, "metric": "db.temp_bytes", "stat": "mean"},
         ["evaluation.terminal[0].stat: db.temp_bytes is a counter"]),
        ({**METRIC, "metric": "db.temp_bytes", "stat": "increase", "label": "table=x"},
         ["evaluation.terminal[0].label: db.temp_bytes has no labels"]),
        ({**METRIC, "metric": "table.seq_scan", "stat": "increase", "label": "orders"},
         ["evaluation.terminal[0].label", "labels look like table=..."]),
        (REPORT, ["evaluation.terminal[0].report", "needs a predicate: contains_all"]),
        ({**REPORT, "matches": "[x"},
         ["evaluation.terminal[0].report.matches", "invalid regular expression"]),
        ({**REPORT, "op": ">="}, ["evaluation.terminal[0].report", "op and value"]),
        ({**REPORT, "field": "a..b", "matches": "x"},
         ["evaluation.terminal[0].report.field", "should match pattern"]),
        ({**REPORT, "matches": "x", "by_s": 10},
         ["evaluation.terminal[0].report.by_s: unknown field"]),
    ],
)  # fmt: skip
def test_a_malformed_check_is_refused_at_load_time_naming_the_field(
    tmp_path: Path, item: dict[str, Any], expected: list[str]
) -> None:
    path = _scenario(tmp_path, "evaluation.terminal", item)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    for fragment in expected:
        assert fragment in str(info.value), str(info.value)


def test_a_report_check_is_refused_outside_the_terminal_section(tmp_path: Path) -> None:
    path = _scenario(tmp_path, "preparation.manifestation", {**REPORT, "matches": "x"})
    with pytest.raises(ScenarioError, match=r"preparation.manifestation\[0\]: a report check"):
        load_scenario(path)


def test_a_bounded_scenarios_baseline_ends_by_t0_in_the_warm_up_or_history(
    tmp_path: Path,
) -> None:
    item = {**WORKLOAD, "stat": "p95_ms", "over_s": 10, "relative_to": "baseline",
            "baseline": {"since_s": 0, "until_s": 10}}  # fmt: skip
    path = _scenario(tmp_path, "evaluation.terminal", item)
    with pytest.raises(ScenarioError, match="baseline ends at or before t = 0"):
        load_scenario(path)
    faulty = {**item, "baseline": {"since_s": -20, "until_s": 0}}  # the faulty warm-up
    sc, _, _ = load_scenario(_scenario(tmp_path, "evaluation.terminal", faulty))
    loaded = sc.evaluation.terminal[0]
    assert isinstance(loaded, WorkloadCheck) and loaded.baseline is not None


def _persistent(tmp_path: Path, baseline: dict[str, float]) -> Path:
    item = {**WORKLOAD, "stat": "p95_ms", "over_s": 10, "relative_to": "baseline",
            "baseline": baseline}  # fmt: skip
    return _scenario(
        tmp_path,
        "evaluation.terminal",
        item,
        mode="persistent",
        horizon_s=600,
        agent={},
        events=[
            {"id": "inspect", "at": 0, "inspection": {"title": "shift start"}},
            {"id": "fault", "at": 120, "fault": {"kind": "sql", "sql": "SELECT 1"},
             "alert": {"title": "slow"}},
        ],
    )  # fmt: skip


def test_a_baseline_must_end_before_the_first_fault(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"ends at 150.0 s, after the first fault \(t = 120"):
        load_scenario(_persistent(tmp_path, {"since_s": 30, "until_s": 150}))
    sc, _, _ = load_scenario(_persistent(tmp_path, {"since_s": 30, "until_s": 120}))
    loaded = sc.evaluation.terminal[0]
    assert isinstance(loaded, WorkloadCheck) and loaded.baseline is not None


def test_a_baseline_that_timed_out_whole_still_judges_a_latency_ratio() -> None:
    """At the speed of use a broken baseline can time out whole (pg-qt-01 at 1.0): counted at
    the time each unit waited (a lower bound), it still has a p95; a completed-only p95 has
    none and the check could never pass."""
    from dbaops.workloads.sink import censored_latency_stat, workload_stat

    timed_out = pl.DataFrame(
        {
            "outcome": ["error"] * 9 + ["late"],
            "error": ["client_timeout"] * 7 + ["client_attempt_timeout", "boom", None],
            "latency_ms": [5000.0] * 8 + [3.0, 2400.0],
        }
    )
    assert workload_stat(timed_out.filter(pl.col("outcome") == "error"), "p95_ms") is None
    base = censored_latency_stat(timed_out, "p95_ms")
    # every unit the client gave up on (its timeout, or every attempt's) counts at the time it
    # waited; the failed-fast unit ("boom") is not a latency
    assert base == pytest.approx(5000.0)
    only_errors = timed_out.filter(pl.col("error") == "boom")
    assert censored_latency_stat(only_errors, "p95_ms") is None


def test_a_slow_answer_is_a_miss_and_not_a_server_error() -> None:
    """A premise of a slow page that still answers (tb-qt-05) is judged on the errors that are
    not the client giving up: a unit that outlived its timeout is a miss; a server error or a
    broken connection is a refusal."""
    from dbaops.workloads.sink import workload_stat

    frame = pl.DataFrame(
        {
            "outcome": ["error", "error", "error", "late", "on_time"],
            "error": ["client_timeout", "client_attempt_timeout", "boom", None, None],
            "latency_ms": [10000.0, 900.0, 3.0, 900.0, 3.0],
        }
    )
    assert workload_stat(frame, "error_ratio") == pytest.approx(0.6)
    assert workload_stat(frame, "server_error_ratio") == pytest.approx(0.2)
    assert workload_stat(frame, "miss_ratio") == pytest.approx(0.8)
